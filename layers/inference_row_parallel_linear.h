// InferenceRowParallelLinear: the decode-path row-parallel layer (Megatron's
// inference-optimised layer of that name). No autograd.
//
//   Forward:             x [N, ..., in/tp] -> GEMM -> reduce-scatter along
//                        dim 0 (+ bias) -> [N/tp, ..., out]     (TP=1: [N, ..., out])
//   ForwardAddNormGather: the same, then residual += that in place, then the
//                        NEXT layer's norm, then all-gather -> [N, ..., out]:
//                        exactly the input InferenceLayerNormColumnParallelLinear::
//                        ForwardNormalized expects.
//
//   TPX_ASSIGN_OR_RETURN(auto fc2, InferenceRowParallelLinear::Create(tp, *trained_fc2));
//   TPX_ASSIGN_OR_RETURN(Tensor next_in, fc2.ForwardAddNormGather(h, residual, qkv.norm()));
//   TPX_ASSIGN_OR_RETURN(Tensor y, qkv.ForwardNormalized(next_in));
//
// The fused call keeps three buffers across calls (GEMM output, reduced
// rows, gathered rows): after the GEMM it makes one pass over this rank's
// rows (add, norm statistics and output while each row is in cache), writing
// the norm straight into its block of the gather buffer, which is then
// gathered in place. Its result is a view of that buffer, valid until the
// next call on this layer. A layer is used from one thread at a time. The
// communicator and the trained layer must outlive it. At TP > 1 the rows
// (dim 0) must divide by the TP size: the layer is sequence-parallel, as the
// reference requires.
#ifndef TPX_LAYERS_INFERENCE_ROW_PARALLEL_LINEAR_H_
#define TPX_LAYERS_INFERENCE_ROW_PARALLEL_LINEAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"
#include "layers/inference_norm.h"
#include "layers/parallel_linear.h"

namespace tpx::layers {

// The fused tail on its own, for partial sums that do not come from a GEMM
// (e.g. a vocab-parallel embedding): residual [N/tp, ..., h] += reduce-scatter
// of partial [N, ..., h] over tp (+ bias [h], may be undefined); then
// gathered [N, ..., h] = all-gather of norm(residual). `reduced` holds the
// reduce-scatter output between calls. At TP=1 partial is added directly.
absl::Status ReduceScatterAddNormAllGather(comm::Communicator& tp, const Tensor& partial,
                                           const Tensor& bias, const Tensor& residual,
                                           const InferenceNorm& norm, RowBuffer& reduced,
                                           const Tensor& gathered);

class InferenceRowParallelLinear {
 public:
  // Shares the trained layer's weight [out, in/tp] and bias [out].
  static absl::StatusOr<InferenceRowParallelLinear> Create(comm::Communicator& tp,
                                                           const RowParallelLinear& linear);

  // Errors: x not [rows, ..., in/tp]; rows not divisible by the TP size;
  // collective failures.
  absl::StatusOr<Tensor> Forward(const Tensor& x) const;
  // residual [N/tp, ..., out] is updated in place. Errors as Forward, plus a
  // residual of the wrong shape and a norm that is not [out].
  absl::StatusOr<Tensor> ForwardAddNormGather(const Tensor& x, const Tensor& residual,
                                              const InferenceNorm& next_norm) const;

  int64_t input_size_per_partition() const { return input_size_per_partition_; }
  int64_t output_size() const { return output_size_; }

 private:
  struct Buffers {
    RowBuffer partial, reduced, gathered;
  };
  InferenceRowParallelLinear() = default;
  // x as [rows, in/tp], after the shape checks.
  absl::StatusOr<Tensor> Rows(const Tensor& x) const;

  comm::Communicator* tp_ = nullptr;
  int64_t input_size_per_partition_ = 0, output_size_ = 0;
  Variable weight_, bias_;  // shared with the trained layer
  std::shared_ptr<Buffers> buffers_;
};

}  // namespace tpx::layers

#endif  // TPX_LAYERS_INFERENCE_ROW_PARALLEL_LINEAR_H_
