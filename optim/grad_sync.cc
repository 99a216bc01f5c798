#include "optim/grad_sync.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::optim {

absl::Status AllReduceGradient(comm::Communicator& comm, const Variable& param, comm::ReduceOp op,
                               DType reduce_dtype) {
  if (reduce_dtype != DType::kF32 && reduce_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduceGradient: reduce dtype must be f32 or bf16, got ",
                     std::string(DTypeName(reduce_dtype))));
  }
  const Tensor& g = param.grad();
  if (!g.defined()) return absl::OkStatus();
  if (!g.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduceGradient: gradient of '", param.name(), "' is not contiguous"));
  }
  if (g.dtype() == reduce_dtype) return comm.AllReduce(g, op).Wait();
  TPX_ASSIGN_OR_RETURN(Tensor converted, g.To(reduce_dtype));
  TPX_RETURN_IF_ERROR(comm.AllReduce(converted, op).Wait());
  Variable handle = param;  // shares the parameter; set_grad is not const
  return handle.set_grad(std::move(converted));
}

absl::Status AllReduceGradients(comm::Communicator& dp, absl::Span<const Variable> params,
                                DType reduce_dtype) {
  if (dp.size() == 1) return absl::OkStatus();
  for (const Variable& p : params) {
    TPX_RETURN_IF_ERROR(AllReduceGradient(dp, p, comm::ReduceOp::kAvg, reduce_dtype));
  }
  return absl::OkStatus();
}

}  // namespace tpx::optim
