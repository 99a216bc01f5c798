#include "layers/vocab_parallel_embedding.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/autograd/ops.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "parallel/mappings.h"

namespace tpx::layers {

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Create(
    comm::Communicator& tp, int64_t num_embeddings, int64_t embedding_dim,
    VocabParallelEmbeddingOptions options) {
  VocabParallelEmbedding layer;
  layer.tp_ = &tp;
  layer.num_embeddings_ = num_embeddings;
  layer.embedding_dim_ = embedding_dim;
  TPX_ASSIGN_OR_RETURN(layer.range_, parallel::VocabUtility::RangeFromGlobalVocabSize(
                                         num_embeddings, tp.rank(), tp.size()));
  TPX_ASSIGN_OR_RETURN(Tensor w, InitMasterWeightAndSplit(
                                     {num_embeddings, embedding_dim}, 0, 1, tp.rank(), tp.size(),
                                     options.init_method, options.seed, options.params_dtype));
  TPX_ASSIGN_OR_RETURN(w, w.To(options.device));
  layer.weight_ = Variable(w, true, "vocab_parallel_embedding.weight");
  layer.weight_attributes_ = ParamAttributes{true, 0, 1, false};
  layer.options_ = std::move(options);
  return layer;
}

absl::StatusOr<Variable> VocabParallelEmbedding::Forward(const Tensor& ids) const {
  if (!ids.defined() || (ids.dtype() != DType::kI64 && ids.dtype() != DType::kI32)) {
    return absl::InvalidArgumentError("VocabParallelEmbedding: ids must be an i32/i64 tensor");
  }
  if (options_.sequence_parallel && ids.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VocabParallelEmbedding: sequence_parallel needs ids [batch, seq], got ", ids.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(Tensor flat, ids.Reshape({ids.numel()}));
  TPX_ASSIGN_OR_RETURN(flat, flat.To(DType::kI64));
  const std::vector<int64_t> values = flat.ToVector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0 || values[i] >= num_embeddings_) {
      // Multi-index of the offending id.
      std::vector<int64_t> pos(static_cast<size_t>(ids.dim()));
      int64_t rest = static_cast<int64_t>(i);
      for (int64_t d = ids.dim() - 1; d >= 0; --d) {
        pos[static_cast<size_t>(d)] = rest % ids.size(d);
        rest /= ids.size(d);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "VocabParallelEmbedding: id ", values[i], " at position [", absl::StrJoin(pos, ", "),
          "] is outside the vocabulary [0, ", num_embeddings_, ")"));
    }
  }
  // Ids outside this rank's range look up row 0 and are zeroed afterwards.
  std::vector<int64_t> local(values.size());
  std::vector<bool> outside(values.size());
  bool any_outside = false;
  for (size_t i = 0; i < values.size(); ++i) {
    outside[i] = values[i] < range_.first || values[i] >= range_.last;
    any_outside = any_outside || outside[i];
    local[i] = outside[i] ? 0 : values[i] - range_.first;
  }
  const Device device = weight_.value().device();
  TPX_ASSIGN_OR_RETURN(Tensor index, Tensor::FromVector<int64_t>(local, {ids.numel()}));
  TPX_ASSIGN_OR_RETURN(index, index.To(device));
  TPX_ASSIGN_OR_RETURN(Variable rows, ag::IndexSelect(weight_, 0, index));
  // The whole vocabulary on one rank (TP=1) leaves nothing to zero: no mask
  // pass forward and backward.
  if (any_outside) {
    TPX_ASSIGN_OR_RETURN(Tensor mask, Tensor::FromVector<bool>(outside, {ids.numel(), 1}));
    TPX_ASSIGN_OR_RETURN(mask, mask.To(device));
    TPX_ASSIGN_OR_RETURN(rows, ag::MaskedFill(rows, mask, 0.0));
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(embedding_dim_);
  TPX_ASSIGN_OR_RETURN(Variable partial, ag::Reshape(rows, out_shape));
  if (options_.sequence_parallel) {
    // [b, s, h] -> [s, b, h], then each rank keeps its share of the sequence.
    TPX_ASSIGN_OR_RETURN(partial, ag::Transpose(partial, 0, 1));
    return parallel::ReduceScatterToSequenceParallelRegion(*tp_, partial);
  }
  return parallel::ReduceFromTensorParallelRegion(*tp_, partial);
}

absl::StatusOr<std::vector<sharded_state::ShardedTensor>> VocabParallelEmbedding::ShardedState(
    const std::string& prefix) const {
  TPX_ASSIGN_OR_RETURN(auto w,
                       sharded_state::ShardedTensor::Split(prefix + "weight", weight_.value(), 0,
                                                           tp_->rank(), tp_->size()));
  return std::vector<sharded_state::ShardedTensor>{std::move(w)};
}

absl::Status VocabParallelEmbedding::SetFullWeights(const Tensor& weight) {
  TPX_ASSIGN_OR_RETURN(auto state, ShardedState(""));
  return sharded_state::AssignAllFromFull(state, {{"weight", weight}});
}

}  // namespace tpx::layers
