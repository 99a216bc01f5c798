// VocabParallelEmbedding: an embedding table split along the vocabulary over
// the tensor-parallel group. Each rank looks up the ids in its own range
// (others give zero rows) and the partial results are summed: all-reduce, or
// under sequence parallelism a reduce-scatter along the sequence dim.
//
//   TPX_ASSIGN_OR_RETURN(auto emb, VocabParallelEmbedding::Create(tp, vocab, hidden, {}));
//   TPX_ASSIGN_OR_RETURN(Variable h, emb.Forward(ids));   // ids [b, s] -> [b, s, hidden]
//   // sequence_parallel: ids [b, s] -> [s/tp, b, hidden]
//
// The table is initialised from the full master table (same seed -> TP=N
// shards are slices of the TP=1 table).
#ifndef TPX_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_
#define TPX_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "layers/init.h"
#include "parallel/utils.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::layers {

struct VocabParallelEmbeddingOptions {
  bool sequence_parallel = false;
  InitMethod init_method = NormalInit(0.02);
  uint64_t seed = 1234;
  DType params_dtype = DType::kF32;
  // Where the weight lives (initialised on the host, then copied); Forward's
  // ids may be on any device and are read on the host.
  Device device = Device::CPU();
};

class VocabParallelEmbedding {
 public:
  // Errors: num_embeddings not divisible by the tp size.
  static absl::StatusOr<VocabParallelEmbedding> Create(comm::Communicator& tp,
                                                       int64_t num_embeddings,
                                                       int64_t embedding_dim,
                                                       VocabParallelEmbeddingOptions options);
  // ids: integer tensor [b, s] (any shape without sequence parallelism).
  // Error naming the position of an id outside [0, num_embeddings).
  absl::StatusOr<Variable> Forward(const Tensor& ids) const;

  const Variable& weight() const { return weight_; }
  const ParamAttributes& weight_attributes() const { return weight_attributes_; }
  parallel::VocabRange vocab_range() const { return range_; }
  // The table as a shard of the global [vocab, dim] tensor named
  // prefix + "weight", split along the vocabulary.
  absl::StatusOr<std::vector<sharded_state::ShardedTensor>> ShardedState(
      const std::string& prefix) const;
  // Gives the layer the full (TP=1) table; this rank takes its rows. Error
  // naming the tensor; nothing changes on error.
  absl::Status SetFullWeights(const Tensor& weight);

 private:
  VocabParallelEmbedding() = default;
  comm::Communicator* tp_ = nullptr;
  int64_t num_embeddings_ = 0, embedding_dim_ = 0;
  parallel::VocabRange range_;
  VocabParallelEmbeddingOptions options_;
  Variable weight_;
  ParamAttributes weight_attributes_;
};

}  // namespace tpx::layers

#endif  // TPX_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_
