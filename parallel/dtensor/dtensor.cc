#include "parallel/dtensor/dtensor.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/engine.h"
#include "core/autograd/function.h"
#include "core/status_macros.h"
#include "parallel/dtensor/redistribute.h"

namespace tpx::dtensor {
namespace {

// Forward: run the plan. Backward: move the gradient from the output's
// gradient layout to the reference's backward target (redistribute_plan.h).
class RedistributeFunction final : public Function {
 public:
  RedistributeFunction(DeviceMesh mesh, RedistributePlan plan, Shape global_shape)
      : mesh_(std::move(mesh)), plan_(std::move(plan)), global_shape_(std::move(global_shape)) {}

  std::string name() const override { return "Redistribute"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(Tensor out, ExecuteRedistributePlan(in[0], plan_, mesh_));
    return std::vector<Tensor>{out};
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad) override {
    const Placements grad_placements = PartialAsReplicate(plan_.to);
    TPX_ASSIGN_OR_RETURN(
        RedistributePlan back,
        PlanRedistribute(mesh_.position(), global_shape_, grad[0].dtype(), grad_placements,
                         BackwardTargetPlacements(grad_placements, plan_.from)));
    TPX_ASSIGN_OR_RETURN(Tensor dx, ExecuteRedistributePlan(grad[0], back, mesh_));
    return std::vector<Tensor>{dx};
  }

 private:
  DeviceMesh mesh_;
  RedistributePlan plan_;
  Shape global_shape_;
};

Placements AllReplicate(int64_t n) { return Placements(static_cast<size_t>(n), Replicate()); }

}  // namespace

absl::StatusOr<DTensor> DTensor::FromLocal(Variable local, DeviceMesh mesh, Placements placements,
                                           std::optional<Shape> global_shape) {
  if (!local.defined()) {
    return absl::InvalidArgumentError("DTensor::FromLocal: undefined local tensor");
  }
  const Shape& local_shape = local.shape();
  auto where = [&] {
    return absl::StrCat("DTensor::FromLocal(", local.value().ToString(), ", ",
                        PlacementsString(placements), ") at coordinate ",
                        ShapeString(mesh.coordinate()), " of ", mesh.ToString());
  };
  {
    absl::Status s = ValidatePlacements(placements, mesh.ndim(), local.value().dim());
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(where(), ": ", s.message()));
  }
  Shape shape;
  if (global_shape.has_value()) {
    shape = *global_shape;
    if (shape.size() != local_shape.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": global shape ", ShapeString(shape), " has another rank"));
    }
  } else {
    // Innermost mesh dim first: summing local sizes over mesh dim i gives the
    // extent that mesh dim i cut, which is the piece of the next outer cut.
    shape = local_shape;
    for (int64_t i = mesh.ndim() - 1; i >= 0; --i) {
      if (!placements[i].is_shard()) continue;
      int64_t extent = shape[placements[i].shard_dim()];
      TPX_RETURN_IF_ERROR(
          mesh.group(i).AllReduce(&extent, 1, DType::kI64, comm::ReduceOp::kSum).Wait());
      shape[placements[i].shard_dim()] = extent;
    }
  }
  const Shape expected = LocalShape(shape, placements, mesh.position());
  if (expected != local_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": the piece of global shape ", ShapeString(shape), " here is ",
        ShapeString(expected), " (pieces follow ops::SplitSizes), not ", ShapeString(local_shape)));
  }
  return DTensor(std::move(local), std::move(mesh), std::move(placements), std::move(shape));
}

absl::StatusOr<DTensor> DTensor::Distribute(const Variable& global, DeviceMesh mesh,
                                            Placements placements) {
  if (!global.defined()) {
    return absl::InvalidArgumentError("DTensor::Distribute: undefined tensor");
  }
  const Shape shape = global.shape();
  TPX_ASSIGN_OR_RETURN(DTensor replicated,
                       FromLocal(global, mesh, AllReplicate(mesh.ndim()), shape));
  return replicated.Redistribute(std::move(placements));
}

absl::StatusOr<DTensor> DTensor::Distribute(const Tensor& global, DeviceMesh mesh,
                                            Placements placements) {
  return Distribute(Variable(global), std::move(mesh), std::move(placements));
}

absl::StatusOr<RedistributePlan> DTensor::PlanRedistribute(Placements target) const {
  auto plan =
      dtensor::PlanRedistribute(mesh_.position(), shape_, dtype(), placements_, std::move(target));
  if (!plan.ok()) {
    return absl::Status(plan.status().code(), absl::StrCat("Redistribute of ", ToString(), ": ",
                                                           plan.status().message()));
  }
  return plan;
}

absl::StatusOr<DTensor> DTensor::Redistribute(Placements target) const {
  TPX_ASSIGN_OR_RETURN(RedistributePlan plan, PlanRedistribute(std::move(target)));
  Placements to = plan.to;
  TPX_ASSIGN_OR_RETURN(
      Variable out,
      Apply(std::make_shared<RedistributeFunction>(mesh_, std::move(plan), shape_), {local_}));
  return DTensor(std::move(out), mesh_, std::move(to), shape_);
}

absl::StatusOr<DTensor> DTensor::Redistribute(const DeviceMesh& mesh, Placements target) const {
  if (mesh != mesh_) {
    return absl::UnimplementedError(absl::StrCat(
        "Redistribute of ", ToString(), " from ", mesh_.ToString(), " to ", mesh.ToString(),
        ": moving a tensor to another mesh is not supported (redistribute on its own mesh)"));
  }
  return Redistribute(std::move(target));
}

absl::StatusOr<Variable> DTensor::FullTensor() const {
  TPX_ASSIGN_OR_RETURN(DTensor full, Redistribute(AllReplicate(mesh_.ndim())));
  return full.ToLocal();
}

absl::Status Backward(const DTensor& output, const DTensor& grad) {
  if (grad.mesh() != output.mesh()) {
    return absl::UnimplementedError(absl::StrCat(
        "Backward of ", output.ToString(), ": the gradient ", grad.ToString(), " lives on ",
        grad.mesh().ToString(), ", not on ", output.mesh().ToString()));
  }
  if (grad.shape() != output.shape() || grad.dtype() != output.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("Backward of ", output.ToString(),
                                                   ": the gradient ", grad.ToString(),
                                                   " must have the same global shape and dtype"));
  }
  TPX_ASSIGN_OR_RETURN(RedistributePlan plan,
                       grad.PlanRedistribute(PartialAsReplicate(output.placements())));
  TPX_ASSIGN_OR_RETURN(Tensor local_grad,
                       ExecuteRedistributePlan(grad.ToLocal().value(), plan, grad.mesh()));
  return ::tpx::Backward(output.ToLocal(), local_grad);
}

std::string DTensor::ToString() const {
  return absl::StrCat("DTensor(", std::string(DTypeName(dtype())), ShapeString(shape_), ", ",
                      PlacementsString(placements_), ", local ", ShapeString(local_.shape()), ")");
}

}  // namespace tpx::dtensor
