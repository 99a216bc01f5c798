// Smoke test of the CUDA DeviceKernels through the registry. The op-by-op
// comparisons with the CPU live in core's device-parameterised op tests;
// this checks registration, the no-GPU error, and one pass through copies,
// a strided elementwise kernel, a reduction, softmax and a GEMM.
#include "core/cuda/cuda_kernels.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_status.h"
#include "core/device_kernels.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

TEST(CudaKernelsTest, RegisteredAndSaysWhyADeviceIsUnusable) {
  std::string why;
  const int count = DeviceCount(&why);
  absl::StatusOr<DeviceKernels*> k = KernelsFor(Device::CUDA(0), "Smoke");
  if (count == 0) {
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(k.status().message(), "no CUDA device visible")) << k.status();
    EXPECT_FALSE(Contains(k.status().message(), "not linked")) << k.status();
  } else {
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(*k, &CudaDeviceKernels());
    EXPECT_NE((*k)->CurrentStream(0), nullptr);
  }
  absl::StatusOr<DeviceKernels*> missing = KernelsFor(Device::CUDA(count + 3), "Smoke");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(missing.status().message(), count == 0 ? "no CUDA device visible"
                                                              : "does not exist"))
      << missing.status();
}

class CudaKernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DeviceKernels*> k = KernelsFor(Device::CUDA(0), "Smoke");
    if (!k.ok()) GTEST_SKIP() << k.status();
    k_ = *k;
  }
  // A contiguous device copy of a CPU tensor.
  Tensor ToDevice(const Tensor& host) {
    absl::StatusOr<Tensor> contiguous = host.Contiguous();
    EXPECT_TRUE(contiguous.ok()) << contiguous.status();
    absl::StatusOr<Tensor> dev = Tensor::Empty(host.shape(), host.dtype(), Device::CUDA(0));
    EXPECT_TRUE(dev.ok()) << dev.status();
    EXPECT_TRUE(k_->CopyFromHost(dev->raw_data(), contiguous->raw_data(), dev->nbytes(), 0).ok());
    return *dev;
  }
  // A CPU copy of a contiguous device tensor.
  Tensor ToHost(const Tensor& dev) {
    absl::StatusOr<Tensor> host = Tensor::Empty(dev.shape(), dev.dtype());
    EXPECT_TRUE(host.ok()) << host.status();
    EXPECT_TRUE(dev.is_contiguous());
    EXPECT_TRUE(k_->CopyToHost(host->raw_data(), dev.raw_data(), dev.nbytes(), 0).ok());
    return *host;
  }
  Tensor Empty(Shape shape, DType dtype, Device device) {
    absl::StatusOr<Tensor> t = Tensor::Empty(std::move(shape), dtype, device);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  static Tensor Values(Shape shape, DType dtype) {
    std::vector<float> v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * i) * (1.0f + i % 7);
    absl::StatusOr<Tensor> t = Tensor::FromVector(v, shape, dtype);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  static void ExpectNear(const Tensor& got, const Tensor& want, double tol) {
    ASSERT_EQ(got.shape(), want.shape());
    std::vector<double> g = got.ToVector<double>(), w = want.ToVector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
    }
  }
  DeviceKernels* k_ = nullptr;
};

TEST_F(CudaKernelsGpuTest, StridedAddWithMixedDtypesMatchesCpu) {
  // out[5, 3] = x^T (f32, a transposed view) + 0.5 * b (bf16, broadcast row).
  Tensor x = Values({3, 5}, DType::kF32);
  Tensor b = Values({1, 3}, DType::kBF16);
  Tensor xt = *x.Transpose(0, 1);
  Tensor bb = *b.Expand({5, 3});
  Tensor want = Empty({5, 3}, DType::kF32, Device::CPU());
  ASSERT_TRUE(CpuKernels().Binary(BinaryOp::kAdd, want, xt, bb, 0.5).ok());

  Tensor dx = ToDevice(x), db = ToDevice(b);
  Tensor out = Empty({5, 3}, DType::kF32, Device::CUDA(0));
  ASSERT_TRUE(k_->Binary(BinaryOp::kAdd, out, *dx.Transpose(0, 1), *db.Expand({5, 3}), 0.5).ok());
  ExpectNear(ToHost(out), want, 0);
}

TEST_F(CudaKernelsGpuTest, ContiguousRunsMatchCpuAroundThePackSize) {
  // Contiguous operands go through the packed kernels (8 elements a thread),
  // with an element-by-element tail; a base one element past an aligned one
  // must take the strided kernel instead. Both must give the CPU's bits.
  for (int64_t n : {1, 7, 8, 9, 4096 + 5}) {
    for (int64_t skip : {0, 1}) {
      for (DType a_dtype : {DType::kF32, DType::kBF16}) {
        for (DType b_dtype : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(absl::StrCat("n ", n, " skip ", skip, " a ", std::string(DTypeName(a_dtype)),
                                    " b ", std::string(DTypeName(b_dtype))));
          Tensor a = *Values({n + skip}, a_dtype).Narrow(0, skip, n);
          Tensor b = *Values({n + skip}, b_dtype).Narrow(0, skip, n);
          Tensor da = *ToDevice(Values({n + skip}, a_dtype)).Narrow(0, skip, n);
          Tensor db = *ToDevice(Values({n + skip}, b_dtype)).Narrow(0, skip, n);
          Tensor want = Empty({n}, a_dtype, Device::CPU());
          ASSERT_TRUE(CpuKernels().Binary(BinaryOp::kAdd, want, a, b, 0.5).ok());
          Tensor got = Empty({n}, a_dtype, Device::CUDA(0));
          ASSERT_TRUE(k_->Binary(BinaryOp::kAdd, got, da, db, 0.5).ok());
          ExpectNear(ToHost(got), want, 0);
          if (a_dtype != b_dtype) continue;
          Tensor want_gelu = Empty({n}, a_dtype, Device::CPU());
          ASSERT_TRUE(CpuKernels().Unary(UnaryOp::kGelu, want_gelu, a, 0.0).ok());
          Tensor got_gelu = Empty({n}, a_dtype, Device::CUDA(0));
          ASSERT_TRUE(k_->Unary(UnaryOp::kGelu, got_gelu, da, 0.0).ok());
          // erff differs between the CPU and CUDA libraries by an ulp or so.
          ExpectNear(ToHost(got_gelu), want_gelu, a_dtype == DType::kF32 ? 1e-6 : 1e-2);
        }
      }
    }
  }
}

TEST_F(CudaKernelsGpuTest, ReduceSoftmaxAndGemmMatchCpu) {
  // [outer, n, inner]: strided columns, short rows, long rows (block per row;
  // the last in whole packs).
  for (Shape s : {Shape{4, 6, 3}, Shape{5, 7, 1}, Shape{2, 300, 1}, Shape{3, 520, 1}}) {
    SCOPED_TRACE(ShapeString(s));
    const int64_t outer = s[0], n = s[1], inner = s[2];
    Tensor x = Values(s, DType::kBF16);
    Tensor dx = ToDevice(x);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kArgmax}) {
      const DType out_dtype = op == ReduceOp::kArgmax ? DType::kI64 : DType::kBF16;
      Tensor want = Empty({outer, inner}, out_dtype, Device::CPU());
      ASSERT_TRUE(CpuKernels().Reduce(op, want, x, outer, n, inner).ok());
      Tensor got = Empty({outer, inner}, out_dtype, Device::CUDA(0));
      ASSERT_TRUE(k_->Reduce(op, got, dx, outer, n, inner).ok());
      ExpectNear(ToHost(got), want, 1e-2);
    }
    for (bool log : {false, true}) {
      Tensor want = Empty(s, DType::kBF16, Device::CPU());
      ASSERT_TRUE(CpuKernels().Softmax(want, x, outer, n, inner, log).ok());
      Tensor got = Empty(s, DType::kBF16, Device::CUDA(0));
      ASSERT_TRUE(k_->Softmax(got, dx, outer, n, inner, log).ok());
      ExpectNear(ToHost(got), want, 1e-2);
    }
  }

  // C[4, 3] = A[4, 6] @ B[6, 3] through cuBLAS on the compute stream.
  Tensor a = Values({4, 6}, DType::kF32), bm = Values({6, 3}, DType::kF32);
  Tensor c = Empty({4, 3}, DType::kF32, Device::CPU());
  ASSERT_TRUE(CpuKernels()
                  .Gemm(0, false, false, 4, 3, 6, 1.0f, DType::kF32, a.raw_data(), 6,
                        bm.raw_data(), 3, 0.0f, DType::kF32, c.raw_data(), 3)
                  .ok());
  Tensor da = ToDevice(a), dbm = ToDevice(bm);
  Tensor dc = Empty({4, 3}, DType::kF32, Device::CUDA(0));
  ASSERT_TRUE(k_->Gemm(0, false, false, 4, 3, 6, 1.0f, DType::kF32, da.raw_data(), 6,
                       dbm.raw_data(), 3, 0.0f, DType::kF32, dc.raw_data(), 3)
                  .ok());
  ExpectNear(ToHost(dc), c, 1e-5);
}

TEST_F(CudaKernelsGpuTest, IndexOpsThroughStridedViewsMatchCpu) {
  // Gather rows {3, 0, 3} of a transposed view, then scatter-add a bf16
  // source with repeated indices into a narrowed (non-contiguous) f32 view.
  // The index kernels take contiguous operands of one dtype
  // (core/device_kernels.h), so the views and the conversion go through the
  // CUDA Copy kernel first, as ops::IndexSelect / ops::IndexAdd do.
  std::vector<int64_t> ids = {3, 0, 3};
  Tensor index = *Tensor::FromVector(ids, {3});
  Tensor x = Values({5, 4}, DType::kF32);
  Tensor xt = *x.Transpose(0, 1);  // [4, 5]
  Tensor want_sel = Empty({3, 5}, DType::kF32, Device::CPU());
  ASSERT_TRUE(CpuKernels().IndexSelect(want_sel, *xt.Contiguous(), 0, index).ok());
  Tensor dindex = ToDevice(index);
  Tensor dx = ToDevice(x);
  Tensor sel = Empty({3, 5}, DType::kF32, Device::CUDA(0));
  ASSERT_TRUE(k_->IndexSelect(sel, *dx.Transpose(0, 1)->Contiguous(), 0, dindex).ok());
  ExpectNear(ToHost(sel), want_sel, 0);
  // A strided operand is refused rather than read as if it were contiguous.
  EXPECT_EQ(k_->IndexSelect(sel, *dx.Transpose(0, 1), 0, dindex).code(),
            absl::StatusCode::kInvalidArgument);

  Tensor src = Values({3, 2}, DType::kBF16);
  Tensor base = Values({4, 6}, DType::kF32);
  Tensor want_add = *base.Clone();
  Tensor src_f32 = Empty({3, 2}, DType::kF32, Device::CPU());
  ASSERT_TRUE(CpuKernels().Copy(src_f32, src).ok());
  Tensor part = *want_add.Narrow(1, 2, 2)->Contiguous();
  ASSERT_TRUE(CpuKernels().IndexAdd(part, 0, index, src_f32).ok());
  ASSERT_TRUE(CpuKernels().Copy(*want_add.Narrow(1, 2, 2), part).ok());
  Tensor dbase = ToDevice(base);
  Tensor dpart = *dbase.Narrow(1, 2, 2)->Contiguous();
  ASSERT_TRUE(k_->IndexAdd(dpart, 0, dindex, *ToDevice(src).To(DType::kF32)).ok());
  ASSERT_TRUE(k_->Copy(*dbase.Narrow(1, 2, 2), dpart).ok());
  ExpectNear(ToHost(dbase), want_add, 1e-6);
}

}  // namespace
}  // namespace tpx::cuda
