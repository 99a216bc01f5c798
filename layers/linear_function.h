// The tensor-parallel linear autograd function: y = x W^T (+ b) with the
// communication of its input gradient overlapped with the weight-gradient
// GEMM (Megatron's LinearWithGradAccumulationAndAsyncCommunication; nanotron's
// ALL_REDUCE / REDUCE_SCATTER modes).
//
// Backward, in order:
//   1. sequence parallel and the input was not saved: start re-gathering the
//      input (all-gather along dim 0);
//   2. dgrad GEMM  dx = dy W;
//   3. start the dgrad collective (all-reduce, or reduce-scatter along dim 0
//      under sequence parallelism) -> Work handle, not waited yet;
//   4. wgrad GEMM  dW = dy^T x  (or main_grad += dy^T x with fusion) and db;
//   5. wait for the dgrad collective.
// On the UCX backend the collective progresses on the plugin's own thread, so
// steps 3 and 4 overlap.
//
//   LinearCommOptions o{.tp = &tp, .mode = TpMode::kReduceScatter};
//   TPX_ASSIGN_OR_RETURN(Variable y, LinearWithAsyncCommunication(x, w, b, o));
//
// Frozen weight (w does not require grad): no input is saved, no wgrad.
#ifndef TPX_LAYERS_LINEAR_FUNCTION_H_
#define TPX_LAYERS_LINEAR_FUNCTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"

namespace tpx::layers {

// What the input gradient goes through (nanotron's TensorParallelLinearMode).
enum class TpMode {
  kNone,           // no communication (row-parallel linear, TP = 1)
  kAllReduce,      // forward: x as is; backward: all-reduce dx
  kReduceScatter,  // forward: all-gather x along dim 0; backward: reduce-scatter dx
};

// Wall-clock points (steady clock, ns) of one Backward, for showing overlap.
struct LinearBackwardTimeline {
  int64_t dgrad_comm_posted_ns = 0;
  int64_t wgrad_gemm_start_ns = 0;
  int64_t wgrad_gemm_end_ns = 0;
  bool dgrad_comm_done_at_wgrad_end = false;  // IsCompleted() right after the wgrad GEMM
  int64_t dgrad_comm_waited_ns = 0;           // when Wait() returned
};

struct LinearCommOptions {
  comm::Communicator* tp = nullptr;  // required unless mode == kNone
  TpMode mode = TpMode::kNone;
  // kReduceScatter: per-rank token counts along dim 0 (empty = equal).
  std::vector<int64_t> sequence_split_sizes;
  // kReduceScatter: save only the local input and all-gather it again in
  // backward (less memory; Megatron's choice), else save the gathered input.
  bool regather_input_in_backward = true;
  // Add dW into weight.main_grad() (f32, the weight's shape) instead of
  // returning it; the weight's post-accumulate hooks still run.
  bool gradient_accumulation_fusion = false;
  // Filled by Backward when set (must outlive the graph).
  LinearBackwardTimeline* timeline = nullptr;
};

// x [..., in] (under kReduceScatter: this rank's tokens along dim 0),
// weight [out, in], bias [out] or undefined. Output [..., out] (all tokens
// under kReduceScatter). Errors: shapes, missing main_grad with fusion,
// missing communicator.
absl::StatusOr<Variable> LinearWithAsyncCommunication(const Variable& x, const Variable& weight,
                                                      const Variable& bias,
                                                      const LinearCommOptions& options);

}  // namespace tpx::layers

#endif  // TPX_LAYERS_LINEAR_FUNCTION_H_
