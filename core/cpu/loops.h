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
#include "core/cpu/bf16_convert.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/merge_dims.h"

// On the per-row body of an elementwise loop: inline every call in it (the
// op's lambda, conversions, vec_math), so the row loop vectorises. GCC's
// inliner otherwise gives up on some bf16 instantiations and the loop then
// calls the op once per element.
#if defined(__GNUC__)
#define TPX_INLINE_CALLS __attribute__((flatten))
#else
#define TPX_INLINE_CALLS
#endif

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

// The driver of the row kernels: dispatches a floating dtype (caller
// validated) and calls fn(T{}, first, last) on disjoint row ranges covering
// [0, rows), split over the kernel threads (ParallelFor; cost_per_row is
// the elements a row touches).
//
//   ParallelFloatRows(x.dtype(), rows, h, [&](auto tag, int64_t first, int64_t last) {
//     using T = decltype(tag);
//     for (int64_t r = first; r < last; ++r) NormalizeRow(x.data<T>() + r * h, h);
//   });
template <typename Fn>
void ParallelFloatRows(DType dtype, int64_t rows, int64_t cost_per_row, Fn&& fn) {
  DispatchFloat(dtype, [&](auto tag) {
    ParallelFor(rows, cost_per_row, [&](int64_t first, int64_t last) { fn(tag, first, last); });
  });
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

// Writes out[j] = StoreAs<T>(f(j)) for j in [0, n), calling f once per j in
// order (f may also accumulate). bf16 rows are computed into an f32 block
// on the stack and rounded by FloatToBF16Array (core/cpu/bf16_convert.h),
// which does in one instruction what the rounding formula takes about ten
// for; other types store directly. Same bits either way.
//
//   StoreRow(y, h, [&](int64_t j) { return Gelu(Load(x[j]) + Load(b[j])); });
template <typename T, typename F>
TPX_VEC_INLINE void StoreRow(T* out, int64_t n, F&& f) {
  if constexpr (std::is_same_v<T, BF16>) {
    constexpr int64_t kBlock = 256;
    float block[kBlock];
    for (int64_t start = 0; start < n; start += kBlock) {
      const int64_t len = n - start < kBlock ? n - start : kBlock;
      for (int64_t j = 0; j < len; ++j) block[j] = f(start + j);
      FloatToBF16Array(block, out + start, len);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = StoreAs<T>(f(j));
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

// The rows of an N-operand strided iteration after merging dims, with byte
// strides: what ForEachRow and ParallelForEachRow walk.
template <size_t N>
struct RowIteration {
  MergedDims merged;  // sizes; strides in bytes, outermost first
  int64_t rows = 0;   // product of every size but the innermost
  int64_t inner = 0;  // innermost size (1 for a 0-d iteration)
  std::array<int64_t, N> inner_strides{};
};

template <size_t N>
RowIteration<N> MakeRowIteration(absl::Span<const int64_t> shape,
                                 std::array<absl::Span<const int64_t>, N> strides,
                                 std::array<int64_t, N> elem_size) {
  static_assert(N <= kMaxMergeOperands);
  RowIteration<N> it;
  it.merged = MergeDims(shape, absl::MakeConstSpan(strides.data(), N));
  if (it.merged.empty) return it;
  for (auto& dim : it.merged.strides) {
    for (size_t i = 0; i < N; ++i) dim[i] *= elem_size[i];
  }
  const std::vector<int64_t>& sizes = it.merged.sizes;
  if (sizes.empty()) {
    it.rows = 1;
    it.inner = 1;
    return it;
  }
  it.rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) it.rows *= sizes[d];
  it.inner = sizes.back();
  for (size_t i = 0; i < N; ++i) it.inner_strides[i] = it.merged.strides.back()[i];
  return it;
}

// Calls body(ptrs, inner_strides, n) for rows [first, last) of `it`, each
// row's elements [col, col + n) (n = it.inner - col when whole rows).
template <size_t N, typename Body>
void ForRowRange(const RowIteration<N>& it, std::array<char*, N> base, int64_t first,
                 int64_t last, int64_t col, int64_t n, Body& body) {
  if (first >= last) return;
  const std::vector<int64_t>& sizes = it.merged.sizes;
  const auto& bstrides = it.merged.strides;
  const size_t outer_rank = sizes.empty() ? 0 : sizes.size() - 1;
  // Unravel `first` into per-dim counters and pointers.
  std::vector<int64_t> counter(outer_rank, 0);
  std::array<char*, N> ptrs = base;
  int64_t rest = first;
  for (size_t d = outer_rank; d-- > 0;) {
    counter[d] = rest % sizes[d];
    rest /= sizes[d];
    for (size_t i = 0; i < N; ++i) ptrs[i] += counter[d] * bstrides[d][i];
  }
  for (size_t i = 0; i < N; ++i) ptrs[i] += col * it.inner_strides[i];
  for (int64_t r = first; r < last; ++r) {
    body(ptrs, it.inner_strides, n);
    // Advance the outer counter (dims outer_rank-1 .. 0).
    for (size_t d = outer_rank; d-- > 0;) {
      if (++counter[d] < sizes[d]) {
        for (size_t i = 0; i < N; ++i) ptrs[i] += bstrides[d][i];
        break;
      }
      for (size_t i = 0; i < N; ++i) ptrs[i] -= bstrides[d][i] * (sizes[d] - 1);
      counter[d] = 0;
    }
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
  const RowIteration<N> it = MakeRowIteration<N>(shape, strides, elem_size);
  ForRowRange(it, base, 0, it.rows, 0, it.inner, body);
}

// ForEachRow spread over the kernel threads (core/cpu/parallel.h) when the
// iteration is large: whole rows per thread, or pieces of rows when there
// are fewer rows than threads. body may run concurrently on disjoint
// pieces, so it must only write the elements it is given.
template <size_t N, typename Body>
void ParallelForEachRow(absl::Span<const int64_t> shape, std::array<char*, N> base,
                        std::array<absl::Span<const int64_t>, N> strides,
                        std::array<int64_t, N> elem_size, Body&& body) {
  const RowIteration<N> it = MakeRowIteration<N>(shape, strides, elem_size);
  if (it.rows == 0) return;
  if (it.rows >= KernelThreads()) {
    ParallelFor(it.rows, it.inner, [&](int64_t first, int64_t last) {
      ForRowRange(it, base, first, last, 0, it.inner, body);
    });
    return;
  }
  for (int64_t r = 0; r < it.rows; ++r) {
    ParallelFor(it.inner, 1, [&](int64_t first, int64_t last) {
      ForRowRange(it, base, r, r + 1, first, last - first, body);
    });
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_LOOPS_H_
