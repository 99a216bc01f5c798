// Internal CPU kernel helpers shared by tensor.cc and the ops: per-dtype
// dispatch, element load/store with conversion, and a strided N-operand loop
// that collapses contiguous dims so contiguous tensors run one flat loop.
#ifndef TPX_CORE_CPU_LOOPS_H_
#define TPX_CORE_CPU_LOOPS_H_

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/merge_dims.h"

namespace tpx::cpu {

// Calls fn(T{}) with T the C++ element type of dtype.
template <typename Fn>
decltype(auto) DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kBF16: return fn(BF16{});
    case DType::kF16: return fn(F16{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI64: return fn(int64_t{});
    case DType::kBool: return fn(bool{});
  }
  TPX_CHECK(false) << "bad dtype " << static_cast<int>(dtype);
  return fn(float{});
}

// Like DispatchDType, for the floating dtypes only (caller validated).
template <typename Fn>
decltype(auto) DispatchFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kBF16: return fn(BF16{});
    case DType::kF16: return fn(F16{});
    default: return fn(float{});
  }
}

template <typename T>
inline constexpr bool kIsReduced = std::is_same_v<T, BF16> || std::is_same_v<T, F16>;

// The type arithmetic on T happens in: float for all floating types.
template <typename T>
using ComputeType = std::conditional_t<kIsReduced<T>, float, T>;

template <typename T>
inline ComputeType<T> Load(T v) {
  if constexpr (kIsReduced<T>) {
    return v.ToFloat();
  } else {
    return v;
  }
}

// Converts a computed value to element type T (round-to-nearest-even for
// bf16/f16, C++ conversion otherwise, != 0 for bool).
template <typename T, typename V>
inline T StoreAs(V v) {
  if constexpr (kIsReduced<T>) {
    return T::FromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != V(0);
  } else {
    return static_cast<T>(v);
  }
}

// Element conversion between any two element types.
template <typename To, typename From>
inline To Convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsReduced<From>) {
    return StoreAs<To>(v.ToFloat());
  } else {
    return StoreAs<To>(v);
  }
}

// Runs body(ptrs, byte_strides, n) over every innermost row of an
// N-operand strided iteration of `shape`. Operand i starts at base[i] (bytes)
// and advances strides[i][d] elements of elem_size[i] bytes along dim d
// (stride 0 = broadcast). The dims are merged first (core/merge_dims.h), so
// contiguous operands give one row.
template <size_t N, typename Body>
void ForEachRow(absl::Span<const int64_t> shape, std::array<char*, N> base,
                std::array<absl::Span<const int64_t>, N> strides,
                std::array<int64_t, N> elem_size, Body&& body) {
  static_assert(N <= kMaxMergeOperands);
  MergedDims merged = MergeDims(shape, absl::MakeConstSpan(strides.data(), N));
  if (merged.empty) return;
  const std::vector<int64_t>& sizes = merged.sizes;
  // In place: element strides become byte strides, outermost first.
  auto& bstrides = merged.strides;
  for (auto& dim : bstrides) {
    for (size_t i = 0; i < N; ++i) dim[i] *= elem_size[i];
  }
  if (sizes.empty()) {
    body(base, std::array<int64_t, N>{}, int64_t{1});
    return;
  }
  const size_t rank = sizes.size();
  const int64_t inner = sizes.back();
  std::array<int64_t, N> inner_strides;
  for (size_t i = 0; i < N; ++i) inner_strides[i] = bstrides.back()[i];
  std::vector<int64_t> counter(rank, 0);
  std::array<char*, N> ptrs = base;
  while (true) {
    body(ptrs, inner_strides, inner);
    // Advance the outer counter (dims rank-2 .. 0).
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++counter[d] < sizes[d]) {
        for (size_t i = 0; i < N; ++i) ptrs[i] += bstrides[d][i];
        break;
      }
      for (size_t i = 0; i < N; ++i) ptrs[i] -= bstrides[d][i] * (sizes[d] - 1);
      counter[d] = 0;
    }
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_LOOPS_H_
