// The CUDA fused kernels (fused_nn.cu, fused_training.cu) and the batched
// GEMM against the CPU kernels, called through DeviceKernels on shapes that
// take every launch path: a warp or a block per row, Packed runs or single
// elements (lengths off a multiple of 8, operands one element past an
// aligned start), several column tiles and row chunks, and the in-place
// forms. The op tests (core/ops_nn_test.cc, core/ops_training_test.cc)
// check both devices against double references on fewer shapes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compare_testutil.h"
#include "core/device_kernels.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

const Device kGpu = Device::CUDA(0);

std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

class CudaFusedKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DeviceKernels*> k = KernelsFor(kGpu, "CudaFusedKernelsTest");
    if (!k.ok()) GTEST_SKIP() << k.status();
    gpu_ = *k;
  }

  // A contiguous tensor on `device` whose data starts `skip` elements into
  // its storage (skip 1: not pack-aligned).
  static Tensor Empty(const Shape& shape, DType dtype, Device device, int64_t skip) {
    Tensor base = *Tensor::Empty({NumElements(shape) + skip}, dtype, device);
    return *base.Narrow(0, skip, NumElements(shape))->View(shape);
  }
  // `host` copied to the GPU at `skip`.
  static Tensor Gpu(const Tensor& host, int64_t skip) {
    Tensor t = Empty(host.shape(), host.dtype(), kGpu, skip);
    EXPECT_TRUE(t.CopyFrom(host).ok());
    return t;
  }
  static Tensor Cpu(const Shape& shape, DType dtype) {
    return *Tensor::Empty(shape, dtype, Device::CPU());
  }
  // rtol/atol for outputs in `dtype` that the two devices compute in f32
  // with sums in different orders.
  static double Rtol(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }
  static double Atol(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

  DeviceKernels* gpu_ = nullptr;
  DeviceKernels& cpu_ = CpuKernels();
};

TEST_F(CudaFusedKernelsTest, LayerNormForwardAndBackwardMatchCpu) {
  struct Case {
    int64_t rows, h;
  };
  // Warp rows in single elements and in packs (the forward holding 1, 2
  // and 4 packs per lane in registers, the last one short), block rows in packs and in
  // single elements, many row chunks of the column sums, two column tiles.
  for (const Case& c : {Case{5, 7}, Case{9, 64}, Case{7, 512}, Case{5, 1024}, Case{3, 776},
                        Case{6, 2056}, Case{4, 1500}, Case{1000, 24}, Case{40, 4096}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t skip : {0, 1}) {
        for (bool affine : {true, false}) {
          SCOPED_TRACE(
              absl::StrCat(c.rows, "x", c.h, " ", Name(dtype), " skip ", skip, " affine ", affine));
          const Shape shape = {c.rows, c.h};
          Tensor x = RandomTensor(shape, dtype, 1, -2.0f, 3.0f);
          Tensor g = RandomTensor(shape, dtype, 2);
          Tensor w = affine ? RandomTensor({c.h}, DType::kF32, 3, 0.5f, 1.5f) : Tensor();
          Tensor b = affine ? RandomTensor({c.h}, DType::kF32, 4) : Tensor();
          Tensor y = Cpu(shape, dtype), mean = Cpu({c.rows}, DType::kF32);
          Tensor rstd = Cpu({c.rows}, DType::kF32);
          ASSERT_TRUE(cpu_.LayerNorm(y, mean, rstd, x, w, b, c.rows, c.h, 1e-5).ok());
          Tensor gy = Empty(shape, dtype, kGpu, skip),
                 gmean = Empty({c.rows}, DType::kF32, kGpu, 0);
          Tensor grstd = Empty({c.rows}, DType::kF32, kGpu, 0);
          Tensor gw = affine ? Gpu(w, skip) : Tensor(), gb = affine ? Gpu(b, skip) : Tensor();
          Tensor gx = Gpu(x, skip);
          absl::Status s = gpu_->LayerNorm(gy, gmean, grstd, gx, gw, gb, c.rows, c.h, 1e-5);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(gy, y, Rtol(dtype), Atol(dtype)));
          EXPECT_TRUE(TensorsClose(gmean, mean, 1e-5, 1e-6));
          EXPECT_TRUE(TensorsClose(grstd, rstd, 1e-5, 1e-6));

          Tensor dx = Cpu(shape, dtype), dw = Cpu({c.h}, DType::kF32), db = Cpu({c.h}, DType::kF32);
          ASSERT_TRUE(cpu_.LayerNormBackward(dx, dw, db, g, x, mean, rstd, w, c.rows, c.h).ok());
          Tensor gdx = Empty(shape, dtype, kGpu, skip), gdw = Empty({c.h}, DType::kF32, kGpu, 0);
          Tensor gdb = Empty({c.h}, DType::kF32, kGpu, 0);
          s = gpu_->LayerNormBackward(gdx, gdw, gdb, Gpu(g, skip), gx, Gpu(mean, 0), Gpu(rstd, 0),
                                      gw, c.rows, c.h);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(gdx, dx, dtype == DType::kF32 ? 1e-4 : 1e-2,
                                   dtype == DType::kF32 ? 1e-4 : 1e-2));
          EXPECT_TRUE(TensorsClose(gdw, dw, 1e-4, 1e-3));
          EXPECT_TRUE(TensorsClose(gdb, db, 1e-4, 1e-3));
          // dbias alone.
          Tensor gdb_only = Empty({c.h}, DType::kF32, kGpu, 0);
          s = gpu_->LayerNormBackward(Tensor(), Tensor(), gdb_only, Gpu(g, skip), gx, Gpu(mean, 0),
                                      Gpu(rstd, 0), gw, c.rows, c.h);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(gdb_only, db, 1e-4, 1e-3));
        }
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, LayerNormBackwardOfNoRowsGivesZeroSums) {
  Tensor g = Empty({0, 5}, DType::kF32, kGpu, 0), x = Empty({0, 5}, DType::kF32, kGpu, 0);
  Tensor mean = Empty({0}, DType::kF32, kGpu, 0), rstd = Empty({0}, DType::kF32, kGpu, 0);
  Tensor dw = Empty({5}, DType::kF32, kGpu, 0), db = Empty({5}, DType::kF32, kGpu, 0);
  ASSERT_TRUE(dw.CopyFrom(*Tensor::Full({5}, 7.0)).ok());
  ASSERT_TRUE(gpu_->LayerNormBackward(Tensor(), dw, db, g, x, mean, rstd, Tensor(), 0, 5).ok());
  EXPECT_EQ(dw.ToVector<float>(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(db.ToVector<float>(), std::vector<float>(5, 0.0f));
}

TEST_F(CudaFusedKernelsTest, ScaledSoftmaxForwardAndBackwardMatchCpu) {
  struct Case {
    int64_t batch, m, n;
    bool causal;
  };
  // [1, 6, 3] causal: rows 0-2 see no column (all 0). The forward holds
  // warp rows in registers as 1, 2 and 4 packs per lane (causal rows fewer).
  for (const Case& c :
       {Case{2, 3, 5, true}, Case{3, 9, 64, true}, Case{2, 40, 512, true}, Case{1, 33, 1024, true},
        Case{2, 5, 808, false}, Case{2, 5, 1100, true}, Case{2, 4, 1032, true},
        Case{2, 7, 16, false}, Case{1, 6, 3, true}, Case{2, 3, 2000, false}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t skip : {0, 1}) {
        SCOPED_TRACE(absl::StrCat(c.batch, "x", c.m, "x", c.n, " causal ", c.causal, " ",
                                  Name(dtype), " skip ", skip));
        const Shape shape = {c.batch, c.m, c.n};
        const int64_t rows = c.batch * c.m;
        Tensor x = RandomTensor(shape, dtype, 7, -4.0f, 4.0f);
        Tensor y = Cpu(shape, dtype);
        ASSERT_TRUE(cpu_.ScaledSoftmax(y, x, c.batch, c.m, c.n, 0.3, c.causal).ok());
        Tensor gy = Empty(shape, dtype, kGpu, skip);
        absl::Status s = gpu_->ScaledSoftmax(gy, Gpu(x, skip), c.batch, c.m, c.n, 0.3, c.causal);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(TensorsClose(gy, y, Rtol(dtype), 1e-7));
        // Masked positions are exactly 0 on both.
        const std::vector<float> want = y.ToVector<float>(), got = gy.ToVector<float>();
        for (size_t i = 0; i < want.size(); ++i) {
          if (want[i] == 0.0f) {
            ASSERT_EQ(got[i], 0.0f) << i;
          }
        }
        Tensor g = RandomTensor(shape, dtype, 8);
        Tensor dx = Cpu(shape, dtype);
        ASSERT_TRUE(cpu_.ScaledSoftmaxBackward(dx, g, y, rows, c.n, 0.3).ok());
        Tensor gdx = Empty(shape, dtype, kGpu, skip);
        s = gpu_->ScaledSoftmaxBackward(gdx, Gpu(g, skip), Gpu(y, skip), rows, c.n, 0.3);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(TensorsClose(gdx, dx, Rtol(dtype), dtype == DType::kF32 ? 1e-7 : 1e-4));
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, BiasGeluForwardAndBackwardMatchCpu) {
  struct Case {
    int64_t rows, h;
  };
  // Packs, single elements, many row chunks, two column tiles, no rows.
  for (const Case& c : {Case{37, 24}, Case{33, 130}, Case{300, 520}, Case{5, 3000}, Case{0, 9}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t skip : {0, 1}) {
        SCOPED_TRACE(absl::StrCat(c.rows, "x", c.h, " ", Name(dtype), " skip ", skip));
        const Shape shape = {c.rows, c.h};
        Tensor x = RandomTensor(shape, dtype, 31, -4.0f, 4.0f);
        Tensor b = RandomTensor({c.h}, dtype, 32);
        Tensor g = RandomTensor(shape, dtype, 33);
        Tensor y = Cpu(shape, dtype);
        if (c.rows > 0) {
          ASSERT_TRUE(cpu_.BiasGelu(y, x, b, c.rows, c.h).ok());
          Tensor gy = Empty(shape, dtype, kGpu, skip);
          absl::Status s = gpu_->BiasGelu(gy, Gpu(x, skip), Gpu(b, skip), c.rows, c.h);
          ASSERT_TRUE(s.ok()) << s;
          // The CPU's erf and exp are its own polynomials: a few 1e-7 apart.
          EXPECT_TRUE(TensorsClose(gy, y, Rtol(dtype), dtype == DType::kF32 ? 5e-6 : 1e-2));
        }
        Tensor dx = Cpu(shape, dtype), db = Cpu({c.h}, dtype);
        ASSERT_TRUE(cpu_.BiasGeluBackward(dx, db, g, x, b, c.rows, c.h).ok());
        Tensor gdx = Empty(shape, dtype, kGpu, skip), gdb = Empty({c.h}, dtype, kGpu, skip);
        absl::Status s =
            gpu_->BiasGeluBackward(gdx, gdb, Gpu(g, skip), Gpu(x, skip), Gpu(b, skip), c.rows, c.h);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(TensorsClose(gdx, dx, Rtol(dtype), dtype == DType::kF32 ? 5e-6 : 1e-2));
        EXPECT_TRUE(TensorsClose(gdb, db, dtype == DType::kF32 ? 1e-4 : 1e-2, 1e-3));
        // Without dbias.
        Tensor gdx2 = Empty(shape, dtype, kGpu, skip);
        s = gpu_->BiasGeluBackward(gdx2, Tensor(), Gpu(g, skip), Gpu(x, skip), Gpu(b, skip), c.rows,
                                   c.h);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(TensorsClose(gdx2, gdx, 0, 0));
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, CrossEntropyStatsAndBackwardMatchCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    int64_t rows, v;
  };
  for (const Case& c : {Case{7, 3}, Case{20, 64}, Case{9, 2500}, Case{6, 4096}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t skip : {0, 1}) {
        SCOPED_TRACE(absl::StrCat(c.rows, "x", c.v, " ", Name(dtype), " skip ", skip));
        // Row 1 is all -inf; targets cycle through a column, elsewhere (-1)
        // and ignored (-2).
        std::vector<float> xv =
            RandomTensor({c.rows, c.v}, DType::kF32, 11, -6.0f, 6.0f).ToVector<float>();
        for (int64_t j = 0; j < c.v; ++j) xv[c.v + j] = -inf;
        Tensor x = *Tensor::FromVector<float>(xv, {c.rows, c.v}, dtype);
        std::vector<int64_t> tv(c.rows);
        for (int64_t r = 0; r < c.rows; ++r)
          tv[r] = r % 3 == 2 ? -2 : r % 4 == 3 ? -1 : (r * 37) % c.v;
        Tensor target = *Tensor::FromVector<int64_t>(tv, {c.rows});
        Tensor stats = Cpu({c.rows, 4}, DType::kF32);
        ASSERT_TRUE(cpu_.CrossEntropyStats(stats, x, target, c.rows, c.v).ok());
        Tensor gx = Gpu(x, skip), gtarget = Gpu(target, 0);
        Tensor gstats = Empty({c.rows, 4}, DType::kF32, kGpu, 0);
        absl::Status s = gpu_->CrossEntropyStats(gstats, gx, gtarget, c.rows, c.v);
        ASSERT_TRUE(s.ok()) << s;
        const std::vector<float> want = stats.ToVector<float>(), got = gstats.ToVector<float>();
        for (int64_t r = 0; r < c.rows; ++r) {
          EXPECT_EQ(got[r * 4], want[r * 4]) << "max of row " << r;
          EXPECT_NEAR(got[r * 4 + 1], want[r * 4 + 1], 1e-5 * want[r * 4 + 1]) << "row " << r;
          if (std::isinf(want[r * 4 + 2])) {
            EXPECT_EQ(got[r * 4 + 2], want[r * 4 + 2]) << "row " << r;
          } else {
            EXPECT_NEAR(got[r * 4 + 2], want[r * 4 + 2], 1e-4 * std::abs(want[r * 4 + 2]) + 1e-3)
                << "row " << r;
          }
          EXPECT_EQ(got[r * 4 + 3], want[r * 4 + 3]) << "target logit of row " << r;
        }
        // lse and g per row, finite for the rows the backward reads.
        std::vector<float> lse(c.rows), gr(c.rows);
        for (int64_t r = 0; r < c.rows; ++r) {
          lse[r] = want[r * 4] == -inf ? 0.0f : want[r * 4] + std::log(want[r * 4 + 1]);
          gr[r] = 0.5f + 0.25f * static_cast<float>(r % 3);
        }
        Tensor tlse = *Tensor::FromVector<float>(lse, {c.rows});
        Tensor tg = *Tensor::FromVector<float>(gr, {c.rows});
        Tensor dx = Cpu({c.rows, c.v}, dtype);
        ASSERT_TRUE(
            cpu_.CrossEntropyBackward(dx, x, tlse, tg, target, c.rows, c.v, 1e-4f, 0.9f).ok());
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(in_place ? "in place" : "out of place");
          Tensor logits = Gpu(x, skip);
          Tensor gdx = in_place ? logits : Empty({c.rows, c.v}, dtype, kGpu, skip);
          s = gpu_->CrossEntropyBackward(gdx, logits, Gpu(tlse, 0), Gpu(tg, 0), gtarget, c.rows,
                                         c.v, 1e-4f, 0.9f);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(gdx, dx, Rtol(dtype), dtype == DType::kF32 ? 1e-6 : 1e-4));
        }
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, SumOfSquaresMatchesCpu) {
  for (int64_t n : {1, 9, 100003}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t skip : {0, 1}) {
        SCOPED_TRACE(absl::StrCat(n, " ", Name(dtype), " skip ", skip));
        Tensor x = RandomTensor({n}, dtype, 9, -3.0f, 3.0f);
        double want = 0, got = -1;
        ASSERT_TRUE(cpu_.SumOfSquares(x, n, &want).ok());
        absl::Status s = gpu_->SumOfSquares(Gpu(x, skip), n, &got);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_NEAR(got, want, 1e-12 * want);
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, AdamWStepMatchesCpu) {
  const AdamWCoefficients c{.decay = 0.999f,
                            .beta1 = 0.9f,
                            .beta2 = 0.95f,
                            .step_size = 1e-3f / 0.1f,
                            .inv_sqrt_bias2 = 1.0f / std::sqrt(0.05f),
                            .eps = 1e-8f};
  for (int64_t n : {5, 10001}) {
    for (DType grad_dtype : {DType::kF32, DType::kBF16}) {
      for (bool with_working : {false, true}) {
        for (int64_t skip : {0, 1}) {
          SCOPED_TRACE(absl::StrCat(n, " grad ", Name(grad_dtype), " working ", with_working,
                                    " skip ", skip));
          Tensor p = RandomTensor({n}, DType::kF32, 1);
          Tensor g = RandomTensor({n}, grad_dtype, 2);
          Tensor m = RandomTensor({n}, DType::kF32, 3, -0.1f, 0.1f);
          Tensor v = RandomTensor({n}, DType::kF32, 4, 0.0f, 0.01f);
          Tensor w = with_working ? *Tensor::Zeros({n}, DType::kBF16) : Tensor();
          // Only the first moment is misaligned with skip: the kernel must
          // still take the element-wise path.
          Tensor gp = Gpu(p, 0), gg = Gpu(g, 0), gm = Gpu(m, skip), gv = Gpu(v, 0);
          Tensor gw = with_working ? Gpu(w, 0) : Tensor();
          ASSERT_TRUE(cpu_.AdamWStep(p, g, m, v, w, n, c).ok());
          absl::Status s = gpu_->AdamWStep(gp, gg, gm, gv, gw, n, c);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(gp, p, 1e-6, 1e-9));
          // m sums two terms of up to about 0.2 that can cancel, and nvcc and the host
          // compiler fuse its multiply-adds differently: allow a few ulps of the terms.
          EXPECT_TRUE(TensorsClose(gm, m, 1e-6, 1e-7));
          EXPECT_TRUE(TensorsClose(gv, v, 1e-6, 1e-12));
          if (with_working) {
            // The working weights are the GPU's own master rounded to bf16.
            EXPECT_TRUE(TensorsClose(gw, *gp.To(DType::kBF16), 0, 0));
          }
        }
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, DropoutAddMatchesCpuForEveryOperandMixAndInPlace) {
  struct Case {
    int64_t rows, h;
  };
  for (const Case& c : {Case{96, 130}, Case{64, 64}, Case{3, 5}}) {
    const int64_t n = c.rows * c.h;
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Tensor x = RandomTensor({c.rows, c.h}, dtype, 5);
      Tensor bias = RandomTensor({c.h}, dtype, 6);
      Tensor res = RandomTensor({c.rows, c.h}, dtype, 7);
      std::vector<bool> kv;
      for (float u : RandomTensor({n}, DType::kF32, 8, 0.0f, 1.0f).ToVector<float>()) {
        kv.push_back(u >= 0.3f);
      }
      Tensor keep = *Tensor::FromVector<bool>(kv, {c.rows, c.h});
      const float scale = 1.0f / 0.7f;
      for (int mix = 0; mix < 8; ++mix) {
        const bool use_b = mix & 4, use_k = mix & 2, use_r = mix & 1;
        for (int64_t skip : {0, 1}) {
          // where: 0 a new tensor, 1 over x, 2 over the residual.
          for (int where = 0; where < (use_r ? 3 : 2); ++where) {
            SCOPED_TRACE(absl::StrCat(c.rows, "x", c.h, " ", Name(dtype), " bias ", use_b, " keep ",
                                      use_k, " residual ", use_r, " skip ", skip, " out ", where));
            Tensor want = Cpu({c.rows, c.h}, dtype);
            ASSERT_TRUE(cpu_.DropoutAdd(want, x, use_b ? bias : Tensor(), use_k ? keep : Tensor(),
                                        use_r ? res : Tensor(), n, use_b ? c.h : 0, scale)
                            .ok());
            Tensor gx = Gpu(x, skip), gres = use_r ? Gpu(res, skip) : Tensor();
            Tensor out = where == 0   ? Empty({c.rows, c.h}, dtype, kGpu, skip)
                         : where == 1 ? gx
                                      : gres;
            absl::Status s = gpu_->DropoutAdd(out, gx, use_b ? Gpu(bias, skip) : Tensor(),
                                              use_k ? Gpu(keep, skip) : Tensor(), gres, n,
                                              use_b ? c.h : 0, scale);
            ASSERT_TRUE(s.ok()) << s;
            EXPECT_TRUE(TensorsClose(out, want, dtype == DType::kF32 ? 1e-6 : 1e-2, 1e-6));
          }
        }
      }
    }
  }
}

TEST_F(CudaFusedKernelsTest, GemmBatchedMatchesCpu) {
  const int64_t batch = 3, m = 5, n = 7, k = 9;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool shared_b : {false, true}) {
          SCOPED_TRACE(absl::StrCat(Name(dtype), " ta ", ta, " tb ", tb, " shared b ", shared_b));
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          Tensor a = RandomTensor({batch, m * k}, dtype, 21);
          Tensor b = RandomTensor({batch, k * n}, dtype, 22);
          const int64_t stride_b = shared_b ? 0 : k * n;
          Tensor want = Cpu({batch, m, n}, DType::kF32);
          ASSERT_TRUE(cpu_.GemmBatched(0, batch, ta, tb, m, n, k, 0.5f, dtype, a.raw_data(), lda,
                                       m * k, b.raw_data(), ldb, stride_b, 0.0f, DType::kF32,
                                       want.raw_data(), n, m * n)
                          .ok());
          Tensor ga = Gpu(a, 0), gb = Gpu(b, 0);
          Tensor got = Empty({batch, m, n}, DType::kF32, kGpu, 0);
          absl::Status s = gpu_->GemmBatched(0, batch, ta, tb, m, n, k, 0.5f, dtype, ga.raw_data(),
                                             lda, m * k, gb.raw_data(), ldb, stride_b, 0.0f,
                                             DType::kF32, got.raw_data(), n, m * n);
          ASSERT_TRUE(s.ok()) << s;
          EXPECT_TRUE(TensorsClose(got, want, 1e-4, 1e-5));
        }
      }
    }
  }
  // Overlapping products are refused before anything runs.
  Tensor c = Empty({2, 2}, DType::kF32, kGpu, 0);
  absl::Status overlap =
      gpu_->GemmBatched(0, 2, false, false, 2, 2, 2, 1.0f, DType::kF32, c.raw_data(), 2, 0,
                        c.raw_data(), 2, 0, 0.0f, DType::kF32, c.raw_data(), 2, 1);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument) << overlap;
}

TEST_F(CudaFusedKernelsTest, MisshapenOperandsAreRefusedNamingTheOp) {
  Tensor x = Empty({4, 6}, DType::kF32, kGpu, 0);
  Tensor y16 = Empty({4, 6}, DType::kBF16, kGpu, 0);
  Tensor stats = Empty({4}, DType::kF32, kGpu, 0);
  absl::Status s = gpu_->LayerNorm(y16, stats, stats, x, Tensor(), Tensor(), 4, 6, 1e-5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("cuda LayerNorm("), absl::string_view::npos) << s;
  // A strided operand, and one on the host.
  Tensor xt = *Empty({6, 4}, DType::kF32, kGpu, 0).Transpose(0, 1);
  s = gpu_->BiasGelu(x, xt, Empty({6}, DType::kF32, kGpu, 0), 4, 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("contiguous"), absl::string_view::npos) << s;
  s = gpu_->DropoutAdd(x, x, Tensor(), *Tensor::Zeros({4, 6}, DType::kBool), Tensor(), 24, 0, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A bias that does not divide the elements.
  s = gpu_->DropoutAdd(x, x, Empty({5}, DType::kF32, kGpu, 0), Tensor(), Tensor(), 24, 5, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bias"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace tpx
