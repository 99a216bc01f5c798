// DTensor: a tensor distributed over a DeviceMesh — this rank's local piece
// (a differentiable Variable), the mesh, one Placement per mesh dim and the
// global shape.
//
//   TPX_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(*world, {4}));
//   TPX_ASSIGN_OR_RETURN(DTensor x, DTensor::Distribute(weight, mesh, {Shard(0)}));
//   TPX_ASSIGN_OR_RETURN(DTensor y, x.Redistribute({Shard(1)}));     // one all_to_all
//   TPX_ASSIGN_OR_RETURN(RedistributePlan plan, x.PlanRedistribute({Replicate()}));
//   TPX_ASSIGN_OR_RETURN(Variable full, y.FullTensor());    // the whole tensor, every rank
//   TPX_RETURN_IF_ERROR(Backward(loss));                     // gradients flow back
//   TPX_RETURN_IF_ERROR(Backward(y, dy));  // dy: a DTensor gradient in any layout, e.g. Partial
//
// Redistribute is differentiable; its backward moves the gradient back with
// the reference's rule (see redistribute_plan.h): the gradient of a local
// tensor is laid out like the DTensor with Partial read as Replicate, and a
// Partial input gets a Replicate gradient (no division by the group size).
// FromLocal and ToLocal are the identity on the local Variable.
//
// Every call that communicates is collective over the mesh: all ranks make it
// with the same placements. Errors name the op, the placements and the shapes.
#ifndef TPX_PARALLEL_DTENSOR_DTENSOR_H_
#define TPX_PARALLEL_DTENSOR_DTENSOR_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"
#include "parallel/dtensor/device_mesh.h"
#include "parallel/dtensor/placement.h"
#include "parallel/dtensor/redistribute_plan.h"

namespace tpx::dtensor {

class DTensor {
 public:
  // Wraps this rank's piece. With `global_shape`, checks that the local shape
  // is this rank's piece of it (no communication). Without, infers the global
  // shape by summing local sizes over each sharded mesh dim (collective), then
  // checks the same. Errors: invalid placements, a local shape that does not
  // follow ops::SplitSizes for this coordinate.
  static absl::StatusOr<DTensor> FromLocal(Variable local, DeviceMesh mesh, Placements placements,
                                           std::optional<Shape> global_shape = std::nullopt);
  // Cuts a global tensor present on every rank (same values) into this rank's
  // piece: Shard slices, Partial(sum) divides by the group size, other
  // Partials keep the value. No communication; differentiable (the gradient
  // of `global` is the full gradient, gathered).
  static absl::StatusOr<DTensor> Distribute(const Variable& global, DeviceMesh mesh,
                                            Placements placements);
  static absl::StatusOr<DTensor> Distribute(const Tensor& global, DeviceMesh mesh,
                                            Placements placements);

  // This rank's piece (shares the graph: gradients flow through it).
  const Variable& ToLocal() const { return local_; }
  const DeviceMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  // The global shape.
  const Shape& shape() const { return shape_; }
  DType dtype() const { return local_.dtype(); }

  // The steps Redistribute(target) would run on this rank.
  absl::StatusOr<RedistributePlan> PlanRedistribute(Placements target) const;
  // The same global tensor with `target` placements. Errors: invalid
  // placements; UNIMPLEMENTED for a different mesh; communication errors.
  absl::StatusOr<DTensor> Redistribute(Placements target) const;
  absl::StatusOr<DTensor> Redistribute(const DeviceMesh& mesh, Placements target) const;
  // The whole tensor on every rank (Redistribute to all-Replicate, then ToLocal).
  absl::StatusOr<Variable> FullTensor() const;

  // "DTensor(f32[10, 8], [S(0)], local [3, 8])".
  std::string ToString() const;

 private:
  DTensor(Variable local, DeviceMesh mesh, Placements placements, Shape shape)
      : local_(std::move(local)),
        mesh_(std::move(mesh)),
        placements_(std::move(placements)),
        shape_(std::move(shape)) {}

  Variable local_;
  DeviceMesh mesh_;
  Placements placements_;
  Shape shape_;
};

// Runs backward from `output` with a gradient that carries its own
// placements (for instance Partial(sum) when each rank holds a contribution).
// The gradient is first moved, with the same planner and collectives as
// Redistribute, to the layout autograd uses for `output` (its placements
// with Partial read as Replicate); from there each Redistribute's backward
// rule applies. Collective over the mesh. Errors: a gradient on another
// mesh (UNIMPLEMENTED) or with another global shape or dtype
// (INVALID_ARGUMENT); the engine's errors.
absl::Status Backward(const DTensor& output, const DTensor& grad);

}  // namespace tpx::dtensor

#endif  // TPX_PARALLEL_DTENSOR_DTENSOR_H_
