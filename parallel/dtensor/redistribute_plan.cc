#include "parallel/dtensor/redistribute_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/collective.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::dtensor {
namespace {

// One (mesh dim, from -> to) transition before it is sized into a step.
struct Transition {
  int64_t mesh_dim;
  Placement from;
  Placement to;
};

// Whether mesh dims [0, mesh_dim) cut tensor dim `d` the same way in both
// layouts, so that the extent of `d` seen at mesh_dim is the same piece.
bool SamePrefixCuts(const Placements& a, const Placements& b, int64_t mesh_dim, int64_t d) {
  for (int64_t k = 0; k < mesh_dim; ++k) {
    if (a[k].is_shard_of(d) != b[k].is_shard_of(d)) return false;
  }
  return true;
}

// Whether a mesh dim after `mesh_dim` cuts tensor dim `d` in either layout.
bool CutAfter(const Placements& a, const Placements& b, int64_t mesh_dim, int64_t d) {
  for (size_t k = mesh_dim + 1; k < a.size(); ++k) {
    if (a[k].is_shard_of(d) || b[k].is_shard_of(d)) return true;
  }
  return false;
}

// Splits each mesh dim's change into transitions the executor can do in one
// step, decomposing through Replicate where needed.
std::vector<Transition> Decompose(const Placements& current, const Placements& target) {
  std::vector<Transition> out;
  for (int64_t i = 0; i < static_cast<int64_t>(current.size()); ++i) {
    const Placement& from = current[i];
    const Placement& to = target[i];
    auto via_replicate = [&] {
      out.push_back({i, from, Replicate()});
      out.push_back({i, Replicate(), to});
    };
    if (from.is_shard() && to.is_shard()) {
      const int64_t a = from.shard_dim();
      const int64_t b = to.shard_dim();
      if (a == b) {
        // Same tensor dim: the same piece only if the earlier cuts agree.
        if (!SamePrefixCuts(current, target, i, a)) via_replicate();
      } else if (SamePrefixCuts(current, target, i, a) && SamePrefixCuts(current, target, i, b) &&
                 !CutAfter(current, target, i, a) && !CutAfter(current, target, i, b)) {
        out.push_back({i, from, to});  // one all_to_all
      } else {
        via_replicate();
      }
    } else if (from == to) {
      continue;
    } else if ((from.is_shard() && to.is_partial()) || (from.is_partial() && to.is_partial())) {
      via_replicate();
    } else {
      out.push_back({i, from, to});
    }
  }
  return out;
}

// The reference's order key: to Replicate/Partial from a shard, innermost
// first; from Replicate/Partial to a shard, outermost first; others between.
int64_t OrderKey(const Transition& t) {
  if (t.from.is_shard() && !t.to.is_shard()) return -t.mesh_dim;
  if (!t.from.is_shard() && t.to.is_shard()) return t.mesh_dim;
  return 0;
}

}  // namespace

const char* StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather:
      return "all_gather";
    case StepKind::kAllReduce:
      return "all_reduce";
    case StepKind::kReduceScatter:
      return "reduce_scatter";
    case StepKind::kAllToAll:
      return "all_to_all";
    case StepKind::kLocalSlice:
      return "local_slice";
    case StepKind::kLocalPartial:
      return "local_partial";
  }
  return "?";
}

bool IsCollective(StepKind kind) {
  return kind != StepKind::kLocalSlice && kind != StepKind::kLocalPartial;
}

std::string RedistributeStep::ToString() const {
  std::string s = absl::StrCat(StepKindName(kind), " on mesh dim ", mesh_dim, ": ", from.ToString(),
                               " -> ", to.ToString(), ", ", ShapeString(input_shape), " -> ",
                               ShapeString(output_shape));
  if (IsCollective(kind)) {
    absl::StrAppend(&s, ", send ", comm::FormatBytes(send_bytes), ", recv ",
                    comm::FormatBytes(recv_bytes));
  }
  if (kind == StepKind::kLocalPartial && scale != 1.0) absl::StrAppend(&s, ", scale ", scale);
  return s;
}

int64_t RedistributePlan::Count(StepKind kind, int64_t mesh_dim) const {
  return std::count_if(steps.begin(), steps.end(), [&](const RedistributeStep& s) {
    return s.kind == kind && (mesh_dim < 0 || s.mesh_dim == mesh_dim);
  });
}

int64_t RedistributePlan::NumCollectives() const {
  return std::count_if(steps.begin(), steps.end(),
                       [](const RedistributeStep& s) { return IsCollective(s.kind); });
}

int64_t RedistributePlan::TotalSendBytes() const {
  int64_t total = 0;
  for (const RedistributeStep& s : steps) total += s.send_bytes;
  return total;
}

std::string RedistributePlan::ToString() const {
  std::string s = absl::StrCat(PlacementsString(from), " -> ", PlacementsString(to), ":");
  if (steps.empty()) absl::StrAppend(&s, " (no communication)");
  for (const RedistributeStep& step : steps) absl::StrAppend(&s, "\n  ", step.ToString());
  return s;
}

absl::StatusOr<RedistributePlan> PlanRedistribute(const MeshPosition& position,
                                                  absl::Span<const int64_t> global_shape,
                                                  DType dtype, Placements current,
                                                  Placements target) {
  const int64_t ndim = static_cast<int64_t>(position.shape.size());
  if (static_cast<int64_t>(position.coordinate.size()) != ndim) {
    return absl::InvalidArgumentError(
        absl::StrCat("PlanRedistribute: mesh shape ", ShapeString(position.shape),
                     " and coordinate ", ShapeString(position.coordinate), " differ in rank"));
  }
  for (int64_t i = 0; i < ndim; ++i) {
    if (position.shape[i] < 1 || position.coordinate[i] < 0 ||
        position.coordinate[i] >= position.shape[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("PlanRedistribute: coordinate ", ShapeString(position.coordinate),
                       " is outside mesh shape ", ShapeString(position.shape)));
    }
  }
  const int64_t rank = static_cast<int64_t>(global_shape.size());
  TPX_RETURN_IF_ERROR(ValidatePlacements(current, ndim, rank));
  TPX_RETURN_IF_ERROR(ValidatePlacements(target, ndim, rank));

  std::vector<Transition> transitions = Decompose(current, target);
  std::stable_sort(
      transitions.begin(), transitions.end(),
      [](const Transition& a, const Transition& b) { return OrderKey(a) < OrderKey(b); });

  RedistributePlan plan;
  plan.from = current;
  plan.to = target;
  Placements state = current;
  Shape local = LocalShape(global_shape, state, position);
  const int64_t elem = static_cast<int64_t>(SizeOf(dtype));
  for (const Transition& t : transitions) {
    const int64_t i = t.mesh_dim;
    const int64_t n = position.shape[i];
    const int64_t c = position.coordinate[i];
    // The extent of tensor dim d that mesh dim i cuts, given the cuts that
    // are in place now; no inner mesh dim may cut d at this point.
    auto extent = [&](int64_t d) -> absl::StatusOr<int64_t> {
      for (int64_t k = i + 1; k < ndim; ++k) {
        if (state[k].is_shard_of(d)) {
          return absl::InternalError(absl::StrCat(
              "PlanRedistribute ", PlacementsString(current), " -> ", PlacementsString(target),
              ": mesh dim ", k, " still cuts tensor dim ", d, " at a step on mesh dim ", i));
        }
      }
      return LocalRanges(global_shape, state, position, i)[d].length;
    };
    RedistributeStep step;
    step.mesh_dim = i;
    step.from = t.from;
    step.to = t.to;
    step.input_shape = local;
    step.output_shape = local;
    if (t.from.is_shard() && t.to.is_replicate()) {
      step.kind = StepKind::kAllGather;
      step.gather_dim = t.from.shard_dim();
      TPX_ASSIGN_OR_RETURN(int64_t e, extent(step.gather_dim));
      step.gather_sizes = ops::SplitSizes(e, n);
      step.output_shape[step.gather_dim] = e;
    } else if (t.from.is_partial() && t.to.is_replicate()) {
      step.kind = StepKind::kAllReduce;
    } else if (t.to.is_shard() && !t.from.is_shard()) {
      step.kind = t.from.is_partial() ? StepKind::kReduceScatter : StepKind::kLocalSlice;
      step.split_dim = t.to.shard_dim();
      TPX_ASSIGN_OR_RETURN(int64_t e, extent(step.split_dim));
      step.split_sizes = ops::SplitSizes(e, n);
      step.output_shape[step.split_dim] = step.split_sizes[c];
    } else if (t.from.is_shard() && t.to.is_shard()) {
      step.kind = StepKind::kAllToAll;
      step.gather_dim = t.from.shard_dim();
      step.split_dim = t.to.shard_dim();
      TPX_ASSIGN_OR_RETURN(int64_t ea, extent(step.gather_dim));
      TPX_ASSIGN_OR_RETURN(int64_t eb, extent(step.split_dim));
      step.gather_sizes = ops::SplitSizes(ea, n);
      step.split_sizes = ops::SplitSizes(eb, n);
      step.output_shape[step.gather_dim] = ea;
      step.output_shape[step.split_dim] = step.split_sizes[c];
    } else if (t.from.is_replicate() && t.to.is_partial()) {
      step.kind = StepKind::kLocalPartial;
      if (t.to.reduce_op() == comm::ReduceOp::kSum) step.scale = 1.0 / static_cast<double>(n);
    } else {
      return absl::InternalError(absl::StrCat("PlanRedistribute: no step for ", t.from.ToString(),
                                              " -> ", t.to.ToString()));
    }
    if (IsCollective(step.kind)) {
      step.send_bytes = NumElements(step.input_shape) * elem;
      step.recv_bytes = NumElements(step.output_shape) * elem;
    }
    state[i] = t.to;
    local = step.output_shape;
    plan.steps.push_back(std::move(step));
  }
  if (state != target || local != LocalShape(global_shape, target, position)) {
    return absl::InternalError(absl::StrCat(
        "PlanRedistribute ", PlacementsString(current), " -> ", PlacementsString(target),
        " ended at ", PlacementsString(state), " with local shape ", ShapeString(local)));
  }
  return plan;
}

Placements BackwardTargetPlacements(absl::Span<const Placement> grad_placements,
                                    absl::Span<const Placement> input_placements) {
  Placements out;
  for (size_t i = 0; i < input_placements.size(); ++i) {
    const bool grad_partial = i < grad_placements.size() && grad_placements[i].is_partial();
    if (!grad_partial && input_placements[i].is_partial()) {
      out.push_back(Replicate());
    } else {
      out.push_back(input_placements[i]);
    }
  }
  return out;
}

}  // namespace tpx::dtensor
