#include "optim/grad_sync.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::optim {

absl::Status AllReduceGradients(comm::Communicator& dp, absl::Span<const Variable> params) {
  if (dp.size() == 1) return absl::OkStatus();
  for (const Variable& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat("AllReduceGradients: gradient of '",
                                                     p.name(), "' is not contiguous"));
    }
    TPX_RETURN_IF_ERROR(dp.AllReduce(g, comm::ReduceOp::kAvg).Wait());
  }
  return absl::OkStatus();
}

}  // namespace tpx::optim
