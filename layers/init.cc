#include "layers/init.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "rng/philox.h"

namespace tpx::layers {

absl::Status FillNormal(const Tensor& t, uint64_t seed, double mean, double std) {
  if (t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("FillNormal: needs f32, got ", t.ToString()));
  }
  // Stream 0 of the seed; element i of the (master) tensor is draw i, so the
  // values do not depend on how the tensor is later split.
  std::vector<float> values(static_cast<size_t>(t.numel()));
  rng::FillNormal(values.data(), t.numel(), seed, /*stream=*/0, /*first_index=*/0,
                  static_cast<float>(mean), static_cast<float>(std));
  TPX_ASSIGN_OR_RETURN(Tensor src, Tensor::FromVector<float>(values, t.shape()));
  return t.CopyFrom(src);
}

InitMethod NormalInit(double std) {
  return [std](const Tensor& w, uint64_t seed) { return FillNormal(w, seed, 0.0, std); };
}

InitMethod ConstantInit(double value) {
  return [value](const Tensor& w, uint64_t) { return ops::Fill(w, value); };
}

absl::StatusOr<Tensor> InitMasterWeightAndSplit(const Shape& master_shape, int64_t partition_dim,
                                                int64_t stride, int rank, int world,
                                                const InitMethod& init, uint64_t seed,
                                                DType params_dtype, Tensor* master_out) {
  TPX_ASSIGN_OR_RETURN(partition_dim,
                       NormalizeDim(partition_dim, static_cast<int64_t>(master_shape.size()),
                                    "InitMasterWeightAndSplit"));
  const int64_t extent = master_shape[static_cast<size_t>(partition_dim)];
  if (stride < 1 || world < 1 || extent % (world * stride) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitMasterWeightAndSplit: dim ", partition_dim, " of ", ShapeString(master_shape),
        " (", extent, ") is not divisible by tensor-parallel size ", world, " x stride ", stride));
  }
  TPX_ASSIGN_OR_RETURN(Tensor master, Tensor::Empty(master_shape, DType::kF32));
  TPX_RETURN_IF_ERROR(init(master, seed));
  TPX_ASSIGN_OR_RETURN(master, master.To(params_dtype));
  if (master_out != nullptr) *master_out = master;
  const int64_t piece = extent / (world * stride);
  TPX_ASSIGN_OR_RETURN(std::vector<Tensor> pieces,
                       ops::Split(master, std::vector<int64_t>(static_cast<size_t>(world * stride),
                                                               piece),
                                  partition_dim));
  std::vector<Tensor> mine;
  for (size_t i = static_cast<size_t>(rank); i < pieces.size(); i += static_cast<size_t>(world)) {
    mine.push_back(pieces[i]);
  }
  return ops::Concat(mine, partition_dim);
}

bool ParamIsNotTensorParallelDuplicate(const ParamAttributes& attributes, int tp_rank) {
  return attributes.tensor_model_parallel || tp_rank == 0;
}

}  // namespace tpx::layers
