#include "layers/inference_row_parallel_linear.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::layers {
namespace {

absl::Status CheckRows(const comm::Communicator& tp, const Tensor& t, const char* who) {
  if (t.size(0) % tp.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", t.size(0), " rows (dim 0 of ", t.ToString(),
        ") do not divide over tensor-parallel size ", tp.size(),
        "; pad the sequence to a multiple of it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReduceScatterAddNormAllGather(comm::Communicator& tp, const Tensor& partial,
                                           const Tensor& bias, const Tensor& residual,
                                           const InferenceNorm& norm, RowBuffer& reduced,
                                           const Tensor& gathered) {
  constexpr char kWho[] = "ReduceScatterAddNormAllGather";
  const int n = tp.size();
  if (!partial.defined() || partial.dim() < 2 || !residual.defined() ||
      !gathered.defined() || partial.shape() != gathered.shape() ||
      residual.size(-1) != partial.size(-1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWho, ": partial and gathered must be one shape [rows, ..., h] and residual [rows/tp, "
        "..., h]; got partial ", partial.ToString(), ", residual ", residual.ToString(),
        ", gathered ", gathered.ToString()));
  }
  TPX_RETURN_IF_ERROR(CheckRows(tp, partial, kWho));
  Shape local_shape = partial.shape();
  local_shape[0] /= n;
  if (residual.shape() != local_shape) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": residual ", residual.ToString(),
                                                   " must be this rank's rows ",
                                                   ShapeString(local_shape)));
  }
  const int64_t h = partial.size(-1);
  const int64_t local_rows = residual.numel() / h;
  TPX_ASSIGN_OR_RETURN(Tensor all, gathered.View({local_rows * n, h}));
  TPX_ASSIGN_OR_RETURN(Tensor own, all.Narrow(0, local_rows * tp.rank(), local_rows));
  TPX_ASSIGN_OR_RETURN(Tensor res, residual.View({local_rows, h}));
  if (n == 1) {
    TPX_ASSIGN_OR_RETURN(Tensor p, partial.View({local_rows, h}));
    return AddNormInto(norm, res, p, bias, own);
  }
  TPX_ASSIGN_OR_RETURN(Tensor part, reduced.View(local_rows, h, partial.dtype(), partial.device()));
  TPX_ASSIGN_OR_RETURN(Tensor partial_rows, partial.View({local_rows * n, h}));
  TPX_RETURN_IF_ERROR(tp.ReduceScatter(partial_rows, part, comm::ReduceOp::kSum).Wait());
  TPX_RETURN_IF_ERROR(AddNormInto(norm, res, part, bias, own));
  return tp.AllGather(own, all).Wait();
}

absl::StatusOr<InferenceRowParallelLinear> InferenceRowParallelLinear::Create(
    comm::Communicator& tp, const RowParallelLinear& linear) {
  if (!linear.weight().defined() || linear.weight().dim() != 2) {
    return absl::InvalidArgumentError(
        "InferenceRowParallelLinear: the trained layer has no 2-D weight");
  }
  InferenceRowParallelLinear layer;
  layer.tp_ = &tp;
  layer.input_size_per_partition_ = linear.input_size_per_partition();
  layer.output_size_ = linear.weight().shape()[0];
  layer.weight_ = linear.weight();
  layer.bias_ = linear.bias();
  layer.buffers_ = std::make_shared<Buffers>();
  return layer;
}

absl::StatusOr<Tensor> InferenceRowParallelLinear::Rows(const Tensor& x) const {
  if (!x.defined() || x.dim() < 2 || x.size(-1) != input_size_per_partition_) {
    return absl::InvalidArgumentError(
        absl::StrCat("InferenceRowParallelLinear: input must be [rows, ..., ",
                     input_size_per_partition_, "] (this rank's input features), got ",
                     x.defined() ? x.ToString() : std::string("none")));
  }
  TPX_RETURN_IF_ERROR(CheckRows(*tp_, x, "InferenceRowParallelLinear"));
  return x.Reshape({x.numel() / input_size_per_partition_, input_size_per_partition_});
}

absl::StatusOr<Tensor> InferenceRowParallelLinear::Forward(const Tensor& x) const {
  TPX_ASSIGN_OR_RETURN(Tensor x2, Rows(x));
  const int n = tp_->size();
  Shape out_shape = x.shape();
  out_shape.back() = output_size_;
  const Tensor bias = bias_.defined() ? bias_.value() : Tensor();
  if (n == 1) {
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Linear(x2, weight_.value(), bias));
    return y.View(out_shape);
  }
  // The bias is added once, after the sum over ranks.
  TPX_ASSIGN_OR_RETURN(Tensor partial, ops::Linear(x2, weight_.value()));
  out_shape[0] /= n;
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({x2.size(0) / n, output_size_}, x.dtype(),
                                                 x.device()));
  TPX_RETURN_IF_ERROR(tp_->ReduceScatter(partial, out, comm::ReduceOp::kSum).Wait());
  if (bias.defined()) TPX_RETURN_IF_ERROR(ops::AddInPlace(out, bias));
  return out.View(out_shape);
}

absl::StatusOr<Tensor> InferenceRowParallelLinear::ForwardAddNormGather(
    const Tensor& x, const Tensor& residual, const InferenceNorm& next_norm) const {
  TPX_ASSIGN_OR_RETURN(Tensor x2, Rows(x));
  TPX_RETURN_IF_ERROR(CheckNorm(next_norm, output_size_, "InferenceRowParallelLinear"));
  const int64_t rows = x2.size(0);
  Shape full_shape = x.shape();
  full_shape.back() = output_size_;
  TPX_ASSIGN_OR_RETURN(Tensor partial,
                       buffers_->partial.View(rows, output_size_, x.dtype(), x.device()));
  TPX_RETURN_IF_ERROR(ops::MatmulInto(partial, x2, weight_.value(), /*trans_a=*/false,
                                      /*trans_b=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor gathered,
                       buffers_->gathered.View(rows, output_size_, x.dtype(), x.device()));
  TPX_ASSIGN_OR_RETURN(partial, partial.View(full_shape));
  TPX_ASSIGN_OR_RETURN(gathered, gathered.View(full_shape));
  TPX_RETURN_IF_ERROR(ReduceScatterAddNormAllGather(
      *tp_, partial, bias_.defined() ? bias_.value() : Tensor(), residual, next_norm,
      buffers_->reduced, gathered));
  return gathered;
}

}  // namespace tpx::layers
