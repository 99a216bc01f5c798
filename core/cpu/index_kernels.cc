// CPU DeviceKernels: IndexSelect (row gather) and IndexAdd (scatter-add).
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"

namespace tpx::cpu {
namespace {

// outer / inner element counts around dim.
std::pair<int64_t, int64_t> OuterInner(absl::Span<const int64_t> shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
  return {outer, inner};
}

// index[j] as i64 (index is contiguous i32 or i64).
int64_t IndexAt(const Tensor& index, int64_t j) {
  return index.dtype() == DType::kI32 ? index.data<int32_t>()[j] : index.data<int64_t>()[j];
}

}  // namespace

absl::Status CpuDeviceKernels::IndexSelect(const Tensor& out, const Tensor& in, int64_t dim,
                                           const Tensor& index) {
  auto [outer, inner] = OuterInner(in.shape(), dim);
  const size_t block = static_cast<size_t>(inner) * SizeOf(in.dtype());
  const char* s = static_cast<const char*>(in.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t n = in.size(dim);
  const int64_t k = index.numel();
  for (int64_t i = 0; i < outer; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      std::memcpy(o + (i * k + j) * block, s + (i * n + IndexAt(index, j)) * block, block);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index,
                                        const Tensor& src) {
  auto [outer, inner] = OuterInner(dst.shape(), dim);
  const int64_t n = dst.size(dim);
  const int64_t k = index.numel();
  DispatchDType(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* w = dst.template data<T>();
      const T* x = src.template data<T>();
      for (int64_t i = 0; i < outer; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          T* row = w + (i * n + IndexAt(index, j)) * inner;
          const T* add = x + (i * k + j) * inner;
          for (int64_t e = 0; e < inner; ++e) {
            row[e] = StoreAs<T>(Load(row[e]) + Load(add[e]));
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
