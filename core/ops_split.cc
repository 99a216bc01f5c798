// Split / Chunk / Concat along one dim, with uneven sizes.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {

using internal::CheckInput;

std::vector<int64_t> SplitSizes(int64_t n, int64_t parts) {
  TPX_CHECK(parts >= 1 && n >= 0) << "SplitSizes(" << n << ", " << parts << ")";
  std::vector<int64_t> sizes(parts, n / parts);
  for (int64_t i = 0; i < n % parts; ++i) ++sizes[i];
  return sizes;
}

absl::StatusOr<std::vector<Tensor>> Split(const Tensor& t, absl::Span<const int64_t> sizes,
                                          int64_t dim) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "Split"));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, t.dim(), "Split"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Split: negative size in [",
                                                     absl::StrJoin(sizes, ", "), "]"));
    }
    total += s;
  }
  if (total != t.size(d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Split: sizes [", absl::StrJoin(sizes, ", "), "] sum to ", total, " but dim ", d,
        " of shape ", ShapeString(t.shape()), " has size ", t.size(d)));
  }
  std::vector<Tensor> parts;
  parts.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    TPX_ASSIGN_OR_RETURN(Tensor part, t.Narrow(d, start, s));
    parts.push_back(std::move(part));
    start += s;
  }
  return parts;
}

absl::StatusOr<std::vector<Tensor>> Chunk(const Tensor& t, int64_t parts, int64_t dim) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "Chunk"));
  if (parts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Chunk: parts must be >= 1, got ", parts));
  }
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, t.dim(), "Chunk"));
  return Split(t, SplitSizes(t.size(d), parts), d);
}

absl::StatusOr<Tensor> Concat(absl::Span<const Tensor> tensors, int64_t dim) {
  if (tensors.empty()) return absl::InvalidArgumentError("Concat: no tensors");
  for (const Tensor& t : tensors) TPX_RETURN_IF_ERROR(CheckInput(t, "Concat"));
  const Tensor& first = tensors[0];
  for (const Tensor& t : tensors) {
    TPX_RETURN_IF_ERROR(internal::KernelsOf("Concat", {&first, &t}).status());
  }
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, first.dim(), "Concat"));
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool compatible = t.dim() == first.dim() && t.dtype() == first.dtype();
    for (int64_t k = 0; compatible && k < t.dim(); ++k) {
      compatible = k == d || t.size(k) == first.size(k);
    }
    if (!compatible) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Concat: tensor ", i, " (", t.ToString(), ") does not match tensor 0 (",
          first.ToString(), ") outside dim ", d));
    }
    out_shape[d] += t.size(d);
  }
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(out_shape, first.dtype(), first.device()));
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    TPX_ASSIGN_OR_RETURN(Tensor window, out.Narrow(d, start, t.size(d)));
    TPX_RETURN_IF_ERROR(window.CopyFrom(t));
    start += t.size(d);
  }
  return out;
}

}  // namespace tpx::ops
