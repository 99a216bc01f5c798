// GEMM throughput of tpx::ops::Matmul versus a direct OpenBLAS cblas_sgemm.
//
//   bazel run -c opt //bench:gemm
//
// For each shape MxKxN, thread count and tpx dtype (f32, bf16) prints
//   {"shape":"2048x1024x4096","threads":1,"dtype":"f32","tpx_gflops":..,
//    "openblas_gflops":..,"ratio":..}
// bf16 lines add "vs_tpx_f32" (bf16 over tpx's own f32 throughput). Both
// sides compute C[M,N] = A[M,K] B[K,N]; the OpenBLAS baseline is always f32.
// Each figure is the median of several timed repetitions after one warm-up.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/gemm.h"
#include "core/ops.h"

namespace tpx {
namespace {

constexpr int kRepetitions = 5;

template <typename F>
double MedianSeconds(F&& run) {
  run();  // warm-up: primitive creation, page faults
  std::vector<double> times;
  for (int r = 0; r < kRepetitions; ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor Filled(int64_t rows, int64_t cols, DType dtype, float scale) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 7919) % 97) / 97.0f;
  return *Tensor::FromVector<float>(v, {rows, cols}, dtype);
}

int Main() {
  struct ShapeMKN {
    int64_t m, k, n;
  };
  const std::vector<ShapeMKN> shapes = {
      {1024, 1024, 1024}, {2048, 2048, 2048}, {2048, 1024, 4096}, {2048, 4096, 1024}};
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(stderr, "gemm backend: %s; OPENBLAS_CORETYPE=%s\n",
               std::string(GemmBackendName()).c_str(), coretype ? coretype : "(unset)");
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    openblas_set_num_threads(threads);
    for (const ShapeMKN& s : shapes) {
      const double flops = 2.0 * s.m * s.n * s.k;
      Tensor a = Filled(s.m, s.k, DType::kF32, 1.0f);
      Tensor b = Filled(s.k, s.n, DType::kF32, 0.5f);
      std::vector<float> c(static_cast<size_t>(s.m * s.n));
      const double blas = MedianSeconds([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f,
                    a.data<float>(), s.k, b.data<float>(), s.n, 0.0f, c.data(), s.n);
      });
      const double blas_gflops = flops / blas / 1e9;
      double tpx_f32_gflops = 0.0;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Tensor ta = *a.To(dtype);
        Tensor tb = *b.To(dtype);
        const double tpx = MedianSeconds([&] {
          absl::StatusOr<Tensor> out = ops::Matmul(ta, tb);
          if (!out.ok()) {
            std::fprintf(stderr, "Matmul failed: %s\n", out.status().ToString().c_str());
            std::exit(1);
          }
        });
        const double tpx_gflops = flops / tpx / 1e9;
        std::string line = absl::StrFormat(
            "{\"shape\":\"%dx%dx%d\",\"threads\":%d,\"dtype\":\"%s\",\"tpx_gflops\":%.1f,"
            "\"openblas_gflops\":%.1f,\"ratio\":%.2f",
            s.m, s.k, s.n, threads, std::string(DTypeName(dtype)), tpx_gflops, blas_gflops,
            tpx_gflops / blas_gflops);
        if (dtype == DType::kF32) {
          tpx_f32_gflops = tpx_gflops;
        } else {
          // The bf16 goal is relative to tpx's own f32 path.
          line += absl::StrFormat(",\"vs_tpx_f32\":%.2f", tpx_gflops / tpx_f32_gflops);
        }
        std::printf("%s}\n", line.c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tpx

int main() { return tpx::Main(); }
