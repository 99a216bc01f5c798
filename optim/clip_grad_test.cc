// Clipping over real tensor-parallel ranks: every rank holds a row shard of a
// sharded gradient and a full copy of a duplicated one; the norm must equal
// the norm of the unsharded gradients, counting the duplicate once.
#include "optim/clip_grad.h"

#include <cmath>
#include <vector>

#include "core/device_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "optim/grad_sync.h"
#include "testing/multiprocess.h"

namespace tpx::optim {
namespace {

constexpr int64_t kRows = 7, kCols = 3;

std::vector<float> FullSharded() {
  std::vector<float> v(kRows * kCols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 0.8f;
  return v;
}
const std::vector<float> kDuplicate = {1.5f, -2.0f, 0.25f};

double ReferenceNorm() {
  double s = 0;
  for (float x : FullSharded()) s += double(x) * x;
  for (float x : kDuplicate) s += double(x) * x;
  return std::sqrt(s);
}

// This rank's params with gradients set: rows [start, start + len) of the
// sharded gradient and the whole duplicated one.
std::vector<ClipParam> RankParams(int rank, int size, int64_t* start, int64_t* len) {
  std::vector<int64_t> sizes = ops::SplitSizes(kRows, size);
  *start = 0;
  for (int r = 0; r < rank; ++r) *start += sizes[r];
  *len = sizes[rank];
  std::vector<float> full = FullSharded();
  std::vector<float> shard(full.begin() + *start * kCols, full.begin() + (*start + *len) * kCols);
  Variable w(*Tensor::Zeros({*len, kCols}), true, "w");
  Variable d(*Tensor::Zeros({3}), true, "dup");
  EXPECT_TRUE(w.set_grad(*Tensor::FromVector<float>(shard, {*len, kCols})).ok());
  EXPECT_TRUE(d.set_grad(*Tensor::FromVector<float>(kDuplicate, {3})).ok());
  return {{w, false}, {d, true}};
}

TEST(ClipGradNorm, GlobalNormAcrossTensorParallelRanksCountsDuplicatesOnce) {
  for (int world : {1, 2, 3, 4}) {
    testing::RunOnRanks(world, [](testing::RankContext& ctx) {
      const double ref = ReferenceNorm();
      int64_t start, len;
      std::vector<ClipParam> params = RankParams(ctx.rank, ctx.size, &start, &len);
      auto norm = GlobalGradNorm(params, &ctx.comm);
      ASSERT_TRUE(norm.ok()) << norm.status();
      EXPECT_NEAR(*norm, ref, 1e-5 * ref);

      // No clipping when under the limit.
      auto same = ClipGradNorm(params, 2 * ref, &ctx.comm);
      ASSERT_TRUE(same.ok());
      EXPECT_NEAR(params[1].var.grad().ToVector<float>()[0], kDuplicate[0], 0);

      // Clip to norm 1: every gradient scales by 1 / ref, and the norm afterwards is 1.
      auto before = ClipGradNorm(params, 1.0, &ctx.comm);
      ASSERT_TRUE(before.ok());
      EXPECT_NEAR(*before, ref, 1e-5 * ref);
      std::vector<float> full = FullSharded();
      std::vector<float> w = params[0].var.grad().ToVector<float>();
      for (int64_t i = 0; i < len * kCols; ++i) {
        EXPECT_NEAR(w[i], full[start * kCols + i] / ref, 1e-6) << i;
      }
      auto after = GlobalGradNorm(params, &ctx.comm);
      ASSERT_TRUE(after.ok());
      EXPECT_NEAR(*after, 1.0, 1e-5);

      // Data-parallel averaging: rank r holds r + 1 everywhere; the mean is (size + 1) / 2.
      Variable p(*Tensor::Zeros({4}), true, "p");
      ASSERT_TRUE(p.set_grad(*Tensor::Full({4}, ctx.rank + 1.0)).ok());
      ASSERT_TRUE(AllReduceGradients(ctx.comm, {p}).ok());
      EXPECT_FLOAT_EQ(p.grad().ToVector<float>()[3], (ctx.size + 1) / 2.0f);
      // bf16 gradients: reduced in f32 they become f32; in bf16 they stay bf16.
      for (DType reduce : {DType::kF32, DType::kBF16}) {
        Variable h(*Tensor::Zeros({4}, DType::kBF16), true, "h");
        ASSERT_TRUE(h.set_grad(*Tensor::Full({4}, ctx.rank + 1.0, DType::kBF16)).ok());
        ASSERT_TRUE(AllReduceGradients(ctx.comm, {h}, reduce).ok());
        EXPECT_EQ(h.grad().dtype(), ctx.size == 1 ? DType::kBF16 : reduce);
        EXPECT_FLOAT_EQ(h.grad().ToVector<float>()[3], (ctx.size + 1) / 2.0f);
        EXPECT_TRUE(AllReduceGradient(ctx.comm, h, comm::ReduceOp::kSum, DType::kF16)
                        .message()
                        .find("f16") != std::string::npos);
      }
    });
  }
}

TEST(ClipGradNorm, SingleProcessAndErrors) {
  int64_t start, len;
  std::vector<ClipParam> params = RankParams(0, 1, &start, &len);
  auto norm = ClipGradNorm(params, 0.5, nullptr);
  ASSERT_TRUE(norm.ok());
  EXPECT_NEAR(*norm, ReferenceNorm(), 1e-5);
  EXPECT_NEAR(*GlobalGradNorm(params, nullptr), 0.5, 1e-5);
  EXPECT_FALSE(ClipGradNorm(params, 0.0, nullptr).ok());
  EXPECT_TRUE(params[1].var.set_grad(*Tensor::Full({3}, NAN)).ok());
  EXPECT_FALSE(ClipGradNorm(params, 1.0, nullptr).ok());
}

// The coefficient ClipGradNorm applies, for an optimizer to apply instead.
TEST(ClipGradNorm, ClipCoefficient) {
  EXPECT_EQ(*ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(*ClipCoefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6));  // as PyTorch: norm + eps
  EXPECT_DOUBLE_EQ(*ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_NE(ClipCoefficient(4.0, 0.0).status().message().find("max_norm must be > 0"),
            std::string::npos);
  EXPECT_NE(ClipCoefficient(NAN, 1.0).status().message().find("non-finite gradients"),
            std::string::npos);
  EXPECT_FALSE(ClipCoefficient(INFINITY, 1.0).ok());
}

TPX_DEVICE_TEST_SUITE(ClipGradOnDevice);

TEST_P(ClipGradOnDevice, NormAndClippingOfGradientsOnTheDevice) {
  const Tensor g1 = RandomTensor({40, 3}, DType::kF32, 1), g2 = RandomTensor({7}, DType::kBF16, 2);
  double want = 0;
  for (const Tensor& g : {g1, g2}) {
    for (double v : g.ToVector<double>()) want += v * v;
  }
  want = std::sqrt(want);
  std::vector<ClipParam> params;
  for (const Tensor& g : {g1, g2}) {
    Variable v(*TestZeros(g.shape(), g.dtype()), /*requires_grad=*/true);
    ASSERT_TRUE(v.set_grad(*g.To(TestDevice())).ok());
    params.push_back({v, false});
  }
  auto norm = ClipGradNorm(params, want / 2, nullptr);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_NEAR(*norm, want, 1e-5 * want);
  EXPECT_NEAR(*GlobalGradNorm(params, nullptr), want / 2, 1e-2 * want);  // bf16 rounding
  EXPECT_EQ(params[0].var.grad().device(), TestDevice());
}

}  // namespace
}  // namespace tpx::optim
