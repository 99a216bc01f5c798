// Weight initialisation for tensor-parallel layers: the full (TP=1) master
// weight is initialised on the CPU from a seed and split, so the shard rank r
// holds at TP=N equals the matching slices of the TP=1 weight for every N.
// Also the per-parameter attributes the optimizer and checkpointing read.
//
//   TPX_ASSIGN_OR_RETURN(Tensor shard, InitMasterWeightAndSplit(
//       {4 * h, h}, /*partition_dim=*/0, /*stride=*/1, tp.rank(), tp.size(),
//       NormalInit(0.02), /*seed=*/1234, DType::kF32));
//
// Random numbers: Philox4x32-10 (rng/philox.h), stream 0 of the seed, element
// i of the master weight = draw i (FillNormal), so the same seed gives the same
// master weight on every device and TP size.
#ifndef TPX_LAYERS_INIT_H_
#define TPX_LAYERS_INIT_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx::layers {

// Fills an f32 tensor in place from `seed`.
using InitMethod = std::function<absl::Status(const Tensor& weight, uint64_t seed)>;

// N(0, std^2) from the seeded generator.
InitMethod NormalInit(double std);
// All elements = value (useful in tests and for biases).
InitMethod ConstantInit(double value);

// Deterministic N(mean, std^2) fill of an f32 tensor (contiguous or not):
// element i (row-major) is Philox normal draw i of `seed`.
absl::Status FillNormal(const Tensor& t, uint64_t seed, double mean, double std);

// Initialises the f32 master weight of `master_shape` with init(seed),
// converts it to params_dtype, and returns this rank's shard along
// partition_dim: the master is cut into pieces of size/(world*stride) and
// rank r takes pieces r, r + world, r + 2 world, ... (concatenated). With
// master_out non-null the full master weight is returned too.
// Errors: the dim not divisible by world * stride, a bad partition_dim.
absl::StatusOr<Tensor> InitMasterWeightAndSplit(const Shape& master_shape, int64_t partition_dim,
                                                int64_t stride, int rank, int world,
                                                const InitMethod& init, uint64_t seed,
                                                DType params_dtype, Tensor* master_out = nullptr);

// Attributes of a layer parameter (Megatron's tensor_model_parallel,
// partition_dim, partition_stride; sequence_parallel marks replicated
// parameters whose gradients are partial under sequence parallelism and
// need an all-reduce over the tensor-parallel group).
struct ParamAttributes {
  bool tensor_model_parallel = false;
  int64_t partition_dim = -1;
  int64_t partition_stride = 1;
  bool sequence_parallel = false;
};

// True when the parameter is sharded or this is tensor-parallel rank 0:
// counting such parameters once per TP group avoids duplicates (grad norms).
bool ParamIsNotTensorParallelDuplicate(const ParamAttributes& attributes, int tp_rank);

}  // namespace tpx::layers

#endif  // TPX_LAYERS_INIT_H_
