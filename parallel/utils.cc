#include "parallel/utils.h"

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::parallel {

absl::StatusOr<int64_t> Divide(int64_t numerator, int64_t denominator, const char* what) {
  if (denominator <= 0 || numerator % denominator != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", numerator,
                                                   " is not divisible by ", denominator));
  }
  return numerator / denominator;
}

absl::StatusOr<std::vector<Tensor>> SplitTensorAlongLastDim(const Tensor& t, int64_t num_partitions,
                                                            bool contiguous) {
  if (t.dim() == 0) {
    return absl::InvalidArgumentError("SplitTensorAlongLastDim: 0-d tensor has no last dim");
  }
  TPX_ASSIGN_OR_RETURN(int64_t size, Divide(t.size(-1), num_partitions,
                                            "SplitTensorAlongLastDim (last dim of the tensor)"));
  TPX_ASSIGN_OR_RETURN(
      std::vector<Tensor> parts,
      ops::Split(t, std::vector<int64_t>(static_cast<size_t>(num_partitions), size), -1));
  if (contiguous) {
    for (Tensor& p : parts) {
      TPX_ASSIGN_OR_RETURN(p, p.Clone());
    }
  }
  return parts;
}

absl::StatusOr<Tensor> SplitTensorInto1DEqualChunks(const Tensor& t, int rank, int world_size) {
  TPX_ASSIGN_OR_RETURN(int64_t chunk, Divide(t.numel(), world_size,
                                             "SplitTensorInto1DEqualChunks (numel)"));
  TPX_ASSIGN_OR_RETURN(Tensor flat, t.Reshape({t.numel()}));
  TPX_ASSIGN_OR_RETURN(Tensor piece, flat.Narrow(0, chunk * rank, chunk));
  return piece.Clone();
}

absl::StatusOr<Tensor> GatherSplit1DTensor(comm::Communicator& comm, const Tensor& chunk) {
  TPX_ASSIGN_OR_RETURN(Tensor src, chunk.Reshape({chunk.numel()}));
  TPX_ASSIGN_OR_RETURN(src, src.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({chunk.numel() * comm.size()}, chunk.dtype(),
                                                  chunk.device()));
  TPX_RETURN_IF_ERROR(comm.AllGather(src, out).Wait());
  return out;
}

VocabRange VocabUtility::RangeFromPerPartitionVocabSize(int64_t per_partition_vocab_size,
                                                        int rank, int /*world_size*/) {
  return VocabRange{per_partition_vocab_size * rank, per_partition_vocab_size * (rank + 1)};
}

absl::StatusOr<VocabRange> VocabUtility::RangeFromGlobalVocabSize(int64_t global_vocab_size,
                                                                  int rank, int world_size) {
  TPX_ASSIGN_OR_RETURN(int64_t per, Divide(global_vocab_size, world_size,
                                           "VocabUtility (global vocabulary size)"));
  return RangeFromPerPartitionVocabSize(per, rank, world_size);
}

absl::StatusOr<std::map<std::string, Tensor>> BroadcastData(
    comm::Communicator& comm, const std::vector<std::string>& keys,
    const std::map<std::string, Tensor>& data, DType dtype) {
  // Header per key: ndim followed by the sizes, padded to a fixed width.
  constexpr int kMaxDims = 8;
  const int64_t width = kMaxDims + 1;
  std::vector<int64_t> header(keys.size() * static_cast<size_t>(width), 0);
  const bool source = comm.rank() == 0;
  if (source) {
    for (size_t k = 0; k < keys.size(); ++k) {
      auto it = data.find(keys[k]);
      if (it == data.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("BroadcastData: key '", keys[k], "' missing on the source rank"));
      }
      const Tensor& t = it->second;
      if (t.dtype() != dtype) {
        return absl::InvalidArgumentError(absl::StrCat("BroadcastData: '", keys[k], "' is ",
                                                       t.ToString(), ", expected ",
                                                       std::string(DTypeName(dtype))));
      }
      if (t.dim() > kMaxDims) {
        return absl::InvalidArgumentError(absl::StrCat("BroadcastData: '", keys[k], "' has ",
                                                       t.dim(), " dims; at most ", kMaxDims));
      }
      header[k * width] = t.dim();
      for (int64_t d = 0; d < t.dim(); ++d) header[k * width + 1 + d] = t.size(d);
    }
  }
  TPX_RETURN_IF_ERROR(
      comm.Broadcast(header.data(), static_cast<int64_t>(header.size()), DType::kI64, 0).Wait());
  std::vector<Shape> shapes;
  int64_t total = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    Shape s(header.begin() + k * width + 1, header.begin() + k * width + 1 + header[k * width]);
    total += NumElements(s);
    shapes.push_back(std::move(s));
  }
  TPX_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({total}, dtype));
  int64_t offset = 0;
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < keys.size(); ++k) {
    TPX_ASSIGN_OR_RETURN(Tensor slot, flat.Narrow(0, offset, NumElements(shapes[k])));
    TPX_ASSIGN_OR_RETURN(slot, slot.View(shapes[k]));
    if (source) TPX_RETURN_IF_ERROR(slot.CopyFrom(data.at(keys[k])));
    out[keys[k]] = slot;
    offset += NumElements(shapes[k]);
  }
  TPX_RETURN_IF_ERROR(comm.Broadcast(flat, 0).Wait());
  return out;
}

}  // namespace tpx::parallel
