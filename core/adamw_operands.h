// The tensors and scalars of one parameter's AdamW update, as ops::AdamWSteps
// takes them and DeviceKernels::AdamWSteps runs them: an optimizer hands its
// whole parameter list to the device in one call.
//
//   std::vector<AdamWOperands> updates;
//   updates.push_back({.param = master, .grad = g, .exp_avg = m, .exp_avg_sq = s,
//                      .working = bf16_weight, .coefficients = c});
//   TPX_RETURN_IF_ERROR(ops::AdamWSteps(updates));
#ifndef TPX_CORE_ADAMW_OPERANDS_H_
#define TPX_CORE_ADAMW_OPERANDS_H_

#include "core/kernel_ops.h"
#include "core/tensor.h"

namespace tpx {

struct AdamWOperands {
  Tensor param;       // f32, updated in place
  Tensor grad;        // f32 or bf16, read as f32
  Tensor exp_avg;     // f32, updated in place
  Tensor exp_avg_sq;  // f32, updated in place
  Tensor working;     // bf16 copy of param refreshed from it, or undefined
  AdamWCoefficients coefficients;
};

}  // namespace tpx

#endif  // TPX_CORE_ADAMW_OPERANDS_H_
