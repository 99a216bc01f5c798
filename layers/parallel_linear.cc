#include "layers/parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/ops.h"
#include "core/status_macros.h"
#include "parallel/mappings.h"
#include "parallel/utils.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::layers {

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Create(
    comm::Communicator& tp, int64_t input_size, int64_t output_size,
    ColumnParallelLinearOptions options) {
  ColumnParallelLinear layer;
  layer.tp_ = &tp;
  layer.input_size_ = input_size;
  layer.output_size_ = output_size;
  TPX_ASSIGN_OR_RETURN(layer.output_size_per_partition_,
                       parallel::Divide(output_size, tp.size(),
                                        "ColumnParallelLinear (output size by tp size)"));
  layer.weight_attributes_ = ParamAttributes{true, 0, options.stride, false};
  if (!options.skip_weight_param_allocation) {
    TPX_ASSIGN_OR_RETURN(Tensor w, InitMasterWeightAndSplit(
                                       {output_size, input_size}, 0, options.stride, tp.rank(),
                                       tp.size(), options.init_method, options.seed,
                                       options.params_dtype));
    TPX_ASSIGN_OR_RETURN(w, w.To(options.device));
    layer.weight_ = Variable(w, true, "column_parallel_linear.weight");
  }
  if (options.bias) {
    TPX_ASSIGN_OR_RETURN(Tensor b, Tensor::Zeros({layer.output_size_per_partition_},
                                                 options.params_dtype, options.device));
    layer.bias_ = Variable(b, true, "column_parallel_linear.bias");
    layer.bias_attributes_ = ParamAttributes{true, 0, options.stride, false};
  }
  layer.options_ = std::move(options);
  return layer;
}

absl::StatusOr<LinearOutput> ColumnParallelLinear::Forward(
    const Variable& x, const Variable& weight, std::optional<bool> gather_output) const {
  const Variable& w = weight.defined() ? weight : weight_;
  if (!w.defined()) {
    return absl::InvalidArgumentError(
        "ColumnParallelLinear: skip_weight_param_allocation is set, so Forward needs a weight");
  }
  const Shape expected{output_size_per_partition_, input_size_};
  if (w.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("ColumnParallelLinear: supplied weight is ",
                                                   ShapeString(w.shape()), ", expected ",
                                                   ShapeString(expected)));
  }
  const bool gather = gather_output.value_or(options_.gather_output);
  if (gather && options_.sequence_parallel) {
    return absl::InvalidArgumentError(
        "ColumnParallelLinear: gather_output is not supported with sequence_parallel");
  }
  LinearCommOptions comm;
  comm.tp = tp_;
  if (options_.sequence_parallel) {
    comm.mode = TpMode::kReduceScatter;
  } else if (tp_->size() > 1 && !options_.disable_grad_reduce) {
    comm.mode = TpMode::kAllReduce;
  }
  comm.regather_input_in_backward = options_.regather_input_in_backward;
  comm.gradient_accumulation_fusion = options_.gradient_accumulation_fusion;
  comm.timeline = options_.timeline;
  const Variable bias_in_gemm = options_.skip_bias_add ? Variable() : bias_;
  TPX_ASSIGN_OR_RETURN(Variable out, LinearWithAsyncCommunication(x, w, bias_in_gemm, comm));
  if (gather) {
    TPX_ASSIGN_OR_RETURN(out, parallel::GatherFromTensorParallelRegion(*tp_, out));
  }
  return LinearOutput{out, options_.skip_bias_add ? bias_ : Variable()};
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::Create(comm::Communicator& tp,
                                                            int64_t input_size,
                                                            int64_t output_size,
                                                            RowParallelLinearOptions options) {
  if (options.sequence_parallel && !options.input_is_parallel) {
    return absl::InvalidArgumentError(
        "RowParallelLinear: sequence_parallel needs input_is_parallel");
  }
  RowParallelLinear layer;
  layer.tp_ = &tp;
  layer.input_size_ = input_size;
  layer.output_size_ = output_size;
  TPX_ASSIGN_OR_RETURN(layer.input_size_per_partition_,
                       parallel::Divide(input_size, tp.size(),
                                        "RowParallelLinear (input size by tp size)"));
  TPX_ASSIGN_OR_RETURN(Tensor w, InitMasterWeightAndSplit(
                                     {output_size, input_size}, 1, options.stride, tp.rank(),
                                     tp.size(), options.init_method, options.seed,
                                     options.params_dtype));
  TPX_ASSIGN_OR_RETURN(w, w.To(options.device));
  layer.weight_ = Variable(w, true, "row_parallel_linear.weight");
  layer.weight_attributes_ = ParamAttributes{true, 1, options.stride, false};
  if (options.bias) {
    TPX_ASSIGN_OR_RETURN(Tensor b, Tensor::Zeros({output_size}, options.params_dtype,
                                                 options.device));
    layer.bias_ = Variable(b, true, "row_parallel_linear.bias");
    layer.bias_attributes_ = ParamAttributes{false, -1, 1, options.sequence_parallel};
  }
  layer.options_ = std::move(options);
  return layer;
}

absl::StatusOr<LinearOutput> RowParallelLinear::Forward(const Variable& x) const {
  Variable x_parallel = x;
  if (!options_.input_is_parallel) {
    TPX_ASSIGN_OR_RETURN(x_parallel, parallel::ScatterToTensorParallelRegion(*tp_, x));
  }
  LinearCommOptions comm;  // TpMode::kNone: the output reduction below is the communication
  comm.gradient_accumulation_fusion = options_.gradient_accumulation_fusion;
  TPX_ASSIGN_OR_RETURN(Variable partial,
                       LinearWithAsyncCommunication(x_parallel, weight_, Variable(), comm));
  Variable out;
  if (options_.sequence_parallel) {
    TPX_ASSIGN_OR_RETURN(out, parallel::ReduceScatterToSequenceParallelRegion(*tp_, partial));
  } else {
    TPX_ASSIGN_OR_RETURN(out, parallel::ReduceFromTensorParallelRegion(*tp_, partial));
  }
  if (options_.skip_bias_add || !bias_.defined()) return LinearOutput{out, bias_};
  TPX_ASSIGN_OR_RETURN(out, ag::Add(out, bias_));
  return LinearOutput{out, Variable()};
}

absl::StatusOr<std::vector<sharded_state::ShardedTensor>> ColumnParallelLinear::ShardedState(
    const std::string& prefix) const {
  std::vector<sharded_state::ShardedTensor> state;
  for (const auto& [name, v] : {std::pair{"weight", &weight_}, std::pair{"bias", &bias_}}) {
    if (!v->defined()) continue;
    TPX_ASSIGN_OR_RETURN(auto t, sharded_state::ShardedTensor::Split(
                                     prefix + name, v->value(), 0, tp_->rank(), tp_->size(),
                                     options_.stride));
    state.push_back(std::move(t));
  }
  return state;
}

absl::Status ColumnParallelLinear::SetFullWeights(const Tensor& weight, const Tensor& bias) {
  TPX_ASSIGN_OR_RETURN(auto state, ShardedState(""));
  return sharded_state::AssignAllFromFull(state, {{"weight", weight}, {"bias", bias}});
}

absl::StatusOr<std::vector<sharded_state::ShardedTensor>> RowParallelLinear::ShardedState(
    const std::string& prefix) const {
  std::vector<sharded_state::ShardedTensor> state;
  TPX_ASSIGN_OR_RETURN(auto w, sharded_state::ShardedTensor::Split(prefix + "weight",
                                                                   weight_.value(), 1, tp_->rank(),
                                                                   tp_->size(), options_.stride));
  state.push_back(std::move(w));
  if (bias_.defined()) {
    TPX_ASSIGN_OR_RETURN(auto b, sharded_state::ShardedTensor::Replicated(
                                     prefix + "bias", bias_.value(), tp_->rank()));
    state.push_back(std::move(b));
  }
  return state;
}

absl::Status RowParallelLinear::SetFullWeights(const Tensor& weight, const Tensor& bias) {
  TPX_ASSIGN_OR_RETURN(auto state, ShardedState(""));
  return sharded_state::AssignAllFromFull(state, {{"weight", weight}, {"bias", bias}});
}

}  // namespace tpx::layers
