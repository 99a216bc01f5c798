// CPU DeviceKernels: device and memory entry points, copies, fill, GEMM.
#include "core/cpu/cpu_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu/loops.h"
#include "core/cpu/transpose16x16.h"
#include "core/cpu_features.h"
#include "core/gemm.h"

namespace tpx::cpu {
namespace {

// Rows [i0, i1) of a transposing plane of 32-bit elements, d[i * drs + j] =
// x[i + j * scs] for j < cols, in 16 x 16 blocks transposed in registers:
// 16 contiguous loads of x, 16 contiguous stores of d (the scalar tile
// loop gathered one element at a time). Edges go element by element.
TPX_AVX512F_TARGET void TransposePlaneRows32(uint32_t* d, const uint32_t* x, int64_t i0, int64_t i1,
                                             int64_t cols, int64_t drs, int64_t scs) {
  const int64_t i_whole = i0 + (i1 - i0) / 16 * 16, j_whole = cols / 16 * 16;
  for (int64_t i = i0; i < i_whole; i += 16) {
    for (int64_t j = 0; j < j_whole; j += 16) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_ps(x + i + (j + k) * scs);
      Transpose16x16(r);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) _mm512_storeu_ps(d + (i + k) * drs + j, r[k]);
    }
    for (int64_t k = i; k < i + 16; ++k) {
      for (int64_t j = j_whole; j < cols; ++j) d[k * drs + j] = x[k + j * scs];
    }
  }
  for (int64_t k = i_whole; k < i1; ++k) {
    for (int64_t j = 0; j < cols; ++j) d[k * drs + j] = x[k + j * scs];
  }
}

// Copies a transposing layout: dst is unit-stride along its last dim `c`,
// src along another dim `r`. Each (r, c) plane goes in blocks of rows split
// over the kernel threads: 16 x 16 register transposes for 32-bit elements
// of one dtype on AVX-512 CPUs, else 32 x 32 tiles element by element (both
// sides stay in cache). Returns false (nothing copied) when the layouts are
// not of that kind.
bool CopyTransposedTiles(const Tensor& dst, const Tensor& src) {
  const int64_t rank = dst.dim();
  if (rank < 2 || dst.numel() < 4096) return false;
  const int64_t c = rank - 1;
  if (dst.stride(c) != 1 || src.stride(c) == 1 || dst.size(c) < 2) return false;
  int64_t r = -1;
  for (int64_t d = 0; d < c; ++d) {
    if (src.stride(d) == 1 && src.size(d) > 1) r = d;
  }
  if (r < 0) return false;
  // Iterate every other dim outside; the (r, c) plane is tiled inside.
  Shape outer_shape = dst.shape();
  outer_shape[r] = 1;
  outer_shape[c] = 1;
  const int64_t rows = dst.size(r), cols = dst.size(c);
  const int64_t dst_row_stride = dst.stride(r), src_col_stride = src.stride(c);
  DispatchDType(dst.dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    DispatchDType(src.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      constexpr int64_t kTile = 32;
      auto plane_rows = [&](D* d, const S* x, int64_t i0, int64_t i1) {
        if constexpr (std::is_same_v<D, S> && sizeof(D) == 4) {
          if (CpuHasAvx512F()) {
            TransposePlaneRows32(reinterpret_cast<uint32_t*>(d),
                                 reinterpret_cast<const uint32_t*>(x), i0, i1, cols,
                                 dst_row_stride, src_col_stride);
            return;
          }
        }
        for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
          const int64_t j1 = std::min(cols, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = j0; j < j1; ++j) {
              d[i * dst_row_stride + j] = Convert<D>(x[i + j * src_col_stride]);
            }
          }
        }
      };
      std::vector<std::pair<D*, const S*>> planes;
      ForEachRow<2>(
          outer_shape, {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
          {dst.strides(), src.strides()}, {sizeof(D), sizeof(S)},
          [&](std::array<char*, 2> p, std::array<int64_t, 2> st, int64_t n) {
            for (int64_t t = 0; t < n; ++t) {
              planes.emplace_back(reinterpret_cast<D*>(p[0] + t * st[0]),
                                  reinterpret_cast<const S*>(p[1] + t * st[1]));
            }
          });
      // Work items: (plane, block of kTile rows), over the kernel threads
      // for 32-bit and wider elements. Narrower ones stay on one thread: a
      // bf16 [512, 2048] copy took 480-530 us on 2 threads against 325 us
      // on one (both sides then share each 64-byte line of the source).
      const int64_t blocks = (rows + kTile - 1) / kTile;
      auto run = [&](int64_t first, int64_t last) {
        for (int64_t q = first; q < last; ++q) {
          const auto& [d, x] = planes[q / blocks];
          const int64_t i0 = q % blocks * kTile;
          plane_rows(d, x, i0, std::min(rows, i0 + kTile));
        }
      };
      const int64_t items = static_cast<int64_t>(planes.size()) * blocks;
      if constexpr (sizeof(S) >= 4) {
        ParallelFor(items, kTile * cols, run);
      } else {
        run(0, items);
      }
    });
  });
  return true;
}

// Copies elements between two equally shaped strided tensors, converting dtype.
void CopyElements(const Tensor& dst, const Tensor& src) {
  if (CopyTransposedTiles(dst, src)) return;
  DispatchDType(dst.dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    DispatchDType(src.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      ParallelForEachRow<2>(
          dst.shape(),
          {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
          {dst.strides(), src.strides()}, {sizeof(D), sizeof(S)},
          [](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
            if constexpr (std::is_same_v<D, S>) {
              if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
                std::memcpy(p[0], p[1], n * sizeof(D));
                return;
              }
            }
            if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
              D* d = reinterpret_cast<D*>(p[0]);
              const S* x = reinterpret_cast<const S*>(p[1]);
              if constexpr (std::is_same_v<D, BF16> && std::is_same_v<S, float>) {
                FloatToBF16Array(x, d, n);
              } else {
                for (int64_t i = 0; i < n; ++i) d[i] = Convert<D>(x[i]);
              }
              return;
            }
            for (int64_t i = 0; i < n; ++i) {
              *reinterpret_cast<D*>(p[0] + i * s[0]) =
                  Convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
            }
          });
    });
  });
}

}  // namespace

absl::Status CpuDeviceKernels::CheckDevice(int index) {
  if (index == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the CPU device has index 0, not ", index));
}

Allocator& CpuDeviceKernels::allocator(int) { return GetCpuAllocator(); }

absl::Status CpuDeviceKernels::CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                                          int) {
  if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::CopyFromHost(void* device_dst, const void* host_src, size_t bytes,
                                            int) {
  if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Copy(const Tensor& dst, const Tensor& src) {
  CopyElements(dst, src);
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Fill(const Tensor& dst, double value) {
  DispatchDType(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = StoreAs<T>(value);
    ParallelForEachRow<1>(dst.shape(), {static_cast<char*>(dst.raw_data())}, {dst.strides()},
                  {sizeof(T)}, [v](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
                    if (s[0] == sizeof(T)) {
                      std::fill_n(reinterpret_cast<T*>(p[0]), n, v);
                      return;
                    }
                    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                  });
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Gemm(int, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                    int64_t k, float alpha, DType ab_dtype, const void* a,
                                    int64_t lda, const void* b, int64_t ldb, float beta,
                                    DType c_dtype, void* c, int64_t ldc) {
  return tpx::Gemm(trans_a, trans_b, m, n, k, alpha, ab_dtype, a, lda, b, ldb, beta, c_dtype, c,
                   ldc);
}

absl::Status CpuDeviceKernels::GemmBias(int, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                        int64_t k, DType ab_dtype, const void* a, int64_t lda,
                                        const void* b, int64_t ldb, const void* bias, void* c,
                                        int64_t ldc) {
  return tpx::GemmBias(trans_a, trans_b, m, n, k, ab_dtype, a, lda, b, ldb, bias, c, ldc);
}

absl::Status CpuDeviceKernels::GemmBatched(int, int64_t batch, bool trans_a, bool trans_b,
                                           int64_t m, int64_t n, int64_t k, float alpha,
                                           DType ab_dtype, const void* a, int64_t lda,
                                           int64_t stride_a, const void* b, int64_t ldb,
                                           int64_t stride_b, float beta, DType c_dtype, void* c,
                                           int64_t ldc, int64_t stride_c) {
  return tpx::GemmBatched(batch, trans_a, trans_b, m, n, k, alpha, ab_dtype, a, lda, stride_a, b,
                          ldb, stride_b, beta, c_dtype, c, ldc, stride_c);
}

}  // namespace tpx::cpu
