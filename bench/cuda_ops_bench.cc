// CUDA op throughput through tpx's dispatch (core/ops.h on cuda:0) beside the
// same work issued directly: cuBLAS for GEMMs (core/cuda/gemm.h, no tpx
// checks or allocation) and a device-to-device copy for memory-bound ops.
//
//   bazel run -c opt //bench:cuda_ops
//
// Prints one JSON line per case, e.g.
//   {"bench":"cuda_gemm","shape":"4096x4096x4096","dtype":"bf16","tpx_tflops":..,
//    "cublas_tflops":..,"ratio":..}
//   {"bench":"cuda_elementwise","op":"add","elements":67108864,"dtype":"f32",
//    "tpx_gbps":..,"memcpy_gbps":..,"ratio":..}
//   {"bench":"cuda_fused","op":"layer_norm_bwd","shape":"16384x1024","dtype":"bf16",
//    "tpx_gbps":..,"memcpy_gbps":..,"ratio":..}
// and, on a machine without a usable GPU, one line {"bench":"cuda_ops",
// "skipped":"<reason>"} (exit code 0). Each figure is the median of several
// repetitions after a warm-up; the device is synchronised around each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/gemm.h"
#include "core/device_kernels.h"
#include "core/ops.h"

namespace tpx {
namespace {

constexpr int kRepetitions = 7;
const Device kGpu = Device::CUDA(0);

// Waits for everything queued on cuda:0's compute stream.
void Sync() {
  absl::StatusOr<cuda::Stream*> stream = cuda::CurrentStream(0);
  TPX_CHECK(stream.ok() && (*stream)->Synchronize().ok()) << "cuda:0 synchronisation failed";
}

template <typename F>
double MedianSeconds(F&& run) {
  run();
  Sync();
  std::vector<double> times;
  for (int r = 0; r < kRepetitions; ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    Sync();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor Random(Shape shape, DType dtype) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  return *Tensor::FromVector<float>(v, shape, dtype)->To(kGpu);
}

void GemmCases() {
  absl::StatusOr<cuda::CublasHandle> blas = cuda::CublasHandle::Create(0);
  TPX_CHECK(blas.ok()) << blas.status();
  cuda::Stream* stream = *cuda::CurrentStream(0);
  for (int64_t size : {2048, 4096, 8192}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Tensor a = Random({size, size}, dtype), b = Random({size, size}, dtype);
      const Tensor c = *Tensor::Empty({size, size}, dtype, kGpu);
      const double tpx_s = MedianSeconds([&] { TPX_CHECK(ops::Matmul(a, b).ok()); });
      const double blas_s = MedianSeconds([&] {
        TPX_CHECK(cuda::Gemm(*blas, *stream, false, false, size, size, size, 1.0f, dtype,
                             a.raw_data(), size, b.raw_data(), size, 0.0f, dtype, c.raw_data(),
                             size)
                      .ok());
      });
      const double flops = 2.0 * static_cast<double>(size) * size * size;
      std::printf(
          "{\"bench\":\"cuda_gemm\",\"shape\":\"%ldx%ldx%ld\",\"dtype\":\"%s\","
          "\"tpx_tflops\":%.2f,\"cublas_tflops\":%.2f,\"ratio\":%.3f}\n",
          static_cast<long>(size), static_cast<long>(size), static_cast<long>(size),
          std::string(DTypeName(dtype)).c_str(), flops / tpx_s / 1e12, flops / blas_s / 1e12,
          blas_s / tpx_s);
    }
  }
}

void ElementwiseCases() {
  const int64_t n = int64_t{1} << 26;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor a = Random({n}, dtype), b = Random({n}, dtype);
    const Tensor dst = *Tensor::Empty({n}, dtype, kGpu);
    const double bytes_moved = 3.0 * static_cast<double>(a.nbytes());  // 2 reads, 1 write
    // Baseline: a plain device copy of the same tensors, scaled to the same
    // traffic (a copy moves 2 bytes per output byte, add moves 3).
    const double copy_s = MedianSeconds([&] { TPX_CHECK(dst.CopyFrom(a).ok()); });
    const double copy_gbps = 2.0 * static_cast<double>(a.nbytes()) / copy_s / 1e9;
    struct Case {
      const char* op;
      std::function<void()> run;
    };
    const std::vector<Case> cases = {
        {"add", [&] { TPX_CHECK(ops::Add(a, b).ok()); }},
        {"add_in_place", [&] { TPX_CHECK(ops::AddInPlace(dst, b).ok()); }},
        {"gelu", [&] { TPX_CHECK(ops::Gelu(a).ok()); }},
    };
    for (const Case& c : cases) {
      const double s = MedianSeconds(c.run);
      const double moved = std::string(c.op) == "gelu" ? 2.0 * a.nbytes() : bytes_moved;
      const double gbps = moved / s / 1e9;
      std::printf(
          "{\"bench\":\"cuda_elementwise\",\"op\":\"%s\",\"elements\":%ld,\"dtype\":\"%s\","
          "\"tpx_gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f}\n",
          c.op, static_cast<long>(n), std::string(DTypeName(dtype)).c_str(), gbps, copy_gbps,
          gbps / copy_gbps);
    }
    const Tensor rows = *a.View({n / 4096, 4096});
    const double sum_s = MedianSeconds([&] { TPX_CHECK(ops::Sum(rows, 1).ok()); });
    std::printf(
        "{\"bench\":\"cuda_reduce\",\"op\":\"sum_rows\",\"shape\":\"%ldx4096\",\"dtype\":\"%s\","
        "\"tpx_gbps\":%.1f,\"memcpy_gbps\":%.1f}\n",
        static_cast<long>(n / 4096), std::string(DTypeName(dtype)).c_str(),
        a.nbytes() / sum_s / 1e9, copy_gbps);
  }
}

// GB/s of a device-to-device copy of `bytes`, counting bytes read and written.
double CopyGbps(int64_t bytes) {
  const Tensor src = *Tensor::Empty({bytes / 4}, DType::kF32, kGpu);
  const Tensor dst = *Tensor::Empty({bytes / 4}, DType::kF32, kGpu);
  const double s = MedianSeconds([&] { TPX_CHECK(dst.CopyFrom(src).ok()); });
  return 2.0 * static_cast<double>(src.nbytes()) / s / 1e9;
}

void PrintFused(const char* op, const std::string& shape, DType dtype, double bytes,
                double seconds, double copy_gbps) {
  const double gbps = bytes / seconds / 1e9;
  std::printf(
      "{\"bench\":\"cuda_fused\",\"op\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\","
      "\"tpx_gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f}\n",
      op, shape.c_str(), std::string(DTypeName(dtype)).c_str(), gbps, copy_gbps,
      gbps / copy_gbps);
}

// The fused transformer and training kernels at GPT-like sizes. Bytes are
// the least each op must move (every input read once, every output written
// once; f32 statistics and [h] vectors left out), so the ratio to a device
// copy says how close the op comes to the memory's speed.
void FusedCases() {
  const double copy_gbps = CopyGbps(int64_t{1} << 28);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t rows = 16384, h = 1024;
    const Tensor x = Random({rows, h}, dtype), g = Random({rows, h}, dtype);
    const Tensor w = Random({h}, DType::kF32), b = Random({h}, DType::kF32);
    const double bytes = static_cast<double>(x.nbytes());
    absl::StatusOr<ops::LayerNormResult> f = ops::LayerNorm(x, w, b, 1e-5);
    TPX_CHECK(f.ok()) << f.status();
    const double fwd_s = MedianSeconds([&] { TPX_CHECK(ops::LayerNorm(x, w, b, 1e-5).ok()); });
    PrintFused("layer_norm_fwd", "16384x1024", dtype, 2.0 * bytes, fwd_s, copy_gbps);
    const double bwd_s = MedianSeconds([&] {
      TPX_CHECK(ops::LayerNormBackward(g, x, f->mean, f->rstd, w, true, true, true).ok());
    });
    PrintFused("layer_norm_bwd", "16384x1024", dtype, 3.0 * bytes, bwd_s, copy_gbps);
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor x = Random({64, 512, 512}, dtype), g = Random({64, 512, 512}, dtype);
    const double bytes = static_cast<double>(x.nbytes());
    absl::StatusOr<Tensor> y = ops::ScaledSoftmax(x, 0.125, /*causal=*/true);
    TPX_CHECK(y.ok()) << y.status();
    const double fwd_s =
        MedianSeconds([&] { TPX_CHECK(ops::ScaledSoftmax(x, 0.125, true).ok()); });
    PrintFused("scaled_causal_softmax_fwd", "64x512x512", dtype, 2.0 * bytes, fwd_s, copy_gbps);
    const double bwd_s =
        MedianSeconds([&] { TPX_CHECK(ops::ScaledSoftmaxBackward(g, *y, 0.125).ok()); });
    PrintFused("scaled_causal_softmax_bwd", "64x512x512", dtype, 3.0 * bytes, bwd_s, copy_gbps);
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t rows = 16384, h = 4096;
    const Tensor x = Random({rows, h}, dtype), g = Random({rows, h}, dtype);
    const Tensor b = Random({h}, dtype);
    const double bytes = static_cast<double>(x.nbytes());
    const double fwd_s = MedianSeconds([&] { TPX_CHECK(ops::BiasGelu(x, b).ok()); });
    PrintFused("bias_gelu_fwd", "16384x4096", dtype, 2.0 * bytes, fwd_s, copy_gbps);
    const double bwd_s = MedianSeconds([&] { TPX_CHECK(ops::BiasGeluBackward(g, x, b).ok()); });
    PrintFused("bias_gelu_bwd", "16384x4096", dtype, 3.0 * bytes, bwd_s, copy_gbps);
  }
  {
    // param, exp_avg, exp_avg_sq read and written, grad read: 7 f32 arrays.
    const int64_t n = int64_t{1} << 24;
    const Tensor p = Random({n}, DType::kF32), grad = Random({n}, DType::kF32);
    const Tensor m = *Tensor::Zeros({n}, DType::kF32, kGpu);
    const Tensor v = *Tensor::Zeros({n}, DType::kF32, kGpu);
    const AdamWCoefficients c{.decay = 0.9999f, .beta1 = 0.9f, .beta2 = 0.95f,
                              .step_size = 1e-4f, .inv_sqrt_bias2 = 1.0f, .eps = 1e-8f};
    const double s =
        MedianSeconds([&] { TPX_CHECK(ops::AdamWStep(p, grad, m, v, Tensor(), c).ok()); });
    PrintFused("adamw", "16777216", DType::kF32, 7.0 * static_cast<double>(p.nbytes()), s,
               copy_gbps);
  }
}

int Main() {
  absl::StatusOr<DeviceKernels*> kernels = KernelsFor(kGpu, "cuda_ops bench");
  if (!kernels.ok()) {
    std::printf("{\"bench\":\"cuda_ops\",\"skipped\":\"%s\"}\n",
                absl::StrReplaceAll(kernels.status().message(), {{"\"", "'"}}).c_str());
    return 0;
  }
  GemmCases();
  ElementwiseCases();
  FusedCases();
  return 0;
}

}  // namespace
}  // namespace tpx

int main() { return tpx::Main(); }
