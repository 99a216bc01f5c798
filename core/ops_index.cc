// IndexSelect (row gather) and IndexAdd (scatter-add) along one dim.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu/loops.h"
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

// outer / inner element counts around dim.
std::pair<int64_t, int64_t> OuterInner(absl::Span<const int64_t> shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
  return {outer, inner};
}

}  // namespace

absl::StatusOr<Tensor> IndexSelect(const Tensor& t, int64_t dim, const Tensor& index) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, t.dim(), "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndex(index, t.size(d), "IndexSelect"));
  TPX_ASSIGN_OR_RETURN(Tensor src, t.Contiguous());
  Shape out_shape = t.shape();
  out_shape[d] = static_cast<int64_t>(idx.size());
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(out_shape, t.dtype()));
  auto [outer, inner] = OuterInner(t.shape(), d);
  const size_t block = static_cast<size_t>(inner) * SizeOf(t.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t n = t.size(d);
  const int64_t k = static_cast<int64_t>(idx.size());
  for (int64_t i = 0; i < outer; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      std::memcpy(o + (i * k + j) * block, s + (i * n + idx[j]) * block, block);
    }
  }
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
  Shape expected = dst.shape();
  expected[d] = static_cast<int64_t>(idx.size());
  if (src.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexAdd: source shape ", ShapeString(src.shape()), " should be ",
        ShapeString(expected), " for destination ", ShapeString(dst.shape()), ", dim ", d,
        " and ", idx.size(), " indices"));
  }
  TPX_ASSIGN_OR_RETURN(Tensor s, src.To(dst.dtype()));
  // Work in place when dst is contiguous, else on a copy written back at the end.
  TPX_ASSIGN_OR_RETURN(Tensor work, dst.Contiguous());
  auto [outer, inner] = OuterInner(dst.shape(), d);
  const int64_t n = dst.size(d);
  const int64_t k = static_cast<int64_t>(idx.size());
  cpu::DispatchDType(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* w = work.template data<T>();
      const T* x = s.template data<T>();
      for (int64_t i = 0; i < outer; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          T* row = w + (i * n + idx[j]) * inner;
          const T* add = x + (i * k + j) * inner;
          for (int64_t e = 0; e < inner; ++e) {
            row[e] = cpu::StoreAs<T>(cpu::Load(row[e]) + cpu::Load(add[e]));
          }
        }
      }
    }
  });
  if (!work.SharesStorageWith(dst)) TPX_RETURN_IF_ERROR(dst.CopyFrom(work));
  return absl::OkStatus();
}

}  // namespace tpx::ops
