// Tensor-parallel utilities: checked division, splitting a tensor along its
// last dim, 1-D equal chunks of a flattened tensor (and gathering them back),
// the vocabulary range each rank owns, and broadcasting a batch of named
// tensors from the first rank of a group.
//
//   TPX_ASSIGN_OR_RETURN(int64_t per_rank, Divide(ffn, tp.size()));
//   TPX_ASSIGN_OR_RETURN(VocabRange r, VocabUtility::RangeFromGlobalVocabSize(50304, tp.rank(),
//                                                                             tp.size()));
//   TPX_ASSIGN_OR_RETURN(auto batch, BroadcastData(tp, {"tokens", "labels"}, data, DType::kI64));
#ifndef TPX_PARALLEL_UTILS_H_
#define TPX_PARALLEL_UTILS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace tpx::parallel {

// numerator / denominator; InvalidArgument naming both when it does not divide
// (or the denominator is not positive). `what` is put in front of the message.
absl::StatusOr<int64_t> Divide(int64_t numerator, int64_t denominator,
                               const char* what = "Divide");

// num_partitions views along the last dim (equal sizes; error if it does not
// divide). contiguous: return contiguous copies instead of views.
absl::StatusOr<std::vector<Tensor>> SplitTensorAlongLastDim(const Tensor& t, int64_t num_partitions,
                                                            bool contiguous = false);

// The rank-th of world_size equal 1-D chunks of t flattened (a copy).
// Error if t.numel() is not divisible by world_size.
absl::StatusOr<Tensor> SplitTensorInto1DEqualChunks(const Tensor& t, int rank, int world_size);
// All ranks' 1-D chunks concatenated (the inverse of the above over comm).
absl::StatusOr<Tensor> GatherSplit1DTensor(comm::Communicator& comm, const Tensor& chunk);

// Half-open vocabulary range [first, last) owned by one rank.
struct VocabRange {
  int64_t first = 0;
  int64_t last = 0;
  int64_t size() const { return last - first; }
};
struct VocabUtility {
  static VocabRange RangeFromPerPartitionVocabSize(int64_t per_partition_vocab_size, int rank,
                                                   int world_size);
  // Error if global_vocab_size is not divisible by world_size.
  static absl::StatusOr<VocabRange> RangeFromGlobalVocabSize(int64_t global_vocab_size, int rank,
                                                             int world_size);
};

// Broadcasts the tensors named by `keys` from rank 0 of comm. On rank 0,
// `data` must hold every key with dtype `dtype`; other ranks may pass an empty
// map. Every rank returns the same key -> tensor map (contiguous copies).
// Shapes travel first, so other ranks need not know them.
absl::StatusOr<std::map<std::string, Tensor>> BroadcastData(
    comm::Communicator& comm, const std::vector<std::string>& keys,
    const std::map<std::string, Tensor>& data, DType dtype);

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_UTILS_H_
