#include "core/gemm.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tpx {
namespace {

int DefaultThreads() {
  if (const char* env = std::getenv("TPX_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::atomic<int>& ThreadSetting() {
  static std::atomic<int> threads{DefaultThreads()};
  return threads;
}

// oneDNN here runs on OpenMP, whose thread count is a per-calling-thread
// setting: apply the process-wide value on each thread before its GEMMs.
void ApplyThreads() {
  thread_local int applied = -1;
  const int want = ThreadSetting().load(std::memory_order_relaxed);
  if (applied != want) {
    omp_set_num_threads(want);
    applied = want;
  }
}

dnnl::memory::data_type ToDnnl(DType dtype) {
  return dtype == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Everything that determines a matmul primitive.
struct MatmulKey {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  DType ab_dtype, c_dtype;
  float alpha, beta;
  auto Tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dtype, c_dtype, alpha, beta);
  }
  bool operator<(const MatmulKey& o) const { return Tie() < o.Tie(); }
};

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc scratchpad;
};

// Primitive creation costs far more than a small GEMM, so primitives are
// cached per shape. Bounded: cleared when it grows past kMaxEntries. The
// scratchpad is user-provided per call so concurrent GEMMs from several
// threads (e.g. dgrad and wgrad overlapping) never share one.
CachedMatmul GetMatmul(const MatmulKey& key) {
  static std::mutex mu;
  static auto* cache = new std::map<MatmulKey, CachedMatmul>();
  constexpr size_t kMaxEntries = 512;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  using dims = dnnl::memory::dims;
  // Row-major op(A) [m, k]: A is stored [m, k] (strides {lda, 1}) or [k, m] (strides {1, lda}).
  dnnl::memory::desc a_md(dims{key.m, key.k}, ToDnnl(key.ab_dtype),
                          key.trans_a ? dims{1, key.lda} : dims{key.lda, 1});
  dnnl::memory::desc b_md(dims{key.k, key.n}, ToDnnl(key.ab_dtype),
                          key.trans_b ? dims{1, key.ldb} : dims{key.ldb, 1});
  dnnl::memory::desc c_md(dims{key.m, key.n}, ToDnnl(key.c_dtype), dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(a_md, b_md, c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
  CachedMatmul entry{dnnl::matmul(pd), pd.scratchpad_desc()};
  std::lock_guard<std::mutex> lock(mu);
  if (cache->size() >= kMaxEntries) cache->clear();
  cache->emplace(key, entry);
  return entry;
}

absl::Status RunMatmul(const MatmulKey& key, const void* a, const void* b, void* c) {
  try {
    CachedMatmul mm = GetMatmul(key);
    using dims = dnnl::memory::dims;
    dnnl::memory::desc a_md(dims{key.m, key.k}, ToDnnl(key.ab_dtype),
                            key.trans_a ? dims{1, key.lda} : dims{key.lda, 1});
    dnnl::memory::desc b_md(dims{key.k, key.n}, ToDnnl(key.ab_dtype),
                            key.trans_b ? dims{1, key.ldb} : dims{key.ldb, 1});
    dnnl::memory::desc c_md(dims{key.m, key.n}, ToDnnl(key.c_dtype), dims{key.ldc, 1});
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(a_md, CpuEngine(), const_cast<void*>(a))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, CpuEngine(), const_cast<void*>(b))},
        {DNNL_ARG_DST, dnnl::memory(c_md, CpuEngine(), c)}};
    const size_t scratch_bytes = mm.scratchpad.get_size();
    // Uninitialised (the library writes before reading), from the caching
    // allocator so repeated GEMMs reuse mapped pages.
    CpuAllocator& alloc = GetCpuAllocator();
    std::unique_ptr<void, std::function<void(void*)>> scratchpad(
        nullptr, [&alloc, scratch_bytes](void* p) { alloc.Deallocate(p, scratch_bytes); });
    if (scratch_bytes > 0) {
      scratchpad.reset(alloc.Allocate(scratch_bytes));
      if (scratchpad == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "Gemm: no memory for a ", scratch_bytes, "-byte oneDNN scratchpad"));
      }
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(mm.scratchpad, CpuEngine(), scratchpad.get()));
    }
    thread_local dnnl::stream stream(CpuEngine());
    mm.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("Gemm: oneDNN failed (", e.what(), ") for m=", key.m,
                                            " n=", key.n, " k=", key.k));
  }
  return absl::OkStatus();
}

std::vector<float> WidenF16(const void* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = F16ToFloat(s[r * ld + c]);
  }
  return out;
}

}  // namespace

absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                  float beta, DType c_dtype, void* c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: negative size m=", m, " n=", n, " k=", k));
  }
  if (ab_dtype != DType::kF32 && ab_dtype != DType::kBF16 && ab_dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: inputs must be f32, bf16 or f16, got ", std::string(DTypeName(ab_dtype))));
  }
  if (c_dtype != DType::kF32 && c_dtype != ab_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: output dtype ", std::string(DTypeName(c_dtype)), " must be f32 or match inputs (",
        std::string(DTypeName(ab_dtype)), ")"));
  }
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) ||
      ldc < std::max<int64_t>(1, n)) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: leading dims lda=", lda, " ldb=", ldb,
                                                   " ldc=", ldc, " too small for m=", m,
                                                   " n=", n, " k=", k));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  ApplyThreads();
  if (ab_dtype == DType::kF16) {
    // No f16 GEMM on this CPU in oneDNN: widen to f32 and use the f32 path.
    std::vector<float> a32 = WidenF16(a, trans_a ? k : m, a_cols, lda);
    std::vector<float> b32 = WidenF16(b, trans_b ? n : k, b_cols, ldb);
    if (c_dtype == DType::kF32) {
      return Gemm(trans_a, trans_b, m, n, k, alpha, DType::kF32, a32.data(),
                  std::max<int64_t>(1, a_cols), b32.data(), std::max<int64_t>(1, b_cols), beta,
                  DType::kF32, c, ldc);
    }
    std::vector<float> c32(static_cast<size_t>(m * n), 0.0f);
    uint16_t* c16 = static_cast<uint16_t*>(c);
    if (beta != 0.0f) c32 = WidenF16(c, m, n, ldc);
    TPX_RETURN_IF_ERROR(Gemm(trans_a, trans_b, m, n, k, alpha, DType::kF32, a32.data(),
                             std::max<int64_t>(1, a_cols), b32.data(),
                             std::max<int64_t>(1, b_cols), beta, DType::kF32, c32.data(), n));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) c16[r * ldc + j] = FloatToF16(c32[r * n + j]);
    }
    return absl::OkStatus();
  }
  if (k == 0) {
    // C = beta * C (oneDNN rejects empty reductions).
    if (c_dtype == DType::kF32) {
      float* cf = static_cast<float*>(c);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) cf[r * ldc + j] = beta == 0.0f ? 0.0f : beta * cf[r * ldc + j];
      }
    } else {
      uint16_t* cb = static_cast<uint16_t*>(c);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          cb[r * ldc + j] =
              beta == 0.0f ? 0 : FloatToBF16(beta * BF16ToFloat(cb[r * ldc + j]));
        }
      }
    }
    return absl::OkStatus();
  }
  MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dtype, c_dtype, alpha, beta};
  return RunMatmul(key, a, b, c);
}

void SetGemmThreads(int threads) {
  ThreadSetting().store(threads < 1 ? 1 : threads, std::memory_order_relaxed);
}

int GemmThreads() { return ThreadSetting().load(std::memory_order_relaxed); }

std::string_view GemmBackendName() { return "onednn"; }

}  // namespace tpx
