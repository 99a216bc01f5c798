// Test-only (target //sharded_state:tiny_net_testutil): a small network of
// every tpx parallel layer, for checkpoint tests at several TP sizes.
//
//   ids [6] -> VocabParallelEmbedding(24, 12) -> ColumnParallel QKV(12 -> 36, stride 3)
//           -> RowParallel(36 -> 12, stride 3 to match)
//           -> ColumnParallel(12 -> 24) -> RowParallel(24 -> 12)
//
// Weights come from the full master weights of `seed` (TP-invariant); biases
// are given from full random tensors of `seed`, so every parameter depends on
// the seed and two seeds give different models at every TP size. Sizes are
// divisible by TP 1, 2, 3 and 4 (with the QKV stride 3).
#ifndef TPX_SHARDED_STATE_TINY_NET_TESTUTIL_H_
#define TPX_SHARDED_STATE_TINY_NET_TESTUTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/compare_testutil.h"
#include "core/status_macros.h"
#include "layers/parallel_linear.h"
#include "layers/vocab_parallel_embedding.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {

class TinyNet {
 public:
  static constexpr int64_t kVocab = 24, kHidden = 12, kFfn = 24, kTokens = 6;

  static absl::StatusOr<std::unique_ptr<TinyNet>> Create(comm::Communicator& tp, uint64_t seed) {
    auto net = std::unique_ptr<TinyNet>(new TinyNet());
    const auto init = layers::NormalInit(0.5);
    TPX_ASSIGN_OR_RETURN(auto emb, layers::VocabParallelEmbedding::Create(
                                       tp, kVocab, kHidden, {.init_method = init, .seed = seed}));
    TPX_ASSIGN_OR_RETURN(auto qkv, layers::ColumnParallelLinear::Create(
                                       tp, kHidden, 3 * kHidden,
                                       {.stride = 3, .init_method = init, .seed = seed + 1}));
    TPX_ASSIGN_OR_RETURN(auto proj, layers::RowParallelLinear::Create(
                                        tp, 3 * kHidden, kHidden,
                                        {.input_is_parallel = true, .stride = 3,
                                         .init_method = init, .seed = seed + 2}));
    TPX_ASSIGN_OR_RETURN(auto fc1, layers::ColumnParallelLinear::Create(
                                       tp, kHidden, kFfn, {.init_method = init, .seed = seed + 3}));
    TPX_ASSIGN_OR_RETURN(auto fc2, layers::RowParallelLinear::Create(
                                       tp, kFfn, kHidden,
                                       {.input_is_parallel = true, .init_method = init,
                                        .seed = seed + 4}));
    TPX_RETURN_IF_ERROR(qkv.SetFullWeights(Tensor(), RandomTensor({3 * kHidden}, DType::kF32,
                                                                  static_cast<uint32_t>(seed))));
    TPX_RETURN_IF_ERROR(proj.SetFullWeights(
        RandomTensor({kHidden, 3 * kHidden}, DType::kF32, static_cast<uint32_t>(seed + 5)),
        RandomTensor({kHidden}, DType::kF32, static_cast<uint32_t>(seed + 6))));
    TPX_RETURN_IF_ERROR(fc1.SetFullWeights(
        Tensor(), RandomTensor({kFfn}, DType::kF32, static_cast<uint32_t>(seed + 7))));
    TPX_RETURN_IF_ERROR(fc2.SetFullWeights(
        Tensor(), RandomTensor({kHidden}, DType::kF32, static_cast<uint32_t>(seed + 8))));
    net->emb_ = std::make_unique<layers::VocabParallelEmbedding>(std::move(emb));
    net->qkv_ = std::make_unique<layers::ColumnParallelLinear>(std::move(qkv));
    net->proj_ = std::make_unique<layers::RowParallelLinear>(std::move(proj));
    net->fc1_ = std::make_unique<layers::ColumnParallelLinear>(std::move(fc1));
    net->fc2_ = std::make_unique<layers::RowParallelLinear>(std::move(fc2));
    return net;
  }

  // The full output [kTokens, kHidden] (the same on every TP rank).
  absl::StatusOr<Tensor> Forward() const {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < kTokens; ++i) ids.push_back((7 * i + 3) % kVocab);
    TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<int64_t>(ids, {kTokens}));
    TPX_ASSIGN_OR_RETURN(Variable x, emb_->Forward(t));
    TPX_ASSIGN_OR_RETURN(layers::LinearOutput a, qkv_->Forward(x));
    TPX_ASSIGN_OR_RETURN(layers::LinearOutput b, proj_->Forward(a.output));
    TPX_ASSIGN_OR_RETURN(layers::LinearOutput c, fc1_->Forward(b.output));
    TPX_ASSIGN_OR_RETURN(layers::LinearOutput d, fc2_->Forward(c.output));
    return d.output.value();
  }

  absl::StatusOr<std::vector<ShardedTensor>> ShardedState() const {
    std::vector<ShardedTensor> all;
    for (auto part : {emb_->ShardedState("emb."), qkv_->ShardedState("qkv."),
                      proj_->ShardedState("proj."), fc1_->ShardedState("fc1."),
                      fc2_->ShardedState("fc2.")}) {
      if (!part.ok()) return part.status();
      for (ShardedTensor& t : *part) all.push_back(std::move(t));
    }
    return all;
  }

 private:
  TinyNet() = default;
  std::unique_ptr<layers::VocabParallelEmbedding> emb_;
  std::unique_ptr<layers::ColumnParallelLinear> qkv_, fc1_;
  std::unique_ptr<layers::RowParallelLinear> proj_, fc2_;
};

// Copies of every local tensor (to check that a failed load changed nothing).
inline std::vector<Tensor> Snapshot(const std::vector<ShardedTensor>& state) {
  std::vector<Tensor> out;
  for (const ShardedTensor& t : state) out.push_back(*t.local.Clone());
  return out;
}

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_TINY_NET_TESTUTIL_H_
