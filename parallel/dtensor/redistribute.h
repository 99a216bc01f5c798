// Runs a RedistributePlan on this rank's local tensor: the collectives over
// the mesh's per-dim groups and the local slicing/scaling, step by step. No
// autograd here (DTensor::Redistribute wraps this in a differentiable
// Function).
//
//   TPX_ASSIGN_OR_RETURN(RedistributePlan plan,
//       PlanRedistribute(mesh.position(), global_shape, local.dtype(), {Shard(0)}, {Replicate()}));
//   TPX_ASSIGN_OR_RETURN(Tensor full, ExecuteRedistributePlan(local, plan, mesh));
//
// Collective: every rank of the mesh runs its plan (same steps, same order).
// The input is never written; the result is a new tensor, or `local` itself
// for an empty plan.
#ifndef TPX_PARALLEL_DTENSOR_REDISTRIBUTE_H_
#define TPX_PARALLEL_DTENSOR_REDISTRIBUTE_H_

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "parallel/dtensor/device_mesh.h"
#include "parallel/dtensor/redistribute_plan.h"

namespace tpx::dtensor {

// Errors: InvalidArgument when `local`'s shape is not the plan's input shape
// or the mesh does not match the plan; Replicate -> Partial(sum) of a
// non-floating tensor; the communicator's errors (naming op and rank), e.g.
// for a CUDA tensor on a host-memory backend.
absl::StatusOr<Tensor> ExecuteRedistributePlan(const Tensor& local, const RedistributePlan& plan,
                                               const DeviceMesh& mesh);

}  // namespace tpx::dtensor

#endif  // TPX_PARALLEL_DTENSOR_REDISTRIBUTE_H_
