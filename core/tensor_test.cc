#include "core/tensor.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 2x3 f32 tensor holding 0..5.
Tensor Iota23() { return *Tensor::FromVector<float>({0, 1, 2, 3, 4, 5}, {2, 3}); }

TEST(ShapeTest, Helpers) {
  EXPECT_EQ(ShapeString({2, 3}), "[2, 3]");
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(*NormalizeDim(-1, 3, "x"), 2);
  EXPECT_THAT(NormalizeDim(3, 3, "MyOp").status().message(), HasSubstr("MyOp: dim 3"));
}

TEST(TensorTest, UndefinedByDefault) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.ToString(), "undefined");
  EXPECT_TRUE(t.ToVector<float>().empty());
}

TEST(TensorTest, FactoriesAndMetadata) {
  Tensor z = *Tensor::Zeros({2, 3, 4}, DType::kBF16);
  EXPECT_TRUE(z.defined());
  EXPECT_EQ(z.dim(), 3);
  EXPECT_EQ(z.size(-1), 4);
  EXPECT_EQ(z.size(0), 2);
  EXPECT_EQ(z.numel(), 24);
  EXPECT_EQ(z.nbytes(), 48u);
  EXPECT_EQ(z.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(z.dtype(), DType::kBF16);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.ToString(), "bf16[2, 3, 4]");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.raw_data()) % 64, 0u);
  for (float v : z.ToVector<float>()) EXPECT_EQ(v, 0.0f);

  EXPECT_THAT(Tensor::Ones({3}, DType::kI32)->ToVector<int32_t>(), ElementsAre(1, 1, 1));
  EXPECT_THAT(Tensor::Full({2}, 2.5, DType::kF16)->ToVector<float>(), ElementsAre(2.5f, 2.5f));
  EXPECT_THAT(Tensor::Arange(5)->ToVector<int64_t>(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(Tensor::Arange(1.0, 2.0, 0.25, DType::kF32)->ToVector<float>(),
              ElementsAre(1.0f, 1.25f, 1.5f, 1.75f));
  EXPECT_THAT(Tensor::Arange(3.0, 0.0, -1.0, DType::kI32)->ToVector<int32_t>(),
              ElementsAre(3, 2, 1));
  Tensor s = *Tensor::Scalar(7.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.Item(), 7.0);
}

TEST(TensorTest, FactoryErrors) {
  EXPECT_THAT(Tensor::Empty({2, -1}).status().message(), HasSubstr("[2, -1]"));
  absl::Status cuda = Tensor::Zeros({2}, DType::kF32, Device::CUDA(0)).status();
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cuda.message(), HasSubstr("cuda:0"));
  absl::Status count = Tensor::FromVector<float>({1, 2, 3}, {2, 2}).status();
  EXPECT_THAT(count.message(), HasSubstr("3 values do not fill shape [2, 2]"));
  EXPECT_FALSE(Tensor::Arange(0.0, 1.0, 0.0).ok());
}

TEST(TensorTest, FromVectorAllTypesAndConversions) {
  Tensor f = *Tensor::FromVector<float>({1.5f, -2.0f}, {2});
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_EQ(f.data<float>()[1], -2.0f);
  Tensor i = *Tensor::FromVector<int32_t>({1, -2}, {2});
  EXPECT_EQ(i.dtype(), DType::kI32);
  Tensor l = *Tensor::FromVector<int64_t>({int64_t{1} << 40}, {1});
  EXPECT_EQ(l.ToVector<int64_t>()[0], int64_t{1} << 40);
  Tensor b = *Tensor::FromVector<bool>({true, false, true}, {3});
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_THAT(b.ToVector<bool>(), ElementsAre(true, false, true));
  EXPECT_THAT(b.ToVector<float>(), ElementsAre(1.0f, 0.0f, 1.0f));
  Tensor h = *Tensor::FromVector<float>({1.0f, 1.0f + 1.0f / 2048}, {2}, DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.data<F16>()[1].bits, 0x3c00);  // tie rounded to even
  Tensor bf = *Tensor::FromVector<float>({3.0f}, {1}, DType::kBF16);
  EXPECT_EQ(bf.data<BF16>()[0].bits, 0x4040);
  Tensor d = *Tensor::FromVector<double>({0.5, 0.25}, {2});
  EXPECT_EQ(d.dtype(), DType::kF32);
  EXPECT_THAT(f.ToVector<int32_t>(), ElementsAre(1, -2));
  EXPECT_THAT(f.ToVector<double>(), ElementsAre(1.5, -2.0));
}

TEST(TensorDeathTest, WrongTypedAccessIsAProgrammingError) {
  Tensor f = *Tensor::Zeros({2});
  EXPECT_DEATH(f.data<int32_t>(), "data<i32>\\(\\) on a f32\\[2\\] tensor");
}

TEST(TensorTest, NarrowSharesMemory) {
  Tensor x = Iota23();
  Tensor col = *x.Narrow(1, 1, 2);
  EXPECT_EQ(col.shape(), (Shape{2, 2}));
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_TRUE(col.SharesStorageWith(x));
  EXPECT_THAT(col.ToVector<float>(), ElementsAre(1, 2, 4, 5));
  col.data<float>()[0] = 100.0f;  // element [0, 1] of x
  EXPECT_EQ(x.Item({0, 1}), 100.0);
  Tensor row = *x.Narrow(-2, 1, 1);
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_THAT(row.ToVector<float>(), ElementsAre(3, 4, 5));
  EXPECT_THAT(x.Narrow(1, 2, 2).status().message(),
              HasSubstr("range [2, 4) out of bounds for dim 1 of shape [2, 3]"));
  EXPECT_FALSE(x.Narrow(2, 0, 1).ok());
}

TEST(TensorTest, Slice) {
  Tensor x = *Tensor::Arange(10, DType::kF32);
  EXPECT_THAT(x.Slice(0, 1, 8, 3)->ToVector<float>(), ElementsAre(1, 4, 7));
  EXPECT_THAT(x.Slice(0, -3, 100)->ToVector<float>(), ElementsAre(7, 8, 9));
  EXPECT_EQ(x.Slice(0, 5, 2)->numel(), 0);
  EXPECT_FALSE(x.Slice(0, 0, 5, 0).ok());
}

TEST(TensorTest, TransposePermuteAndContiguous) {
  Tensor x = Iota23();
  Tensor t = *x.Transpose(0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.SharesStorageWith(x));
  EXPECT_THAT(t.ToVector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  Tensor c = *t.Contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.SharesStorageWith(x));
  EXPECT_THAT(c.ToVector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  Tensor same = *x.Contiguous();
  EXPECT_TRUE(same.SharesStorageWith(x));

  Tensor y = *Tensor::Arange(24, DType::kF32)->View({2, 3, 4});
  Tensor p = *y.Permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.Item({3, 1, 2}), y.Item({1, 2, 3}));
  EXPECT_FALSE(y.Permute({0, 0, 1}).ok());
}

TEST(TensorTest, ViewAndReshape) {
  Tensor x = *Tensor::Arange(24, DType::kF32);
  Tensor v = *x.View({2, -1, 4});
  EXPECT_EQ(v.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(v.SharesStorageWith(x));
  EXPECT_THAT(x.View({5, -1}).status().message(), HasSubstr("cannot infer -1"));
  EXPECT_THAT(x.View({5, 5}).status().message(), HasSubstr("[24] (24 elements) cannot become [5, 5]"));

  // A transposed tensor cannot be flattened as a view, but Reshape copies.
  Tensor t = *v.Transpose(1, 2);  // [2, 4, 3]
  EXPECT_FALSE(t.View({24}).ok());
  Tensor r = *t.Reshape({24});
  EXPECT_FALSE(r.SharesStorageWith(x));
  EXPECT_EQ(r.Item({1}), 4.0);  // t[0, 0, 1] = v[0, 1, 0]
  // Merging dims that stay contiguous among themselves is a view: [2,4,3] -> [8, 3] is not,
  // but narrowing the last dim of [2, 3, 4] and merging the first two is.
  Tensor n = *v.Narrow(2, 0, 2);      // [2, 3, 2], strides [12, 4, 1]
  Tensor m = *n.View({6, 2});
  EXPECT_TRUE(m.SharesStorageWith(x));
  EXPECT_EQ(m.strides(), (Shape{4, 1}));
  EXPECT_THAT(m.ToVector<float>(), ElementsAre(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21));
  // Size-1 dims anywhere.
  Tensor s = *v.View({1, 2, 1, 12, 1});
  EXPECT_THAT(s.ToVector<float>(), testing::ContainerEq(x.ToVector<float>()));
  Tensor scalar = *Tensor::Scalar(3.0);
  EXPECT_EQ(scalar.View({1, 1})->Item({0, 0}), 3.0);
}

TEST(TensorTest, UnsqueezeSqueezeExpand) {
  Tensor x = Iota23();
  Tensor u = *x.Unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3}));
  EXPECT_TRUE(u.is_contiguous());
  EXPECT_EQ(x.Unsqueeze(-1)->shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(u.Squeeze(1)->shape(), (Shape{2, 3}));
  EXPECT_THAT(x.Squeeze(0).status().message(), HasSubstr("has size 2, not 1"));
  Tensor row = *Tensor::FromVector<float>({1, 2, 3}, {1, 3});
  Tensor e = *row.Expand({4, 2, -1});
  EXPECT_EQ(e.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.Item({3, 1, 2}), 3.0);
  EXPECT_FALSE(x.Expand({2, 4}).ok());
}

TEST(TensorTest, CloneCopyFromAndTo) {
  Tensor x = Iota23();
  Tensor c = *x.Clone();
  c.data<float>()[0] = 9;
  EXPECT_EQ(x.Item({0, 0}), 0.0);

  // Strided destination and strided source with a dtype change.
  Tensor dst = *Tensor::Zeros({3, 4}, DType::kBF16);
  Tensor window = *dst.Narrow(1, 1, 2);          // [3, 2] strided
  Tensor src = *x.Transpose(0, 1);               // [3, 2] strided f32
  ASSERT_TRUE(window.CopyFrom(src).ok());
  EXPECT_THAT(dst.ToVector<float>(), ElementsAre(0, 0, 3, 0, 0, 1, 4, 0, 0, 2, 5, 0));
  absl::Status bad = window.CopyFrom(x);
  EXPECT_THAT(bad.message(), HasSubstr("source shape [2, 3] differs from destination shape [3, 2]"));

  Tensor h = *x.To(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_THAT(h.ToVector<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
  Tensor i = *Tensor::FromVector<float>({1.7f, -1.7f}, {2})->To(DType::kI64);
  EXPECT_THAT(i.ToVector<int64_t>(), ElementsAre(1, -1));
  EXPECT_TRUE(x.To(DType::kF32)->SharesStorageWith(x));
}

// Large transposing copies take a tiled path; check it against element-wise
// reads for several layouts, dtype changes and batch dims.
TEST(TensorTest, TransposedCopiesOfLargeTensors) {
  Tensor x = *Tensor::Arange(3 * 70 * 90, DType::kF32)->View({3, 70, 90});
  struct Case {
    int64_t d0, d1;
    DType dtype;
  };
  // f32 -> f32 (and i32 -> i32 below) takes 16 x 16 register transposes
  // on AVX-512 CPUs: every element is checked, whole blocks and edges.
  for (const Case& c : {Case{1, 2, DType::kF32}, Case{0, 2, DType::kBF16}, Case{0, 1, DType::kF32},
                        Case{1, 2, DType::kI64}, Case{0, 2, DType::kF32}}) {
    Tensor t = *x.Transpose(c.d0, c.d1);
    Tensor dst = *Tensor::Empty(t.shape(), c.dtype);
    ASSERT_TRUE(dst.CopyFrom(t).ok());
    for (int64_t i = 0; i < t.size(0); ++i) {
      for (int64_t j = 0; j < t.size(1); ++j) {
        for (int64_t k = 0; k < t.size(2); ++k) {
          double want = t.Item({i, j, k});
          if (c.dtype == DType::kBF16) want = BF16ToFloat(FloatToBF16(static_cast<float>(want)));
          ASSERT_EQ(dst.Item({i, j, k}), want) << i << "," << j << "," << k;
        }
      }
    }
    EXPECT_EQ(t.Contiguous()->ToVector<double>(), t.ToVector<double>());
  }
  Tensor xi = *x.To(DType::kI32);
  Tensor ti = *xi.Transpose(1, 2);
  Tensor di = *ti.Contiguous();
  for (int64_t i = 0; i < ti.size(0); ++i) {
    for (int64_t j = 0; j < ti.size(1); ++j) {
      for (int64_t k = 0; k < ti.size(2); ++k) {
        ASSERT_EQ(di.Item({i, j, k}), ti.Item({i, j, k})) << i << "," << j << "," << k;
      }
    }
  }
}

TEST(TensorTest, StorageFreedWithLastView) {
  CpuAllocator& alloc = GetCpuAllocator();
  const int64_t before = alloc.CurrentBytes();
  Tensor view;
  {
    Tensor big = *Tensor::Zeros({1000});
    view = *big.Narrow(0, 10, 10);
    EXPECT_EQ(alloc.CurrentBytes(), before + 4000);
  }
  EXPECT_EQ(alloc.CurrentBytes(), before + 4000);  // the view keeps it alive
  view = Tensor();
  EXPECT_EQ(alloc.CurrentBytes(), before);
}

TEST(TensorTest, EmptyTensors) {
  Tensor e = *Tensor::Zeros({0, 3});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_TRUE(e.ToVector<float>().empty());
  EXPECT_EQ(e.View({3, 0})->shape(), (Shape{3, 0}));
  EXPECT_TRUE(e.Clone().ok());
}

}  // namespace
}  // namespace tpx
