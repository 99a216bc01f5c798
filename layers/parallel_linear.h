// ColumnParallelLinear and RowParallelLinear (Megatron semantics).
//
// Column: Y = X A^T + b with A split by rows (output features) over the
// tensor-parallel group: rank r computes Y_r = X A_r^T + b_r. Row: A split by
// columns (input features); each rank multiplies its slice of X and the
// partial outputs are summed (all-reduce, or reduce-scatter along the
// sequence dim under sequence parallelism).
//
// A Megatron MLP:
//   TPX_ASSIGN_OR_RETURN(auto fc1, ColumnParallelLinear::Create(tp, h, 4 * h, {}));
//   TPX_ASSIGN_OR_RETURN(auto fc2, RowParallelLinear::Create(tp, 4 * h, h,
//                                                            {.input_is_parallel = true}));
//   TPX_ASSIGN_OR_RETURN(auto a, fc1.Forward(x));
//   TPX_ASSIGN_OR_RETURN(Variable g, ag::Gelu(a.output));
//   TPX_ASSIGN_OR_RETURN(auto y, fc2.Forward(g));
//
// Weights are initialised from the full master weight (layers/init.h), so the
// shards equal slices of the TP=1 layer for the same seed. Biases start at 0.
// The communicator must outlive the layer and its graphs.
#ifndef TPX_LAYERS_PARALLEL_LINEAR_H_
#define TPX_LAYERS_PARALLEL_LINEAR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "layers/init.h"
#include "layers/linear_function.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::layers {

// The output and, with skip_bias_add, the bias left for the caller to add
// (undefined otherwise).
struct LinearOutput {
  Variable output;
  Variable output_bias;
};

struct ColumnParallelLinearOptions {
  bool bias = true;
  // All-gather the output along the last dim (not with sequence_parallel).
  bool gather_output = false;
  bool skip_bias_add = false;
  // Input arrives split along dim 0 (tokens); it is all-gathered in forward
  // and its gradient reduce-scattered in backward.
  bool sequence_parallel = false;
  // SP: re-gather the input in backward rather than saving the gathered copy.
  bool regather_input_in_backward = true;
  // No weight is allocated; Forward must be given one [out/tp, in].
  bool skip_weight_param_allocation = false;
  bool gradient_accumulation_fusion = false;
  // Do not all-reduce the input gradient (the caller reduces it).
  bool disable_grad_reduce = false;
  // Interleaved partitions (e.g. fused QKV): see InitMasterWeightAndSplit.
  int64_t stride = 1;
  InitMethod init_method = NormalInit(0.02);
  uint64_t seed = 1234;
  DType params_dtype = DType::kF32;
  // Where the parameters live (initialised on the host, then copied). CUDA
  // needs //core/cuda linked in and a device backend for the collectives.
  Device device = Device::CPU();
  LinearBackwardTimeline* timeline = nullptr;
};

class ColumnParallelLinear {
 public:
  // Errors: output_size not divisible by tp size x stride.
  static absl::StatusOr<ColumnParallelLinear> Create(comm::Communicator& tp, int64_t input_size,
                                                     int64_t output_size,
                                                     ColumnParallelLinearOptions options);
  // x [..., in] ([tokens/tp, ..., in] with sequence_parallel). weight
  // overrides the layer's own (required with skip_weight_param_allocation);
  // gather_output overrides the option for this call.
  absl::StatusOr<LinearOutput> Forward(const Variable& x, const Variable& weight = Variable(),
                                       std::optional<bool> gather_output = std::nullopt) const;

  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  const ParamAttributes& weight_attributes() const { return weight_attributes_; }
  const ParamAttributes& bias_attributes() const { return bias_attributes_; }
  int64_t input_size() const { return input_size_; }
  int64_t output_size() const { return output_size_; }
  int64_t output_size_per_partition() const { return output_size_per_partition_; }

  // The parameters as shards of global tensors, named prefix + "weight" /
  // "bias" (sharded_state/sharded_tensor.h); they share storage with the layer.
  absl::StatusOr<std::vector<sharded_state::ShardedTensor>> ShardedState(
      const std::string& prefix) const;
  // Gives the layer weights from the full (TP=1) tensors: this rank takes its
  // slice. An undefined bias leaves the bias as it is. Errors naming the
  // tensor (shape, dtype); nothing changes on error.
  absl::Status SetFullWeights(const Tensor& weight, const Tensor& bias = Tensor());

 private:
  ColumnParallelLinear() = default;
  comm::Communicator* tp_ = nullptr;
  int64_t input_size_ = 0, output_size_ = 0, output_size_per_partition_ = 0;
  ColumnParallelLinearOptions options_;
  Variable weight_, bias_;
  ParamAttributes weight_attributes_, bias_attributes_;
};

struct RowParallelLinearOptions {
  bool bias = true;
  // Input is already split along the last dim; otherwise it is scattered.
  bool input_is_parallel = false;
  bool skip_bias_add = false;
  // Output is reduce-scattered along dim 0 (needs input_is_parallel).
  bool sequence_parallel = false;
  bool gradient_accumulation_fusion = false;
  int64_t stride = 1;
  InitMethod init_method = NormalInit(0.02);
  uint64_t seed = 1234;
  DType params_dtype = DType::kF32;
  // Where the parameters live (initialised on the host, then copied). CUDA
  // needs //core/cuda linked in and a device backend for the collectives.
  Device device = Device::CPU();
};

class RowParallelLinear {
 public:
  // Errors: input_size not divisible by tp size x stride; sequence_parallel
  // without input_is_parallel.
  static absl::StatusOr<RowParallelLinear> Create(comm::Communicator& tp, int64_t input_size,
                                                  int64_t output_size,
                                                  RowParallelLinearOptions options);
  // x [..., in/tp] (or [..., in] without input_is_parallel).
  absl::StatusOr<LinearOutput> Forward(const Variable& x) const;

  const Variable& weight() const { return weight_; }
  // Replicated; under sequence parallelism its gradient is partial per rank
  // (bias_attributes().sequence_parallel) and must be all-reduced over tp.
  const Variable& bias() const { return bias_; }
  const ParamAttributes& weight_attributes() const { return weight_attributes_; }
  const ParamAttributes& bias_attributes() const { return bias_attributes_; }
  int64_t input_size_per_partition() const { return input_size_per_partition_; }

  // The parameters as shards of global tensors, named prefix + "weight" /
  // "bias" (sharded_state/sharded_tensor.h); they share storage with the layer.
  absl::StatusOr<std::vector<sharded_state::ShardedTensor>> ShardedState(
      const std::string& prefix) const;
  // Gives the layer weights from the full (TP=1) tensors: this rank takes its
  // slice. An undefined bias leaves the bias as it is. Errors naming the
  // tensor (shape, dtype); nothing changes on error.
  absl::Status SetFullWeights(const Tensor& weight, const Tensor& bias = Tensor());

 private:
  RowParallelLinear() = default;
  comm::Communicator* tp_ = nullptr;
  int64_t input_size_ = 0, output_size_ = 0, input_size_per_partition_ = 0;
  RowParallelLinearOptions options_;
  Variable weight_, bias_;
  ParamAttributes weight_attributes_, bias_attributes_;
};

}  // namespace tpx::layers

#endif  // TPX_LAYERS_PARALLEL_LINEAR_H_
