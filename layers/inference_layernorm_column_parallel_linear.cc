#include "layers/inference_layernorm_column_parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::layers {

absl::StatusOr<InferenceLayerNormColumnParallelLinear> InferenceLayerNormColumnParallelLinear::Create(
    comm::Communicator& tp, const ColumnParallelLinear& linear, InferenceNorm norm) {
  if (!linear.weight().defined()) {
    return absl::InvalidArgumentError(
        "InferenceLayerNormColumnParallelLinear: the trained layer has no weight of its own "
        "(skip_weight_param_allocation)");
  }
  TPX_RETURN_IF_ERROR(
      CheckNorm(norm, linear.input_size(), "InferenceLayerNormColumnParallelLinear"));
  InferenceLayerNormColumnParallelLinear layer;
  layer.tp_ = &tp;
  layer.input_size_ = linear.input_size();
  layer.output_size_per_partition_ = linear.output_size_per_partition();
  layer.weight_ = linear.weight();
  layer.bias_ = linear.bias();
  layer.norm_ = std::move(norm);
  layer.gathered_ = std::make_shared<RowBuffer>();
  return layer;
}

absl::StatusOr<Tensor> InferenceLayerNormColumnParallelLinear::Forward(const Tensor& x) const {
  if (!x.defined() || x.dim() < 2 || x.size(-1) != input_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("InferenceLayerNormColumnParallelLinear: input must be [rows, ..., ",
                     input_size_, "], got ", x.defined() ? x.ToString() : std::string("none")));
  }
  const int64_t rows = x.numel() / input_size_;
  const int n = tp_->size();
  Shape gathered_shape = x.shape();
  gathered_shape[0] *= n;
  TPX_ASSIGN_OR_RETURN(Tensor all, gathered_->View(rows * n, input_size_, x.dtype(), x.device()));
  // Normalise straight into this rank's block of the gather buffer, then
  // gather in place: the norm output is never copied.
  TPX_ASSIGN_OR_RETURN(Tensor own, all.Narrow(0, rows * tp_->rank(), rows));
  TPX_ASSIGN_OR_RETURN(Tensor x2, x.Reshape({rows, input_size_}));
  TPX_RETURN_IF_ERROR(NormInto(norm_, x2, own));
  if (n > 1) {
    TPX_RETURN_IF_ERROR(tp_->AllGather(own, all).Wait());
  }
  TPX_ASSIGN_OR_RETURN(Tensor gathered, all.View(gathered_shape));
  return ForwardNormalized(gathered);
}

absl::StatusOr<Tensor> InferenceLayerNormColumnParallelLinear::ForwardNormalized(
    const Tensor& x) const {
  if (!x.defined() || x.dim() < 2 || x.size(-1) != input_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InferenceLayerNormColumnParallelLinear: normalised input must be [rows, ..., ",
        input_size_, "], got ", x.defined() ? x.ToString() : std::string("none")));
  }
  return ops::Linear(x, weight_.value(), bias_.defined() ? bias_.value() : Tensor());
}

}  // namespace tpx::layers
