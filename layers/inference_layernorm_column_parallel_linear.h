// InferenceLayerNormColumnParallelLinear: the decode-path column-parallel
// layer (Megatron's inference-optimised layer of that name). No autograd.
//
//   x: this rank's rows [N/tp, ..., in] (sequence parallel; all N rows at TP=1)
//   -> norm (RMSNorm, or LayerNorm for models trained with it)
//   -> all-gather along dim 0 -> [N, ..., in]
//   -> GEMM with this rank's rows of the weight (+ its bias) -> [N, ..., out/tp]
//
// ForwardNormalized skips the norm and the gather: its input is what the
// previous InferenceRowParallelLinear::ForwardAddNormGather returned (the
// reference's fused mode, skip_norm_and_all_gather). The layer shares the
// weight and bias of a trained ColumnParallelLinear (no copy), so weights
// the optimizer or a loader updates are seen here.
//
//   TPX_ASSIGN_OR_RETURN(auto qkv, InferenceLayerNormColumnParallelLinear::Create(
//       tp, *trained_qkv, {.kind = NormKind::kRmsNorm, .weight = ln_w}));
//   TPX_ASSIGN_OR_RETURN(Tensor y, qkv.Forward(x_local));
//
// Forward reuses one gather buffer across calls; a layer is used from one
// thread at a time. The communicator and the trained layer must outlive it.
#ifndef TPX_LAYERS_INFERENCE_LAYERNORM_COLUMN_PARALLEL_LINEAR_H_
#define TPX_LAYERS_INFERENCE_LAYERNORM_COLUMN_PARALLEL_LINEAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"
#include "layers/inference_norm.h"
#include "layers/parallel_linear.h"

namespace tpx::layers {

class InferenceLayerNormColumnParallelLinear {
 public:
  // norm.weight/bias are [in] (replicated). Errors: the trained layer has no
  // weight of its own (skip_weight_param_allocation), or a norm that does
  // not fit its input size.
  static absl::StatusOr<InferenceLayerNormColumnParallelLinear> Create(
      comm::Communicator& tp, const ColumnParallelLinear& linear, InferenceNorm norm);

  // x [N/tp, ..., in] -> [N, ..., out/tp]. Errors: x not [..., in] with at
  // least two dims, collective failures.
  absl::StatusOr<Tensor> Forward(const Tensor& x) const;
  // x [N, ..., in], already normalised and gathered -> [N, ..., out/tp].
  absl::StatusOr<Tensor> ForwardNormalized(const Tensor& x) const;

  const InferenceNorm& norm() const { return norm_; }
  int64_t input_size() const { return input_size_; }
  int64_t output_size_per_partition() const { return output_size_per_partition_; }

 private:
  InferenceLayerNormColumnParallelLinear() = default;
  comm::Communicator* tp_ = nullptr;
  int64_t input_size_ = 0, output_size_per_partition_ = 0;
  Variable weight_, bias_;  // shared with the trained layer
  InferenceNorm norm_;
  std::shared_ptr<RowBuffer> gathered_;
};

}  // namespace tpx::layers

#endif  // TPX_LAYERS_INFERENCE_LAYERNORM_COLUMN_PARALLEL_LINEAR_H_
