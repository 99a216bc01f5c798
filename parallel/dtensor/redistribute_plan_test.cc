// Planner and placement tests: no communication, only the steps a
// redistribute would run.
#include "parallel/dtensor/redistribute_plan.h"

#include <vector>

#include "gtest/gtest.h"
#include "parallel/dtensor/placement.h"

namespace tpx::dtensor {
namespace {

using comm::ReduceOp;

struct StepSummary {
  StepKind kind;
  int64_t mesh_dim;
  bool operator==(const StepSummary& o) const { return kind == o.kind && mesh_dim == o.mesh_dim; }
};

std::vector<StepSummary> Summary(const RedistributePlan& plan) {
  std::vector<StepSummary> out;
  for (const RedistributeStep& s : plan.steps) out.push_back({s.kind, s.mesh_dim});
  return out;
}

RedistributePlan Plan(MeshPosition pos, Shape shape, Placements from, Placements to) {
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(pos, shape, DType::kF32, from, to);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : RedistributePlan();
}

TEST(Placement, NamesAndValidation) {
  EXPECT_EQ(PlacementsString({Shard(1), Replicate(), Partial(ReduceOp::kMax)}),
            "[S(1), R, P(max)]");
  Placements p = {Shard(-1), Replicate()};
  ASSERT_TRUE(ValidatePlacements(p, 2, 3).ok());
  EXPECT_EQ(p[0], Shard(2));

  Placements wrong_count = {Shard(0)};
  absl::Status s = ValidatePlacements(wrong_count, 2, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("one placement per mesh dim"), absl::string_view::npos) << s;

  Placements out_of_range = {Shard(2)};
  s = ValidatePlacements(out_of_range, 1, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("shard dim out of range"), absl::string_view::npos) << s;

  Placements prod = {Partial(ReduceOp::kProd)};
  EXPECT_EQ(ValidatePlacements(prod, 1, 2).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Placement, LocalShapesNestRepeatedShardsAndFollowSplitSizes) {
  // Dim 0 of size 5 on a 2x2 mesh as [S(0), S(0)]: 5 -> {3, 2} -> {2, 1}, {1, 1}.
  const Placements p = {Shard(0), Shard(0)};
  EXPECT_EQ(LocalShape({5, 4}, p, {{2, 2}, {0, 0}}), (Shape{2, 4}));
  EXPECT_EQ(LocalShape({5, 4}, p, {{2, 2}, {0, 1}}), (Shape{1, 4}));
  EXPECT_EQ(LocalShape({5, 4}, p, {{2, 2}, {1, 0}}), (Shape{1, 4}));
  std::vector<ShardRange> r = LocalRanges({5, 4}, p, {{2, 2}, {1, 1}});
  EXPECT_EQ(r[0].offset, 4);
  EXPECT_EQ(r[0].length, 1);
  // A dim smaller than the mesh: the last pieces are empty.
  EXPECT_EQ(LocalShape({2, 3}, {Shard(0)}, {{4}, {3}}), (Shape{0, 3}));
  EXPECT_EQ(LocalShape({2, 3}, {Shard(0)}, {{4}, {1}}), (Shape{1, 3}));
}

TEST(PlanRedistribute, OneStepPerMeshDimChange) {
  const MeshPosition pos{{4}, {1}};
  RedistributePlan gather = Plan(pos, {10, 3}, {Shard(0)}, {Replicate()});
  ASSERT_EQ(gather.steps.size(), 1u);
  EXPECT_EQ(gather.steps[0].kind, StepKind::kAllGather);
  EXPECT_EQ(gather.steps[0].gather_sizes, (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(gather.steps[0].input_shape, (Shape{3, 3}));
  EXPECT_EQ(gather.steps[0].output_shape, (Shape{10, 3}));
  EXPECT_EQ(gather.steps[0].send_bytes, 3 * 3 * 4);
  EXPECT_EQ(gather.steps[0].recv_bytes, 10 * 3 * 4);

  EXPECT_EQ(Summary(Plan(pos, {10, 3}, {Partial()}, {Replicate()})),
            (std::vector<StepSummary>{{StepKind::kAllReduce, 0}}));
  RedistributePlan rs = Plan(pos, {10, 3}, {Partial(ReduceOp::kMax)}, {Shard(0)});
  EXPECT_EQ(Summary(rs), (std::vector<StepSummary>{{StepKind::kReduceScatter, 0}}));
  EXPECT_EQ(rs.steps[0].output_shape, (Shape{3, 3}));
  EXPECT_EQ(Summary(Plan(pos, {10, 3}, {Replicate()}, {Shard(1)})),
            (std::vector<StepSummary>{{StepKind::kLocalSlice, 0}}));

  RedistributePlan to_sum = Plan(pos, {10, 3}, {Replicate()}, {Partial()});
  ASSERT_EQ(Summary(to_sum), (std::vector<StepSummary>{{StepKind::kLocalPartial, 0}}));
  EXPECT_DOUBLE_EQ(to_sum.steps[0].scale, 0.25);
  EXPECT_EQ(to_sum.NumCollectives(), 0);
  EXPECT_DOUBLE_EQ(Plan(pos, {10, 3}, {Replicate()}, {Partial(ReduceOp::kAvg)}).steps[0].scale,
                   1.0);

  EXPECT_TRUE(Plan(pos, {10, 3}, {Shard(1)}, {Shard(1)}).steps.empty());
  EXPECT_EQ(Summary(Plan(pos, {10, 3}, {Shard(1)}, {Partial()})),
            (std::vector<StepSummary>{{StepKind::kAllGather, 0}, {StepKind::kLocalPartial, 0}}));
  EXPECT_EQ(Summary(Plan(pos, {10, 3}, {Partial()}, {Partial(ReduceOp::kMax)})),
            (std::vector<StepSummary>{{StepKind::kAllReduce, 0}, {StepKind::kLocalPartial, 0}}));
}

TEST(PlanRedistribute, ShardToShardIsOneAllToAllPerMeshDim) {
  RedistributePlan a2a = Plan({{3}, {2}}, {7, 5}, {Shard(0)}, {Shard(1)});
  ASSERT_EQ(Summary(a2a), (std::vector<StepSummary>{{StepKind::kAllToAll, 0}}));
  EXPECT_EQ(a2a.steps[0].gather_sizes, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(a2a.steps[0].split_sizes, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(a2a.steps[0].input_shape, (Shape{2, 5}));
  EXPECT_EQ(a2a.steps[0].output_shape, (Shape{7, 1}));

  const MeshPosition pos{{2, 2}, {1, 0}};
  EXPECT_EQ(Summary(Plan(pos, {5, 6}, {Shard(0), Replicate()}, {Shard(1), Replicate()})),
            (std::vector<StepSummary>{{StepKind::kAllToAll, 0}}));
  EXPECT_EQ(Summary(Plan(pos, {5, 6}, {Replicate(), Shard(0)}, {Replicate(), Shard(1)})),
            (std::vector<StepSummary>{{StepKind::kAllToAll, 1}}));
  // Both mesh dims change their shard dim, each on tensor dims no other mesh dim cuts.
  RedistributePlan both = Plan(pos, {5, 6, 7}, {Shard(0), Shard(2)}, {Shard(1), Shard(0)});
  EXPECT_EQ(both.Count(StepKind::kAllToAll), 0);  // mesh dim 1's target cuts dim 0: via R
  RedistributePlan both_ok = Plan(pos, {5, 6, 7, 3}, {Shard(0), Shard(2)}, {Shard(1), Shard(3)});
  EXPECT_EQ(both_ok.Count(StepKind::kAllToAll, 0), 1);
  EXPECT_EQ(both_ok.Count(StepKind::kAllToAll, 1), 1);
  EXPECT_EQ(both_ok.NumCollectives(), 2);
  // The outer cut of dim 0 is the same in both layouts: one all_to_all on mesh dim 1.
  EXPECT_EQ(Summary(Plan(pos, {5, 6}, {Shard(0), Shard(1)}, {Shard(0), Shard(0)})),
            (std::vector<StepSummary>{{StepKind::kAllToAll, 1}}));
}

TEST(PlanRedistribute, DecomposesViaReplicateInReplicateThenShardOrder) {
  const MeshPosition pos{{2, 2}, {0, 1}};
  // Swapping the cuts of two tensor dims: gather innermost first, then outer,
  // then cut outermost first.
  EXPECT_EQ(Summary(Plan(pos, {4, 6}, {Shard(0), Shard(1)}, {Shard(1), Shard(0)})),
            (std::vector<StepSummary>{{StepKind::kAllGather, 1},
                                      {StepKind::kAllGather, 0},
                                      {StepKind::kLocalSlice, 0},
                                      {StepKind::kLocalSlice, 1}}));
  // Mis-aligned repeated shard: mesh dim 1's S(0) is a sub-piece before and
  // the first cut after.
  RedistributePlan mis = Plan(pos, {5, 6}, {Shard(0), Shard(0)}, {Replicate(), Shard(0)});
  EXPECT_EQ(Summary(mis),
            (std::vector<StepSummary>{
                {StepKind::kAllGather, 1}, {StepKind::kAllGather, 0}, {StepKind::kLocalSlice, 1}}));
  EXPECT_EQ(mis.steps[0].gather_sizes, (std::vector<int64_t>{2, 1}));  // pieces of 3
  EXPECT_EQ(mis.steps[1].gather_sizes, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(mis.steps[2].split_sizes, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(mis.steps[2].output_shape, (Shape{2, 6}));
  // Aligned repeated shard: only the inner mesh dim moves.
  EXPECT_EQ(Summary(Plan(pos, {5, 6}, {Shard(0), Shard(0)}, {Shard(0), Replicate()})),
            (std::vector<StepSummary>{{StepKind::kAllGather, 1}}));
  EXPECT_EQ(Summary(Plan(pos, {5, 6}, {Replicate(), Replicate()}, {Shard(0), Shard(0)})),
            (std::vector<StepSummary>{{StepKind::kLocalSlice, 0}, {StepKind::kLocalSlice, 1}}));
  EXPECT_EQ(
      Summary(Plan(pos, {5, 6}, {Replicate(), Shard(0)}, {Shard(0), Shard(0)})),
      (std::vector<StepSummary>{
          {StepKind::kAllGather, 1}, {StepKind::kLocalSlice, 0}, {StepKind::kLocalSlice, 1}}));
}

TEST(PlanRedistribute, ErrorsNameThePlacements) {
  absl::StatusOr<RedistributePlan> bad =
      PlanRedistribute({{4}, {0}}, {4, 4}, DType::kF32, {Shard(0)}, {Shard(2)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("S(2)"), absl::string_view::npos) << bad.status();
  bad = PlanRedistribute({{2, 2}, {0, 0}}, {4, 4}, DType::kF32, {Shard(0)}, {Replicate()});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  bad = PlanRedistribute({{2}, {2}}, {4, 4}, DType::kF32, {Shard(0)}, {Replicate()});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackwardRule, PartialInputsGetReplicateGradients) {
  EXPECT_EQ(BackwardTargetPlacements({Shard(0)}, {Partial()}), (Placements{Replicate()}));
  EXPECT_EQ(BackwardTargetPlacements({Partial()}, {Partial()}), (Placements{Partial()}));
  EXPECT_EQ(BackwardTargetPlacements({Replicate(), Replicate()}, {Shard(1), Partial()}),
            (Placements{Shard(1), Replicate()}));

  const MeshPosition pos{{4}, {3}};
  // Forward Partial -> Shard is a reduce_scatter; its backward only gathers
  // (no Replicate -> Partial division).
  const Placements grad_of_shard = PartialAsReplicate({Shard(0)});
  RedistributePlan back =
      Plan(pos, {8, 2}, grad_of_shard, BackwardTargetPlacements(grad_of_shard, {Partial()}));
  EXPECT_EQ(Summary(back), (std::vector<StepSummary>{{StepKind::kAllGather, 0}}));
  // Forward Replicate -> Partial divides; its backward does nothing.
  const Placements grad_of_partial = PartialAsReplicate({Partial()});
  EXPECT_EQ(grad_of_partial, (Placements{Replicate()}));
  EXPECT_TRUE(
      Plan(pos, {8, 2}, grad_of_partial, BackwardTargetPlacements(grad_of_partial, {Replicate()}))
          .steps.empty());
}

TEST(PlanRedistribute, ToStringListsTheSteps) {
  RedistributePlan plan = Plan({{2}, {0}}, {4, 2}, {Shard(0)}, {Replicate()});
  EXPECT_EQ(plan.ToString(),
            "[S(0)] -> [R]:\n  all_gather on mesh dim 0: S(0) -> R, [2, 2] -> [4, 2], send 16 B, "
            "recv 32 B");
  EXPECT_EQ(Plan({{2}, {0}}, {4, 2}, {Replicate()}, {Replicate()}).ToString(),
            "[R] -> [R]: (no communication)");
}

}  // namespace
}  // namespace tpx::dtensor
