// The CPU implementation of DeviceKernels (core/device_kernels.h): the loops
// behind every op on CPU tensors. Internal to //core:tensor; reach it through
// CpuKernels() or KernelsFor(Device::CPU(), ...).
//
// Large elementwise, softmax, layer-norm and the fused training loops are
// split over the GEMM threads (core/cpu/parallel.h); everything is finished when the call
// returns.
#ifndef TPX_CORE_CPU_CPU_KERNELS_H_
#define TPX_CORE_CPU_CPU_KERNELS_H_

#include "core/device_kernels.h"

namespace tpx::cpu {

class CpuDeviceKernels final : public DeviceKernels {
 public:
  absl::Status CheckDevice(int index) override;
  Allocator& allocator(int index) override;
  void* CurrentStream(int index) override { return nullptr; }
  absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                          int index) override;
  absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes,
                            int index) override;

  absl::Status Copy(const Tensor& dst, const Tensor& src) override;           // cpu_kernels.cc
  absl::Status Fill(const Tensor& dst, double value) override;                // cpu_kernels.cc
  absl::Status Binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                      double alpha) override;  // elementwise_kernels.cc
  absl::Status Unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) override;
  absl::Status Where(const Tensor& out, const Tensor& cond, const Tensor& a,
                     const Tensor& b) override;
  absl::Status Reduce(ReduceOp op, const Tensor& out, const Tensor& in, int64_t outer, int64_t n,
                      int64_t inner) override;                                // reduce_kernels.cc
  absl::Status Softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t n,
                       int64_t inner, bool log) override;
  absl::Status LayerNorm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& weight, const Tensor& bias, int64_t rows, int64_t h,
                         double eps) override;                                // nn_kernels.cc
  absl::Status LayerNormBackward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                 const Tensor& grad, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, int64_t rows,
                                 int64_t h) override;
  absl::Status ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch, int64_t m,
                             int64_t n, double scale, bool causal) override;
  absl::Status ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad, const Tensor& y,
                                     int64_t rows, int64_t n, double scale) override;
  absl::Status BiasGelu(const Tensor& y, const Tensor& x, const Tensor& bias, int64_t rows,
                        int64_t h) override;
  absl::Status BiasGeluBackward(const Tensor& dx, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& bias, int64_t rows,
                                int64_t h) override;
  absl::Status CrossEntropyStats(const Tensor& stats, const Tensor& logits, const Tensor& target,
                                 int64_t rows, int64_t v) override;  // training_kernels.cc
  absl::Status CrossEntropyBackward(const Tensor& dx, const Tensor& logits, const Tensor& lse,
                                    const Tensor& g, const Tensor& target, int64_t rows,
                                    int64_t v, float smooth_over_k, float target_coeff) override;
  absl::Status SumOfSquares(const Tensor& x, int64_t n, double* out) override;
  absl::Status AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, const Tensor& working, int64_t n,
                         const AdamWCoefficients& c) override;
  absl::Status AdamWSteps(absl::Span<const AdamWOperands> updates) override;
  absl::Status SumsOfSquares(absl::Span<const Tensor> xs, double* out) override;
  absl::Status DropoutAdd(const Tensor& out, const Tensor& x, const Tensor& bias,
                          const Tensor& keep, const Tensor& residual, int64_t n, int64_t bias_n,
                          float scale) override;
  absl::Status IndexSelect(const Tensor& out, const Tensor& in, int64_t dim,
                           const Tensor& index) override;                     // index_kernels.cc
  absl::Status IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index,
                        const Tensor& src) override;
  absl::Status Gemm(int index, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, DType ab_dtype, const void* a, int64_t lda, const void* b,
                    int64_t ldb, float beta, DType c_dtype, void* c, int64_t ldc) override;
  absl::Status GemmBias(int index, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                        DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                        const void* bias, void* c, int64_t ldc) override;
  absl::Status GemmBatched(int index, int64_t batch, bool trans_a, bool trans_b, int64_t m,
                           int64_t n, int64_t k, float alpha, DType ab_dtype, const void* a,
                           int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                           int64_t stride_b, float beta, DType c_dtype, void* c, int64_t ldc,
                           int64_t stride_c) override;
  absl::Status CausalSelfAttention(const Tensor& ctx, const Tensor& stats, const Tensor& qkv,
                                   int64_t t, int64_t b, int64_t heads, int64_t head_dim,
                                   double scale) override;  // attention_kernels.cc
  absl::Status CausalSelfAttentionBackward(const Tensor& dqkv, const Tensor& grad_ctx,
                                           const Tensor& qkv, const Tensor& stats, int64_t t,
                                           int64_t b, int64_t heads, int64_t head_dim,
                                           double scale) override;
};

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_CPU_KERNELS_H_
