#include "core/device_kernels.h"

#include <array>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/cpu/cpu_kernels.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace tpx {
namespace {

// Indexed by DeviceType; written once per type at static initialisation.
std::array<std::atomic<DeviceKernels*>, 2>& Registry() {
  static std::array<std::atomic<DeviceKernels*>, 2> registry{};
  return registry;
}

const char* LibraryFor(DeviceType type) {
  return type == DeviceType::kCUDA ? "//core/cuda" : "//core:tensor";
}

absl::Status NotOnThisDevice(const char* kernel) {
  return absl::UnimplementedError(
      absl::StrCat(kernel, ": no fused kernel on this device (compose it from other ops)"));
}

}  // namespace

absl::Status DeviceKernels::GemmBias(int, bool, bool, int64_t, int64_t, int64_t, DType,
                                     const void*, int64_t, const void*, int64_t, const void*,
                                     void*, int64_t) {
  return absl::UnimplementedError("GemmBias: no fused-bias GEMM on this device");
}

absl::Status DeviceKernels::GemmBatched(int index, int64_t batch, bool trans_a, bool trans_b,
                                        int64_t m, int64_t n, int64_t k, float alpha,
                                        DType ab_dtype, const void* a, int64_t lda,
                                        int64_t stride_a, const void* b, int64_t ldb,
                                        int64_t stride_b, float beta, DType c_dtype, void* c,
                                        int64_t ldc, int64_t stride_c) {
  const size_t ab_size = SizeOf(ab_dtype), c_size = SizeOf(c_dtype);
  for (int64_t i = 0; i < batch; ++i) {
    TPX_RETURN_IF_ERROR(Gemm(index, trans_a, trans_b, m, n, k, alpha, ab_dtype,
                             static_cast<const char*>(a) + i * stride_a * ab_size, lda,
                             static_cast<const char*>(b) + i * stride_b * ab_size, ldb, beta,
                             c_dtype, static_cast<char*>(c) + i * stride_c * c_size, ldc));
  }
  return absl::OkStatus();
}

absl::Status DeviceKernels::LayerNorm(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, int64_t, int64_t, double) {
  return NotOnThisDevice("LayerNorm");
}

absl::Status DeviceKernels::LayerNormBackward(const Tensor&, const Tensor&, const Tensor&,
                                              const Tensor&, const Tensor&, const Tensor&,
                                              const Tensor&, const Tensor&, int64_t, int64_t) {
  return NotOnThisDevice("LayerNormBackward");
}

absl::Status DeviceKernels::ScaledSoftmax(const Tensor&, const Tensor&, int64_t, int64_t,
                                          int64_t, double, bool) {
  return NotOnThisDevice("ScaledSoftmax");
}

absl::Status DeviceKernels::ScaledSoftmaxBackward(const Tensor&, const Tensor&, const Tensor&,
                                                  int64_t, int64_t, double) {
  return NotOnThisDevice("ScaledSoftmaxBackward");
}

absl::Status DeviceKernels::BiasGelu(const Tensor&, const Tensor&, const Tensor&, int64_t,
                                     int64_t) {
  return NotOnThisDevice("BiasGelu");
}

absl::Status DeviceKernels::BiasGeluBackward(const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, int64_t, int64_t) {
  return NotOnThisDevice("BiasGeluBackward");
}

absl::Status DeviceKernels::CrossEntropyStats(const Tensor&, const Tensor&, const Tensor&,
                                              int64_t, int64_t) {
  return NotOnThisDevice("CrossEntropyStats");
}

absl::Status DeviceKernels::CrossEntropyBackward(const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&, const Tensor&, int64_t, int64_t,
                                                 float, float) {
  return NotOnThisDevice("CrossEntropyBackward");
}

absl::Status DeviceKernels::SumOfSquares(const Tensor&, int64_t, double*) {
  return NotOnThisDevice("SumOfSquares");
}

absl::Status DeviceKernels::AdamWSteps(absl::Span<const AdamWOperands> updates) {
  for (const AdamWOperands& u : updates) {
    TPX_RETURN_IF_ERROR(AdamWStep(u.param, u.grad, u.exp_avg, u.exp_avg_sq, u.working,
                                  u.param.numel(), u.coefficients));
  }
  return absl::OkStatus();
}

absl::Status DeviceKernels::SumsOfSquares(absl::Span<const Tensor> xs, double* out) {
  for (size_t i = 0; i < xs.size(); ++i) {
    out[i] = 0;
    if (xs[i].numel() > 0) TPX_RETURN_IF_ERROR(SumOfSquares(xs[i], xs[i].numel(), &out[i]));
  }
  return absl::OkStatus();
}

absl::Status DeviceKernels::AdamWStep(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, int64_t, const AdamWCoefficients&) {
  return NotOnThisDevice("AdamWStep");
}

absl::Status DeviceKernels::DropoutAdd(const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, int64_t, int64_t, float) {
  return NotOnThisDevice("DropoutAdd");
}

absl::Status DeviceKernels::CausalSelfAttention(const Tensor&, const Tensor&, const Tensor&,
                                                int64_t, int64_t, int64_t, int64_t, double) {
  return NotOnThisDevice("CausalSelfAttention");
}

absl::Status DeviceKernels::CausalSelfAttentionBackward(const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&, int64_t,
                                                        int64_t, int64_t, int64_t, double) {
  return NotOnThisDevice("CausalSelfAttentionBackward");
}

void RegisterDeviceKernels(DeviceType type, DeviceKernels* kernels) {
  DeviceKernels* expected = nullptr;
  TPX_CHECK(Registry()[static_cast<size_t>(type)].compare_exchange_strong(expected, kernels))
      << "kernels for device type " << static_cast<int>(type) << " registered twice";
}

DeviceKernels& CpuKernels() {
  static cpu::CpuDeviceKernels* kernels = new cpu::CpuDeviceKernels();
  return *kernels;
}

absl::StatusOr<DeviceKernels*> KernelsFor(Device device, const char* op) {
  DeviceKernels* kernels = nullptr;
  if (device.is_cpu()) {
    kernels = &CpuKernels();
  } else if (static_cast<size_t>(device.type) < Registry().size()) {
    kernels = Registry()[static_cast<size_t>(device.type)].load();
  }
  if (kernels == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": ", device.ToString(), ": ", device.is_cuda() ? "CUDA" : "device",
        " kernels are not linked into this program (depend on ", LibraryFor(device.type), ")"));
  }
  absl::Status usable = kernels->CheckDevice(device.index);
  if (!usable.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": ", device.ToString(), ": ", usable.message()));
  }
  return kernels;
}

}  // namespace tpx
