#include "core/gemm.h"

#include <omp.h>

#include <algorithm>
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
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/bf16_gemm.h"
#include "core/few_rows_gemm.h"
#include "core/small_gemm.h"
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
// A oneDNN primitive splits its work for the team it was made for and
// leaves the share of a thread the team came without unwritten, so teams
// must be as large as asked: no dynamic team sizes (OMP_DYNAMIC lets
// OpenMP shrink teams on a loaded host) and no more threads than
// OMP_THREAD_LIMIT allows (GemmThreads() is capped by it).
// The thread's own setting is compared, not a copy of what was last
// applied: a setting made inside a parallel region ends with the region, and
// a GEMM called from one left such a copy saying the calling thread was set
// when it was not (its later GEMMs ran on one thread).
void ApplyThreads() {
  omp_set_dynamic(0);  // on every call: the caller may have turned it on since
  const int want = GemmThreads();
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
}

// The threads a call made now runs its product on: ApplyThreads' setting
// (or SmallProductOnOneThread's), and 1 inside a parallel region, where a
// nested team has one thread.
int CallThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

std::atomic<int64_t>& MinTeamMacsSetting() {
  static std::atomic<int64_t> macs{int64_t{1} << 20};
  return macs;
}

// For one call: where its product (all of a batch together) has fewer
// multiply-adds than GemmMinTeamMacs(), the calling thread's OpenMP team
// size is one, so that every path below (oneDNN's primitive, the row and
// batch ranges, the bf16 kernel) runs it on this thread; ApplyThreads'
// setting is back after. Starting and joining a team of two took 2.3 us
// at best (3.0-3.4 on average) on a 2-core Zen 5 VM, a bare `omp parallel`,
// more than halving such a product saves: in bf16 with A transposed,
// 64 x 128 x 64 took 2.7-3.1 us on one thread and 4.7-5.3 on two,
// 128 x 128 x 64 as long on either, 128 x 128 x 128 9.8-11.4 and 8.8-9.9.
class SmallProductOnOneThread {
 public:
  explicit SmallProductOnOneThread(double macs)
      : before_(omp_get_max_threads()),
        active_(before_ > 1 && !omp_in_parallel() &&
                macs < static_cast<double>(GemmMinTeamMacs())) {
    if (active_) omp_set_num_threads(1);
  }
  ~SmallProductOnOneThread() {
    if (active_) omp_set_num_threads(before_);
  }
  SmallProductOnOneThread(const SmallProductOnOneThread&) = delete;
  SmallProductOnOneThread& operator=(const SmallProductOnOneThread&) = delete;

 private:
  const int before_;
  const bool active_;
};

// A product's multiply-adds, in double (no overflow).
double Macs(int64_t batch, int64_t m, int64_t n, int64_t k) {
  return static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
         static_cast<double>(k);
}

dnnl::memory::data_type ToDnnl(DType dtype) {
  return dtype == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Everything that determines a matmul primitive. batch == 1: 2-D
// descriptors (strides unused); batch > 1: 3-D with the given batch strides.
struct MatmulKey {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  DType ab_dtype, c_dtype;
  float alpha, beta;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  bool bias = false;  // a [n] bias in c_dtype added to every row (2-D only)
  // oneDNN splits the work for the OpenMP thread count at primitive
  // creation: a primitive made for 1 thread runs on 1 thread forever.
  int threads = 1;
  auto Tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dtype, c_dtype, alpha, beta,
                    batch, stride_a, stride_b, stride_c, bias, threads);
  }
  bool operator<(const MatmulKey& o) const { return Tie() < o.Tie(); }
};

struct MatmulDescs {
  dnnl::memory::desc a, b, c, bias;
};

// Row-major op(A) [m, k]: A is stored [m, k] (strides {lda, 1}) or [k, m]
// (strides {1, lda}); likewise B and C, with a leading batch dim if batched.
MatmulDescs DescsOf(const MatmulKey& key) {
  using dims = dnnl::memory::dims;
  auto desc = [&](int64_t rows, int64_t cols, bool trans, int64_t ld, int64_t batch_stride,
                  DType dtype) {
    dims shape{rows, cols};
    dims strides = trans ? dims{1, ld} : dims{ld, 1};
    if (key.batch > 1) {
      shape.insert(shape.begin(), key.batch);
      strides.insert(strides.begin(), batch_stride);
    }
    return dnnl::memory::desc(shape, ToDnnl(dtype), strides);
  };
  MatmulDescs md{desc(key.m, key.k, key.trans_a, key.lda, key.stride_a, key.ab_dtype),
                 desc(key.k, key.n, key.trans_b, key.ldb, key.stride_b, key.ab_dtype),
                 desc(key.m, key.n, false, key.ldc, key.stride_c, key.c_dtype),
                 {}};
  if (key.bias) md.bias = dnnl::memory::desc(dims{1, key.n}, ToDnnl(key.c_dtype), dims{key.n, 1});
  return md;
}

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
  const MatmulDescs md = DescsOf(key);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc = key.bias ? dnnl::matmul::desc(md.a, md.b, md.bias, md.c)
                                     : dnnl::matmul::desc(md.a, md.b, md.c);
  dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
  CachedMatmul entry{dnnl::matmul(pd), pd.scratchpad_desc()};
  std::lock_guard<std::mutex> lock(mu);
  if (cache->size() >= kMaxEntries) cache->clear();
  cache->emplace(key, entry);
  return entry;
}

// A cached primitive with memory objects of its own, for one thread: each
// call points them at its operands (set_data_handle) instead of making
// them, their descriptors and the argument map anew, which cost a small
// product about 2 us a call, most of it in malloc and free.
struct BoundMatmul {
  dnnl::matmul primitive;
  size_t scratch_bytes = 0;
  dnnl::memory a, b, c, bias, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
};

// This thread's BoundMatmul for the key (bounded as GetMatmul's cache is).
BoundMatmul& BoundMatmulFor(const MatmulKey& key) {
  constexpr size_t kMaxEntries = 512;
  thread_local std::map<MatmulKey, BoundMatmul> bound;
  auto it = bound.find(key);
  if (it != bound.end()) return it->second;
  const CachedMatmul mm = GetMatmul(key);
  const MatmulDescs md = DescsOf(key);
  if (bound.size() >= kMaxEntries) bound.clear();
  BoundMatmul& entry = bound[key];
  entry.primitive = mm.primitive;
  entry.a = dnnl::memory(md.a, CpuEngine(), DNNL_MEMORY_NONE);
  entry.b = dnnl::memory(md.b, CpuEngine(), DNNL_MEMORY_NONE);
  entry.c = dnnl::memory(md.c, CpuEngine(), DNNL_MEMORY_NONE);
  entry.args = {{DNNL_ARG_SRC, entry.a}, {DNNL_ARG_WEIGHTS, entry.b}, {DNNL_ARG_DST, entry.c}};
  if (key.bias) {
    entry.bias = dnnl::memory(md.bias, CpuEngine(), DNNL_MEMORY_NONE);
    entry.args.emplace(DNNL_ARG_BIAS, entry.bias);
  }
  entry.scratch_bytes = mm.scratchpad.get_size();
  if (entry.scratch_bytes > 0) {
    entry.scratchpad = dnnl::memory(mm.scratchpad, CpuEngine(), DNNL_MEMORY_NONE);
    entry.args.emplace(DNNL_ARG_SCRATCHPAD, entry.scratchpad);
  }
  return entry;
}

absl::Status RunMatmul(MatmulKey key, const void* a, const void* b, void* c,
                       const void* bias = nullptr) {
  key.threads = CallThreads();
  try {
    BoundMatmul& mm = BoundMatmulFor(key);
    mm.a.set_data_handle(const_cast<void*>(a));
    mm.b.set_data_handle(const_cast<void*>(b));
    mm.c.set_data_handle(c);
    if (key.bias) mm.bias.set_data_handle(const_cast<void*>(bias));
    // Uninitialised (the library writes before reading), from the caching
    // allocator so repeated GEMMs reuse mapped pages.
    CpuAllocator& alloc = GetCpuAllocator();
    const size_t scratch_bytes = mm.scratch_bytes;
    std::unique_ptr<void, std::function<void(void*)>> scratchpad(
        nullptr, [&alloc, scratch_bytes](void* p) { alloc.Deallocate(p, scratch_bytes); });
    if (scratch_bytes > 0) {
      scratchpad.reset(alloc.Allocate(scratch_bytes));
      if (scratchpad == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "Gemm: no memory for a ", scratch_bytes, "-byte oneDNN scratchpad"));
      }
      mm.scratchpad.set_data_handle(scratchpad.get());
    }
    thread_local dnnl::stream stream(CpuEngine());
    mm.primitive.execute(stream, mm.args);
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

// C = op(A) op(B) all in f32 (alpha 1, beta 0): what tpx's own f32 kernels
// compute.
bool PlainF32(float alpha, DType ab_dtype, float beta, DType c_dtype) {
  return ab_dtype == DType::kF32 && c_dtype == DType::kF32 && alpha == 1.0f && beta == 0.0f;
}

// Products of one to four rows (alpha 1, beta 0) go to
// core/few_rows_gemm.h's kernels where the CPU has them, AMX CPUs included:
// there oneDNN's AMX matmul (16-row tiles) ran bf16 products of 3-4 rows with
// k 128 at 0.9-1.5x the kernels' speed, but one row at 0.3-0.5x, two at
// 0.6-0.8x, and d_model 512's products of 2-4 rows at 0.4-0.9x on two threads
// (bench:gemm --cases=decode).
bool UseFewRows(bool trans_a, bool trans_b, int64_t m, float alpha, DType ab_dtype, float beta,
                DType c_dtype) {
  return alpha == 1.0f && beta == 0.0f &&
         FewRowsGemmApplies(ab_dtype, c_dtype, trans_a, trans_b, m);
}

// f32 products with a narrow C go to core/small_gemm.h's kernel, where
// oneDNN's f32 kernels are at about half the FMA peak.
bool UseSmallGemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, DType ab_dtype,
                  float beta, DType c_dtype) {
  return PlainF32(alpha, ab_dtype, beta, c_dtype) && SmallGemmF32Applies(trans_b, m, n, k);
}

// Which implementation runs one product (after the narrow-output kernel).
// oneDNN's matmul primitive is the default. Its classic GEMM driver
// (dnnl_sgemm) takes f32 products whose A is stored transposed and B is not
// (weight gradients dW = X^T dY: a long reduction over tokens into a small
// C, where the primitive copies such an A into its own layout at a fraction
// of its kernel's speed), and every f32 product of at least 2^30
// multiply-adds: on a Zen 5 core the driver runs those at 0.93-0.96 of the
// FMA peak against 0.82-0.91 for the primitive (0.90 against 0.80-0.86 on
// two threads; smaller products, the GPT example's among them, are even on
// one thread and favour the primitive on two). core/bf16_gemm.h takes bf16
// products with at most one operand transposed on AVX-512 BF16 CPUs, as
// measured below. Its kernel built for f32 words (vfmadd in place of
// vdpbf16ps) lost to these paths on a Zen 5 core: 0.93-0.96x on the squares,
// 0.88-0.99x on the MLP's, 0.57-0.82x on the GPT example's weight gradients
// (an f32 word carries half the flops of a bf16 pair, so its packing costs
// twice as much per flop); and with its 2048-long sums, less accurate.
enum class ProductPath { kMatmul, kSgemm, kBf16Kernel };

// Whether oneDNN runs bf16 products on AMX tiles (it reads the CPU, and any
// ONEDNN_MAX_CPU_ISA cap, once). There every bf16 product goes to oneDNN:
// on an Emerald Rapids core vdpbf16ps, the bf16 kernel's instruction, runs
// at half the f32 FMA rate (87 against 179 GFLOP/s), and oneDNN's AMX
// matmul took the GPT example's and the MLP's bf16 products 3.4-12x faster
// than the kernel at one thread (bench:gemm, ONEDNN_MAX_CPU_ISA unset
// against AVX512_CORE_BF16).
bool OneDnnRunsBf16OnAmx() {
  static const bool amx = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto amx_isa = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & amx_isa) == amx_isa;
  }();
  return amx;
}

// beta: C's factor on the path taken; threads: the team the product runs on
// (CallThreads()).
ProductPath ProductPathFor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           DType ab_dtype, DType c_dtype, float beta, int threads) {
  if (ab_dtype == DType::kF32 && c_dtype == DType::kF32) {
    constexpr int64_t kMinSgemmMacs = int64_t{1} << 30;
    const bool transposed_a = trans_a && !trans_b;
    return transposed_a || m * n * k >= kMinSgemmMacs ? ProductPath::kSgemm
                                                      : ProductPath::kMatmul;
  }
  if (ab_dtype != DType::kBF16 || !Bf16GemmApplies() || (trans_a && trans_b) ||
      OneDnnRunsBf16OnAmx()) {
    return ProductPath::kMatmul;
  }
  // With A transposed the bf16 kernel wins (measured) at every size: at two
  // threads by 1.1-1.3x (the GPT example's weight gradients, attention's
  // dV, bf16 C of 2048-4096 x 1024 with k 2048), at one even with oneDNN
  // for those large ones and ahead on the example's step. With A plain it
  // wins from k = 512, B plain (2048 x 512 x 128 to 2048 x 2048 x 2048:
  // 1.01-1.13x on one thread, 1.04-1.12x on two) or transposed (forward
  // products, the MLP's of bench:tp_mlp: 1.01-1.13x and 1.02-1.18x); below,
  // it gains nothing over oneDNN's blocking on one thread (2048 rows with
  // k = 64-256: B plain 1.00-1.01x, transposed 0.97-1.00x; attention's
  // scores, k = 32, 0.87x). On two threads it also wins below k = 512 with
  // B plain and C at most 128 wide (input gradients of layers with 128
  // outputs, attention's P V): medians of 6 alternating bench:gemm runs
  // 1.01-1.09x (2048 rows with k 64-384, 64 products of 128 x 128 x 32),
  // where a wider C (256, 512 with k 128) was 0.97-0.99x and one thread
  // 0.95-0.99x. With beta 0 the kernel and oneDNN give these products the
  // same bits (one f32 sum per value over the k-pairs in order, then alpha),
  // so results do not depend on the thread count; oneDNN adds beta * C to a
  // padded or batched f32 C with other roundings, so those stay with it.
  constexpr int64_t kMinPlainAK = 512;
  constexpr int64_t kMaxNarrowN = 128;
  if ((trans_a && !trans_b) || k >= kMinPlainAK) return ProductPath::kBf16Kernel;
  if (!trans_a && !trans_b && n <= kMaxNarrowN && beta == 0.0f && threads > 1) {
    return ProductPath::kBf16Kernel;
  }
  return ProductPath::kMatmul;
}

// Whether a batch of products for oneDNN's matmul goes to the threads as
// whole products (a one-thread primitive each on its own range) rather
// than as one primitive for all. oneDNN splits each product of attention's
// sizes (128 x 128 x 32) across the threads, which then wait on each
// other: whole products measured 1.07-1.11x faster on two threads in bf16
// and 1.03x in f32. Only where the ranges are even, or long enough that
// one product more is little.
bool SplitsBatch(int64_t batch, int threads) {
  return threads > 1 && batch >= threads && (batch % threads == 0 || batch >= 4 * threads);
}

// Whether one product for oneDNN's matmul goes to the threads as ranges of
// C's rows (a one-thread primitive each) rather than as one primitive on
// all of them. On two threads of the benchmark host oneDNN's own split of
// the GPT example's products often ran at 0.77-0.84 of the FMA peak in f32
// and 0.85-0.90 in bf16 where the row ranges ran at 0.93-0.97 and
// 0.98-1.01 (bench:gemm, 12 alternating rounds: slower in 10 of them, even
// in the others); its example at TP=1 on two threads went from 50-59k to
// 52-62k tokens/s in f32. From 2^28 multiply-adds on (bench:gemm's mlp and
// square cases in bf16) oneDNN's split was as fast or up to 6% faster when
// it was not slow, and keeps those. At least 64 rows a thread.
bool SplitsRows(int64_t m, int64_t n, int64_t k, int threads) {
  constexpr int64_t kMaxRowSplitMacs = int64_t{1} << 28;
  return threads > 1 && m >= 64 * threads && m * n * k < kMaxRowSplitMacs;
}

// One thread's share of a product or batch: its key and operands.
struct MatmulPart {
  MatmulKey key;
  const void* a;
  const void* b;
  void* c;
  const void* bias = nullptr;
};

// Whether an f32 product for oneDNN's GEMM driver goes to the threads as
// ranges of the longer side of C (a one-thread call each) rather than as
// one call on all of them. On two threads of the benchmark host the
// driver's own split of the GPT example's weight gradients ran at 0.73-0.90
// of the FMA peak where the ranges ran at 0.90-0.97 (bench:gemm, three
// alternating rounds: the logits' 256 x 128 from 0.77-0.81 to 0.93-0.96,
// TP=2's fc1 256 x 128 from 0.73-0.81 to 0.94-0.96, qkv's 192 x 128 from
// 0.83-0.85 to 0.92-0.95). Ranges narrower than 96 (the attention
// projection's 128 x 128 in two halves: 0.93 -> 0.85) and products from
// 2^28 multiply-adds on (the MLP's) measured slower, and keep the driver's.
bool SplitsSgemm(int64_t m, int64_t n, int64_t k, int threads) {
  constexpr int64_t kMaxSplitMacs = int64_t{1} << 28;
  constexpr int64_t kMinRange = 96;
  return threads > 1 && std::max(m, n) / threads >= kMinRange && std::min(m, n) >= kMinRange &&
         m * n * k < kMaxSplitMacs;
}

// Runs fn(t, nt), an absl::Status, for t in [0, nt) side by side, each on
// its own thread set to one OpenMP thread (this implicit task's setting
// only: the caller's is unchanged after), so the library call it makes runs
// on that thread alone. Returns the first error.
template <typename Fn>
absl::Status OnEachThread(int threads, Fn fn) {
  std::vector<absl::Status> status(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    omp_set_num_threads(1);
    status[t] = fn(t, nt);
  }
  for (const absl::Status& s : status) TPX_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// Thread t's part [first, last) of [0, length) when nt threads share it in
// whole 16-wide blocks (the kernels' register blocks).
std::pair<int64_t, int64_t> BlockRange(int64_t length, int t, int nt) {
  const int64_t blocks = (length + 15) / 16;
  return {std::min(length, blocks * t / nt * 16), std::min(length, blocks * (t + 1) / nt * 16)};
}

// Where the part of a product that computes C's rows (or, with `columns`,
// its columns) from x0 on starts in each operand, in elements: a range of
// rows reads its rows of op(A) and writes its rows of C; a range of columns
// reads its columns of op(B) and writes its columns of C and of a bias row.
struct PartOffsets {
  int64_t a = 0, b = 0, c = 0, bias = 0;
};
PartOffsets OffsetsOfPart(bool columns, int64_t x0, bool trans_a, bool trans_b, int64_t lda,
                          int64_t ldb, int64_t ldc) {
  if (columns) return {.b = trans_b ? x0 * ldb : x0, .c = x0, .bias = x0};
  return {.a = trans_a ? x0 : x0 * lda, .c = x0 * ldc};
}

// The part of a product (or of a thread's part) that computes C's rows
// (or, with `columns`, its columns) [x0, x1).
MatmulPart SubPart(const MatmulPart& p, bool columns, int64_t x0, int64_t x1) {
  const size_t ab_size = SizeOf(p.key.ab_dtype), c_size = SizeOf(p.key.c_dtype);
  const PartOffsets o =
      OffsetsOfPart(columns, x0, p.key.trans_a, p.key.trans_b, p.key.lda, p.key.ldb, p.key.ldc);
  MatmulPart sub{p.key, static_cast<const char*>(p.a) + o.a * ab_size,
                 static_cast<const char*>(p.b) + o.b * ab_size,
                 static_cast<char*>(p.c) + o.c * c_size,
                 p.bias != nullptr ? static_cast<const char*>(p.bias) + o.bias * c_size : nullptr};
  (columns ? sub.key.n : sub.key.m) = x1 - x0;
  return sub;
}

// The widest C a bf16 product on AMX runs as one primitive call: wider ones
// run as ranges of about this many columns, one call after another on the
// same thread, so that B's columns for a range stay in the core's L2.
// oneDNN 2.6.3's AMX matmul on the whole of bench:gemm's square and MLP
// products (C 1024-4096 wide) was slower on an Emerald Rapids core: the
// ranges took them 1.08-1.47x faster on one thread, and 0.94-1.41x on two
// (7 of 9 faster; medians of 6 alternations in one process). Ranges of 256
// were slower than of 512. Each value is still one sum over k in order.
constexpr int64_t kAmxMaxColumns = 512;

// Whether oneDNN runs the key's product on AMX tiles.
bool RunsOnAmx(const MatmulKey& key) {
  return key.ab_dtype == DType::kBF16 && OneDnnRunsBf16OnAmx();
}

// Runs a product, or one thread's part of it, through oneDNN's matmul: as
// column ranges where it is a wide bf16 product on AMX.
absl::Status RunMatmulPart(const MatmulPart& p) {
  if (p.key.batch > 1 || p.key.n <= kAmxMaxColumns || !RunsOnAmx(p.key)) {
    return RunMatmul(p.key, p.a, p.b, p.c, p.bias);
  }
  const int ranges = static_cast<int>((p.key.n + kAmxMaxColumns - 1) / kAmxMaxColumns);
  for (int r = 0; r < ranges; ++r) {
    const auto [x0, x1] = BlockRange(p.key.n, r, ranges);
    const MatmulPart sub = SubPart(p, /*columns=*/true, x0, x1);
    TPX_RETURN_IF_ERROR(RunMatmul(sub.key, sub.a, sub.b, sub.c, sub.bias));
  }
  return absl::OkStatus();
}

// Runs part(t, nt) for t in [0, nt) side by side, each a one-thread
// primitive on its own thread; a part with no rows or products is skipped.
template <typename PartFn>
absl::Status RunMatmulParts(int threads, PartFn part) {
  return OnEachThread(threads, [&](int t, int nt) {
    const MatmulPart p = part(t, nt);
    if (p.key.m == 0 || p.key.n == 0 || p.key.batch == 0) return absl::OkStatus();
    return RunMatmulPart(p);
  });
}

// Whether a product for oneDNN's matmul must give the same bits at any
// thread count: bf16 products where oneDNN runs them on AMX, which on a team
// of its own split a long reduction between the threads (a 20 x 17 product
// with k 2101 came out different on two threads). Their threads take ranges
// of C instead, one one-thread primitive each, and each value is one sum
// over k in order, as on one thread; the bf16 kernel's products, which
// these replace, had that property.
bool NeedsThreadInvariance(const MatmulKey& key) { return RunsOnAmx(key); }

// One 2-D product through oneDNN's matmul: as ranges of C's rows where
// SplitsRows or (NeedsThreadInvariance) C has rows for every thread, else
// as ranges of its columns, else on one thread; otherwise on oneDNN's team.
absl::Status RunMatmulProduct(const MatmulKey& key, const void* a, const void* b, void* c,
                              const void* bias = nullptr) {
  const MatmulPart whole{key, a, b, c, bias};
  const int threads = CallThreads();
  const bool invariant = threads > 1 && NeedsThreadInvariance(key);
  const bool rows =
      SplitsRows(key.m, key.n, key.k, threads) || (invariant && key.m >= 16 * threads);
  if (!rows && !invariant) return RunMatmulPart(whole);
  const int64_t length = rows ? key.m : key.n;
  const int parts = rows || length >= 16 * threads ? threads : 1;
  return RunMatmulParts(parts, [&](int t, int nt) {
    const auto [x0, x1] = BlockRange(length, t, nt);
    return SubPart(whole, /*columns=*/!rows, x0, x1);
  });
}

// Row-major f32 C = alpha * op(A) op(B) + beta * C through oneDNN's GEMM
// driver (as BLAS: with beta == 0, C is not read); GemmThreads() threads.
absl::Status Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    return absl::InternalError(absl::StrCat("Gemm: oneDNN sgemm failed (status ",
                                            static_cast<int>(status), ") for m=", m, " n=", n,
                                            " k=", k));
  }
  return absl::OkStatus();
}

// Sgemm on GemmThreads() threads, as ranges of C's rows or columns where
// SplitsSgemm (whole 16-wide ranges, one Sgemm each on one thread).
absl::Status SgemmProduct(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc) {
  const int threads = CallThreads();
  if (!SplitsSgemm(m, n, k, threads)) {
    return Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  const bool columns = n >= m;
  return OnEachThread(threads, [&](int t, int nt) {
    const auto [x0, x1] = BlockRange(columns ? n : m, t, nt);
    if (x1 == x0) return absl::OkStatus();
    const PartOffsets o = OffsetsOfPart(columns, x0, trans_a, trans_b, lda, ldb, ldc);
    return Sgemm(trans_a, trans_b, columns ? m : x1 - x0, columns ? x1 - x0 : n, k, alpha, a + o.a,
                 lda, b + o.b, ldb, beta, c + o.c, ldc);
  });
}

// Sizes, dtypes and leading dims of one product; `op` names the caller.
absl::Status CheckGemmArgs(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, DType ab_dtype, int64_t lda, int64_t ldb, DType c_dtype,
                           int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": negative size m=", m, " n=", n, " k=", k));
  }
  if (ab_dtype != DType::kF32 && ab_dtype != DType::kBF16 && ab_dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inputs must be f32, bf16 or f16, got ",
                                                   std::string(DTypeName(ab_dtype))));
  }
  if (c_dtype != DType::kF32 && c_dtype != ab_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": output dtype ", std::string(DTypeName(c_dtype)), " must be f32 or match inputs (",
        std::string(DTypeName(ab_dtype)), ")"));
  }
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) ||
      ldc < std::max<int64_t>(1, n)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": leading dims lda=", lda, " ldb=", ldb,
                                                   " ldc=", ldc, " too small for m=", m,
                                                   " n=", n, " k=", k));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                  float beta, DType c_dtype, void* c, int64_t ldc) {
  TPX_RETURN_IF_ERROR(CheckGemmArgs("Gemm", trans_a, trans_b, m, n, k, ab_dtype, lda, ldb,
                                    c_dtype, ldc));
  if (m == 0 || n == 0) return absl::OkStatus();
  ApplyThreads();
  const SmallProductOnOneThread small(Macs(1, m, n, k));
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
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
  if (UseFewRows(trans_a, trans_b, m, alpha, ab_dtype, beta, c_dtype)) {
    FewRowsGemm(ab_dtype, c_dtype, trans_b, 1, m, n, k, a, lda, 0, b, ldb, 0, c, ldc, 0);
    return absl::OkStatus();
  }
  if (UseSmallGemm(trans_b, m, n, k, alpha, ab_dtype, beta, c_dtype)) {
    SmallGemmF32(1, trans_a, m, n, k, static_cast<const float*>(a), lda, 0,
                 static_cast<const float*>(b), ldb, 0, static_cast<float*>(c), ldc, 0);
    return absl::OkStatus();
  }
  switch (ProductPathFor(trans_a, trans_b, m, n, k, ab_dtype, c_dtype, beta, CallThreads())) {
    case ProductPath::kSgemm:
      return SgemmProduct(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                          static_cast<const float*>(b), ldb, beta, static_cast<float*>(c), ldc);
    case ProductPath::kBf16Kernel:
      return Bf16Gemm(trans_a, trans_b, 1, m, n, k, alpha, static_cast<const uint16_t*>(a), lda, 0,
                      static_cast<const uint16_t*>(b), ldb, 0, beta, c_dtype, c, ldc, 0);
    case ProductPath::kMatmul:
      break;
  }
  MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dtype, c_dtype, alpha, beta};
  return RunMatmulProduct(key, a, b, c);
}

absl::Status GemmBias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                      const void* bias, void* c, int64_t ldc) {
  TPX_RETURN_IF_ERROR(CheckGemmArgs("GemmBias", trans_a, trans_b, m, n, k, ab_dtype, lda, ldb,
                                    ab_dtype, ldc));
  if (m == 0 || n == 0) return absl::OkStatus();
  // Every row of C set to the bias, for products that then add onto C.
  auto seed_rows_with_bias = [&] {
    const size_t row_bytes = static_cast<size_t>(n) * SizeOf(ab_dtype);
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(static_cast<char*>(c) + r * ldc * SizeOf(ab_dtype), bias, row_bytes);
    }
  };
  if (ab_dtype == DType::kF16 || k == 0) {
    // Gemm's special paths: seed every row with the bias, accumulate onto it.
    seed_rows_with_bias();
    return Gemm(trans_a, trans_b, m, n, k, 1.0f, ab_dtype, a, lda, b, ldb, 1.0f, ab_dtype, c,
                ldc);
  }
  ApplyThreads();
  const SmallProductOnOneThread small(Macs(1, m, n, k));
  if (FewRowsGemmApplies(ab_dtype, ab_dtype, trans_a, trans_b, m)) {
    FewRowsGemm(ab_dtype, ab_dtype, trans_b, 1, m, n, k, a, lda, 0, b, ldb, 0, c, ldc, 0, bias);
    return absl::OkStatus();
  }
  if (ProductPathFor(trans_a, trans_b, m, n, k, ab_dtype, ab_dtype, /*beta=*/1.0f, CallThreads()) ==
      ProductPath::kBf16Kernel) {
    // C starts as the bias and the kernel adds the product to it (beta 1):
    // one rounding to bf16, as the fused bias has.
    seed_rows_with_bias();
    return Bf16Gemm(trans_a, trans_b, 1, m, n, k, 1.0f, static_cast<const uint16_t*>(a), lda, 0,
                    static_cast<const uint16_t*>(b), ldb, 0, 1.0f, ab_dtype, c, ldc, 0);
  }
  MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dtype, ab_dtype, 1.0f, 0.0f};
  key.bias = true;
  return RunMatmulProduct(key, a, b, c, bias);
}

absl::Status GemmBatched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, DType ab_dtype, const void* a, int64_t lda,
                         int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                         float beta, DType c_dtype, void* c, int64_t ldc, int64_t stride_c) {
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) {
    return absl::InvalidArgumentError(absl::StrCat("GemmBatched: negative batch ", batch,
                                                   " or strides a=", stride_a, " b=", stride_b,
                                                   " c=", stride_c));
  }
  if (batch > 1 && m > 0 && n > 0 && stride_c < (m - 1) * ldc + n) {
    return absl::InvalidArgumentError(absl::StrCat("GemmBatched: C stride ", stride_c,
                                                   " overlaps products of ", m, "x", n,
                                                   " with ldc=", ldc));
  }
  TPX_RETURN_IF_ERROR(CheckGemmArgs("GemmBatched", trans_a, trans_b, m, n, k, ab_dtype, lda,
                                    ldb, c_dtype, ldc));
  if (batch == 0 || m == 0 || n == 0) return absl::OkStatus();
  // Cases Gemm handles specially (f16 widening, empty reductions) and
  // broadcast operands go product by product.
  if (batch == 1 || k == 0 || ab_dtype == DType::kF16 || stride_a == 0 || stride_b == 0) {
    const size_t ab_size = SizeOf(ab_dtype), c_size = SizeOf(c_dtype);
    for (int64_t i = 0; i < batch; ++i) {
      TPX_RETURN_IF_ERROR(Gemm(trans_a, trans_b, m, n, k, alpha, ab_dtype,
                               static_cast<const char*>(a) + i * stride_a * ab_size, lda,
                               static_cast<const char*>(b) + i * stride_b * ab_size, ldb, beta,
                               c_dtype, static_cast<char*>(c) + i * stride_c * c_size, ldc));
    }
    return absl::OkStatus();
  }
  ApplyThreads();
  const SmallProductOnOneThread small(Macs(batch, m, n, k));
  if (UseFewRows(trans_a, trans_b, m, alpha, ab_dtype, beta, c_dtype)) {
    FewRowsGemm(ab_dtype, c_dtype, trans_b, batch, m, n, k, a, lda, stride_a, b, ldb, stride_b, c,
                ldc, stride_c);
    return absl::OkStatus();
  }
  if (UseSmallGemm(trans_b, m, n, k, alpha, ab_dtype, beta, c_dtype)) {
    SmallGemmF32(batch, trans_a, m, n, k, static_cast<const float*>(a), lda, stride_a,
                 static_cast<const float*>(b), ldb, stride_b, static_cast<float*>(c), ldc,
                 stride_c);
    return absl::OkStatus();
  }
  // Batches of f32 products stay on the primitive (one call for all).
  if (ProductPathFor(trans_a, trans_b, m, n, k, ab_dtype, c_dtype, beta, CallThreads()) ==
      ProductPath::kBf16Kernel) {
    return Bf16Gemm(trans_a, trans_b, batch, m, n, k, alpha, static_cast<const uint16_t*>(a), lda,
                    stride_a, static_cast<const uint16_t*>(b), ldb, stride_b, beta, c_dtype, c, ldc,
                    stride_c);
  }
  MatmulKey key{trans_a, trans_b, m,     n,    k,     lda,      ldb,      ldc,
                ab_dtype, c_dtype, alpha, beta, batch, stride_a, stride_b, stride_c};
  const int threads = CallThreads();
  const bool invariant = threads > 1 && NeedsThreadInvariance(key);
  const size_t ab_size = SizeOf(ab_dtype), c_size = SizeOf(c_dtype);
  if (invariant && batch < threads) {
    // Too few products for every thread: each splits its C as Gemm does.
    for (int64_t i = 0; i < batch; ++i) {
      MatmulKey one = key;
      one.batch = 1;
      one.stride_a = one.stride_b = one.stride_c = 0;
      TPX_RETURN_IF_ERROR(RunMatmulProduct(one,
                                           static_cast<const char*>(a) + i * stride_a * ab_size,
                                           static_cast<const char*>(b) + i * stride_b * ab_size,
                                           static_cast<char*>(c) + i * stride_c * c_size));
    }
    return absl::OkStatus();
  }
  if (!SplitsBatch(batch, threads) && !invariant) return RunMatmul(key, a, b, c);
  // Each thread runs a one-thread primitive over its own range of products.
  return RunMatmulParts(threads, [&](int t, int nt) {
    const int64_t first = batch * t / nt, last = batch * (t + 1) / nt;
    MatmulPart p{key, static_cast<const char*>(a) + first * stride_a * ab_size,
                 static_cast<const char*>(b) + first * stride_b * ab_size,
                 static_cast<char*>(c) + first * stride_c * c_size};
    p.key.batch = last - first;
    return p;
  });
}

void SetGemmThreads(int threads) {
  ThreadSetting().store(threads < 1 ? 1 : threads, std::memory_order_relaxed);
}

void SetGemmMinTeamMacs(int64_t macs) {
  MinTeamMacsSetting().store(std::max<int64_t>(0, macs), std::memory_order_relaxed);
}

int64_t GemmMinTeamMacs() { return MinTeamMacsSetting().load(std::memory_order_relaxed); }

int GemmThreads() {
  return std::min(ThreadSetting().load(std::memory_order_relaxed), omp_get_thread_limit());
}

std::string_view GemmBackendName() { return "onednn"; }

}  // namespace tpx
