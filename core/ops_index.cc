// IndexSelect (row gather) and IndexAdd (scatter-add) along one dim: index
// validation (on the host) and output allocation; the device's kernels copy.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckInput;

// The index values as i64, each checked against [0, limit).
absl::StatusOr<std::vector<int64_t>> ReadIndex(const Tensor& index, int64_t limit,
                                               const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(index, op, "index"));
  if (index.dtype() != DType::kI32 && index.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": index must be i32 or i64, got ",
                                                   index.ToString()));
  }
  if (index.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": index must be 1-D, got ",
                                                   index.ToString()));
  }
  std::vector<int64_t> idx = index.ToVector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= limit) {
      return absl::OutOfRangeError(absl::StrCat(op, ": index[", i, "] = ", idx[i],
                                                " is out of range [0, ", limit, ")"));
    }
  }
  return idx;
}

}  // namespace

absl::StatusOr<Tensor> IndexSelect(const Tensor& t, int64_t dim, const Tensor& index) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, t.dim(), "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndex(index, t.size(d), "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf("IndexSelect", {&t, &index}));
  TPX_ASSIGN_OR_RETURN(Tensor src, t.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor idx_c, index.Contiguous());
  Shape out_shape = t.shape();
  out_shape[d] = static_cast<int64_t>(idx.size());
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(out_shape, t.dtype(), t.device()));
  TPX_RETURN_IF_ERROR(k->IndexSelect(out, src, d, idx_c));
  return out;
}

absl::Status IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "IndexAdd", "destination"));
  TPX_RETURN_IF_ERROR(CheckInput(src, "IndexAdd", "source"));
  if (dst.dtype() == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("IndexAdd: unsupported destination ",
                                                   dst.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, dst.dim(), "IndexAdd"));
  TPX_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndex(index, dst.size(d), "IndexAdd"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf("IndexAdd", {&dst, &index, &src}));
  Shape expected = dst.shape();
  expected[d] = static_cast<int64_t>(idx.size());
  if (src.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexAdd: source shape ", ShapeString(src.shape()), " should be ",
        ShapeString(expected), " for destination ", ShapeString(dst.shape()), ", dim ", d,
        " and ", idx.size(), " indices"));
  }
  TPX_ASSIGN_OR_RETURN(Tensor s, src.To(dst.dtype()));
  TPX_ASSIGN_OR_RETURN(Tensor idx_c, index.Contiguous());
  // Work in place when dst is contiguous, else on a copy written back at the end.
  TPX_ASSIGN_OR_RETURN(Tensor work, dst.Contiguous());
  TPX_RETURN_IF_ERROR(k->IndexAdd(work, d, idx_c, s));
  if (!work.SharesStorageWith(dst)) TPX_RETURN_IF_ERROR(dst.CopyFrom(work));
  return absl::OkStatus();
}

}  // namespace tpx::ops
