// Column sums over the rows of a [rows, h] block, added up in fixed chunks
// of rows so that the result does not depend on the thread count: what a
// row kernel uses to produce a bias or norm-weight gradient in the same pass
// that writes its dx (no second read of dx). Internal to the CPU kernels.
//
//   ColumnSums sums(rows, h, /*count=*/1);
//   ParallelFor(sums.chunks(), ColumnSums::kRowsPerChunk * h, [&](int64_t c0, int64_t c1) {
//     for (int64_t c = c0; c < c1; ++c) {
//       float* acc = sums.ZeroedPartial(c, 0);
//       for (int64_t r = sums.first_row(c); r < sums.last_row(c); ++r) AddRow(r, acc);
//     }
//   });
//   sums.Total(0, /*scale=*/1.0f, db);  // db[j] = sum of every chunk's acc[j], in order
//
// count > 1 keeps that many independent sums per chunk (e.g. dweight and
// dbias, or one per outer block of a reduction).
#ifndef TPX_CORE_CPU_COLUMN_SUMS_H_
#define TPX_CORE_CPU_COLUMN_SUMS_H_

#include <algorithm>
#include <cstdint>

#include "core/allocator.h"
#include "core/cpu/loops.h"

namespace tpx::cpu {

class ColumnSums {
 public:
  // Rows per partial sum: small enough that the row loops of one chunk keep
  // the partial row in L1, large enough that the final pass is short.
  static constexpr int64_t kRowsPerChunk = 32;

  ColumnSums(int64_t rows, int64_t h, int64_t count)
      : rows_(rows),
        h_(h),
        count_(count),
        chunks_((rows + kRowsPerChunk - 1) / kRowsPerChunk),
        bytes_(static_cast<size_t>(chunks_ * count_ * h_) * sizeof(float)),
        // The caching allocator: a step's partial buffers come back warm
        // instead of as fresh pages.
        partial_(static_cast<float*>(GetCpuAllocator().Allocate(bytes_))) {}
  ~ColumnSums() { GetCpuAllocator().Deallocate(partial_, bytes_); }
  ColumnSums(const ColumnSums&) = delete;
  ColumnSums& operator=(const ColumnSums&) = delete;

  // False when the buffer could not be allocated.
  bool ok() const { return partial_ != nullptr; }
  int64_t chunks() const { return chunks_; }
  int64_t first_row(int64_t chunk) const { return chunk * kRowsPerChunk; }
  int64_t last_row(int64_t chunk) const { return std::min(rows_, (chunk + 1) * kRowsPerChunk); }

  // Sum k's h accumulators for chunk c, set to 0. Each (c, k) belongs to one
  // thread at a time.
  float* ZeroedPartial(int64_t c, int64_t k) {
    float* p = partial_ + (c * count_ + k) * h_;
    std::fill_n(p, h_, 0.0f);
    return p;
  }

  // out[j] = scale * (sum over chunks, in chunk order, of sum k's [j]),
  // after every chunk's partial is written; once per k (it adds the chunks
  // up in chunk 0's partial, row by row, so the reads stay in order).
  template <typename T>
  void Total(int64_t k, float scale, T* out) {
    if (chunks_ == 0) {
      std::fill_n(out, h_, StoreAs<T>(0.0f * scale));  // a mean of nothing is NaN
      return;
    }
    float* first = partial_ + k * h_;
    for (int64_t c = 1; c < chunks_; ++c) {
      const float* p = partial_ + (c * count_ + k) * h_;
      for (int64_t j = 0; j < h_; ++j) first[j] += p[j];
    }
    for (int64_t j = 0; j < h_; ++j) out[j] = StoreAs<T>(first[j] * scale);
  }

 private:
  int64_t rows_, h_, count_, chunks_;
  size_t bytes_;
  float* partial_;
};

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_COLUMN_SUMS_H_
