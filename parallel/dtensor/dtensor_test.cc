// Multi-rank DTensor tests: real processes over the UCX plugin. Every pair of
// placements on 1-D meshes of 1-4 ranks and on a 2x2 mesh is redistributed
// forward and backward and compared with pieces cut from a global tensor by
// the test itself (nested ops::Chunk), for even and uneven shapes.
#include "parallel/dtensor/dtensor.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/engine.h"
#include "core/autograd/variable.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "parallel/dtensor/device_mesh.h"
#include "parallel/dtensor/placement.h"
#include "parallel/dtensor/redistribute_plan.h"
#include "testing/multiprocess.h"

namespace tpx::dtensor {
namespace {

using comm::ReduceOp;
using testing::RankContext;

// Small integers, so that sums, averages and the checks below are exact.
Tensor IntegerTensor(const Shape& shape, int seed) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + seed * 3) % 11) - 5.0f;
  return *Tensor::FromVector<float>(v, shape);
}

// This rank's piece of `global` under the shards of `p` (Partial ignored),
// cut independently of the library's layout code: chunk mesh dim by mesh dim.
Tensor Piece(const Tensor& global, const Placements& p, const DeviceMesh& mesh) {
  Tensor t = global;
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (!p[i].is_shard()) continue;
    t = (*ops::Chunk(t, mesh.size(i), p[i].shard_dim()))[mesh.coordinate()[i]];
  }
  return *t.Clone();
}

// A contribution of coordinate c of n whose reduction over c gives v.
Tensor Contribution(const Tensor& v, ReduceOp op, int64_t c, int64_t n) {
  switch (op) {
    case ReduceOp::kSum:  // v - 3 (n - 1) on c == 0, 3 elsewhere
      return c == 0 ? *ops::AddScalar(v, -3.0 * (n - 1)) : *ops::AddScalar(*ops::Scale(v, 0), 3);
    case ReduceOp::kAvg:
      return *ops::AddScalar(v, 2.0 * (2 * c - (n - 1)));
    case ReduceOp::kMax:
      return c == 0 ? v : *ops::AddScalar(v, -5.0 - c);
    case ReduceOp::kMin:
      return c == 0 ? v : *ops::AddScalar(v, 5.0 + c);
    default:
      return Tensor();
  }
}

// A local tensor whose DTensor with placements `p` has the value `global`.
Tensor MakeLocal(const Tensor& global, const Placements& p, const DeviceMesh& mesh) {
  Tensor t = Piece(global, p, mesh);
  for (int64_t i = mesh.ndim() - 1; i >= 0; --i) {
    if (p[i].is_partial())
      t = Contribution(t, p[i].reduce_op(), mesh.coordinate()[i], mesh.size(i));
  }
  return t;
}

// Reduces the Partial mesh dims of `local` with plain all-reduces (the
// placements in these tests use one reduction op each, so order is free).
Tensor ReducePartials(const Tensor& local, const Placements& p, const DeviceMesh& mesh) {
  Tensor t = *local.Clone();
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (p[i].is_partial()) {
      EXPECT_TRUE(mesh.group(i).AllReduce(t, p[i].reduce_op()).Wait().ok());
    }
  }
  return t;
}

// Forward and backward of every (src, dst) pair, plus Distribute/FromLocal
// for every src, on one mesh and one global shape.
// bf16 runs check the forward with a tolerance (Replicate -> Partial(sum)
// divides by the group size); gradients are exact in every dtype.
void CheckAllPairs(const DeviceMesh& mesh, const std::vector<Placements>& lists, const Shape& shape,
                   DType dtype = DType::kF32) {
  const Tensor global = *IntegerTensor(shape, 1).To(dtype);
  const Tensor grad = *IntegerTensor(shape, 2).To(dtype);
  const double tol = dtype == DType::kF32 ? 1e-6 : 2e-2;
  for (const Placements& src : lists) {
    SCOPED_TRACE(absl::StrCat("shape ", ShapeString(shape), " src ", PlacementsString(src)));
    // Distribute: a differentiable cut of the global tensor.
    Variable whole(global, /*requires_grad=*/true);
    absl::StatusOr<DTensor> d = DTensor::Distribute(whole, mesh, src);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->shape(), shape);
    EXPECT_TRUE(TensorsClose(ReducePartials(d->ToLocal().value(), src, mesh),
                             Piece(global, src, mesh), tol, tol));
    ASSERT_TRUE(Backward(d->ToLocal(), Piece(grad, PartialAsReplicate(src), mesh)).ok());
    EXPECT_TRUE(TensorsClose(whole.grad(), grad, 0, 0));
    // FromLocal infers the (uneven) global shape.
    absl::StatusOr<DTensor> inferred =
        DTensor::FromLocal(Variable(MakeLocal(global, src, mesh)), mesh, src);
    ASSERT_TRUE(inferred.ok()) << inferred.status();
    EXPECT_EQ(inferred->shape(), shape);

    for (const Placements& dst : lists) {
      SCOPED_TRACE(absl::StrCat("dst ", PlacementsString(dst)));
      Variable x(MakeLocal(global, src, mesh), /*requires_grad=*/true);
      absl::StatusOr<DTensor> in = DTensor::FromLocal(x, mesh, src, shape);
      ASSERT_TRUE(in.ok()) << in.status();
      absl::StatusOr<DTensor> out = in->Redistribute(dst);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->placements(), dst);
      EXPECT_EQ(out->ToLocal().shape(), LocalShape(shape, dst, mesh.position()));
      EXPECT_EQ(out->dtype(), dtype);
      EXPECT_TRUE(TensorsClose(ReducePartials(out->ToLocal().value(), dst, mesh),
                               Piece(global, dst, mesh), tol, tol));
      // Gradients are laid out with Partial read as Replicate: the incoming
      // one is the output's piece of `grad`, the input's the input's piece.
      ASSERT_TRUE(Backward(out->ToLocal(), Piece(grad, PartialAsReplicate(dst), mesh)).ok());
      ASSERT_TRUE(x.grad().defined());
      EXPECT_TRUE(TensorsClose(x.grad(), Piece(grad, PartialAsReplicate(src), mesh), 0, 0));
    }
  }
}

// Backward with a gradient DTensor in every layout (Partial ones hold
// per-rank contributions): the input's gradient is the same as with the
// gradient given in the output's own gradient layout.
void CheckGradientLayouts(const DeviceMesh& mesh, const std::vector<Placements>& lists,
                          const Shape& shape) {
  const Tensor global = IntegerTensor(shape, 1);
  const Tensor grad = IntegerTensor(shape, 2);
  for (const Placements& src : lists) {
    for (const Placements& dst : lists) {
      for (const Placements& grad_layout : lists) {
        SCOPED_TRACE(absl::StrCat(PlacementsString(src), " -> ", PlacementsString(dst),
                                  ", gradient ", PlacementsString(grad_layout)));
        Variable x(MakeLocal(global, src, mesh), /*requires_grad=*/true);
        absl::StatusOr<DTensor> out = DTensor::FromLocal(x, mesh, src, shape)->Redistribute(dst);
        ASSERT_TRUE(out.ok()) << out.status();
        absl::StatusOr<DTensor> dy =
            DTensor::FromLocal(Variable(MakeLocal(grad, grad_layout, mesh)), mesh, grad_layout,
                               shape);
        ASSERT_TRUE(dy.ok()) << dy.status();
        ASSERT_TRUE(Backward(*out, *dy).ok());
        ASSERT_TRUE(x.grad().defined());
        EXPECT_TRUE(TensorsClose(x.grad(), Piece(grad, PartialAsReplicate(src), mesh), 0, 0));
      }
    }
  }
  // A gradient of another global shape is an error, on every rank alike.
  Variable x(Piece(global, lists[0], mesh), /*requires_grad=*/true);
  absl::StatusOr<DTensor> out = DTensor::FromLocal(x, mesh, lists[0], shape);
  Shape other = shape;
  other[1] += 1;
  absl::StatusOr<DTensor> wrong =
      DTensor::Distribute(IntegerTensor(other, 2), mesh, Placements(mesh.ndim(), Replicate()));
  ASSERT_TRUE(out.ok() && wrong.ok());
  absl::Status s = Backward(*out, *wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("same global shape"), std::string::npos) << s;
}

// Shard(a) -> Shard(b) on mesh dim `mesh_dim` is exactly one all_to_all and
// gives what gathering then cutting gives.
void CheckAllToAll(const DeviceMesh& mesh, const Shape& shape, const Placements& src,
                   const Placements& dst, const Placements& via) {
  SCOPED_TRACE(absl::StrCat(PlacementsString(src), " -> ", PlacementsString(dst), " shape ",
                            ShapeString(shape)));
  const Tensor global = IntegerTensor(shape, 3);
  absl::StatusOr<DTensor> in = DTensor::Distribute(global, mesh, src);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<RedistributePlan> plan = in->PlanRedistribute(dst);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t changed = 0;
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (src[i] == dst[i]) continue;
    ++changed;
    EXPECT_EQ(plan->Count(StepKind::kAllToAll, i), 1) << plan->ToString();
  }
  EXPECT_EQ(plan->NumCollectives(), changed) << plan->ToString();
  EXPECT_EQ(plan->Count(StepKind::kAllGather), 0) << plan->ToString();

  absl::StatusOr<DTensor> direct = in->Redistribute(dst);
  ASSERT_TRUE(direct.ok()) << direct.status();
  absl::StatusOr<DTensor> gathered = in->Redistribute(via);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  absl::StatusOr<DTensor> two_step = gathered->Redistribute(dst);
  ASSERT_TRUE(two_step.ok()) << two_step.status();
  EXPECT_TRUE(TensorsClose(direct->ToLocal().value(), two_step->ToLocal().value(), 0, 0));
  EXPECT_TRUE(TensorsClose(direct->ToLocal().value(), Piece(global, dst, mesh), 0, 0));
}

std::vector<Placements> OneDimLists() {
  return {{Replicate()},
          {Shard(0)},
          {Shard(1)},
          {Partial(ReduceOp::kSum)},
          {Partial(ReduceOp::kAvg)},
          {Partial(ReduceOp::kMax)},
          {Partial(ReduceOp::kMin)}};
}

// Every rank checks that the others issue the same collectives.
testing::RunOptions DebugChecks() {
  testing::RunOptions options;
  options.debug_checks = true;
  return options;
}

void RunOneDim(int n) {
  testing::RunOnRanks(n, [n](RankContext& ctx) {
    absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(ctx.comm, {n});
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    std::vector<Shape> shapes = {{2 * n, n}, {n + 1, 2 * n + 1}};
    if (n > 1) shapes.push_back({n - 1, n + 1});  // a dim smaller than the mesh
    for (const Shape& shape : shapes) CheckAllPairs(*mesh, OneDimLists(), shape);
    CheckAllPairs(*mesh, OneDimLists(), {n + 1, 2 * n + 1}, DType::kBF16);
    CheckGradientLayouts(*mesh, OneDimLists(), {n + 1, 2 * n + 1});
    CheckAllToAll(*mesh, {2 * n + 1, n + 2}, {Shard(0)}, {Shard(1)}, {Replicate()});
    CheckAllToAll(*mesh, {n + 2, 3, 2 * n - 1}, {Shard(2)}, {Shard(0)}, {Replicate()});
  }, DebugChecks());
}

TEST(DTensorOneDimMesh, AllPlacementPairsOn1Rank) { RunOneDim(1); }
TEST(DTensorOneDimMesh, AllPlacementPairsOn2Ranks) { RunOneDim(2); }
TEST(DTensorOneDimMesh, AllPlacementPairsOn3Ranks) { RunOneDim(3); }
TEST(DTensorOneDimMesh, AllPlacementPairsOn4Ranks) { RunOneDim(4); }

TEST(DTensorTwoByTwoMesh, MeshAllPlacementPairsAndErrors) {
  testing::RunOnRanks(4, [](RankContext& ctx) {
    absl::StatusOr<DeviceMesh> bad = DeviceMesh::Create(ctx.comm, {3});
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();

    absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(ctx.comm, {2, 2}, {"dp", "tp"});
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int r = ctx.rank;
    EXPECT_EQ(mesh->coordinate(), (std::vector<int64_t>{r / 2, r % 2}));
    EXPECT_EQ(*mesh->DimIndex("tp"), 1);
    EXPECT_EQ(mesh->DimIndex("pp").status().code(), absl::StatusCode::kNotFound);
    // The tp group joins ranks {0, 1} and {2, 3}; the dp group {0, 2} and {1, 3}.
    int64_t sum = r;
    ASSERT_TRUE((*mesh->group("tp"))->AllReduce(&sum, 1, DType::kI64, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(sum, (r / 2) * 4 + 1);
    sum = r;
    ASSERT_TRUE(mesh->group(0).AllReduce(&sum, 1, DType::kI64, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(sum, 2 * (r % 2) + 2);
    absl::StatusOr<DeviceMesh> tp = mesh->SubMesh("tp");
    ASSERT_TRUE(tp.ok()) << tp.status();
    EXPECT_EQ(tp->shape(), (std::vector<int64_t>{2}));
    EXPECT_EQ(tp->ranks(), (std::vector<int64_t>{2 * (r / 2), 2 * (r / 2) + 1}));
    EXPECT_EQ(tp->coordinate(), (std::vector<int64_t>{r % 2}));
    EXPECT_TRUE(*tp != *mesh);
    const std::vector<std::string> swapped = {"tp", "dp"};
    absl::StatusOr<DeviceMesh> transposed = mesh->SubMesh(swapped);
    ASSERT_TRUE(transposed.ok()) << transposed.status();
    EXPECT_EQ(transposed->shape(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(transposed->coordinate(), (std::vector<int64_t>{r % 2, r / 2}));
    EXPECT_EQ(transposed->ranks(), (std::vector<int64_t>{0, 2, 1, 3}));
    EXPECT_EQ(&transposed->group(0), &mesh->group(1));
    const std::vector<std::string> twice = {"tp", "tp"};
    EXPECT_EQ(mesh->SubMesh(twice).status().code(), absl::StatusCode::kInvalidArgument);

    // Errors: invalid placements, a local piece that does not fit, another mesh.
    const Tensor g = IntegerTensor({3, 5}, 4);
    absl::StatusOr<DTensor> e = DTensor::Distribute(g, *mesh, {Shard(2), Replicate()});
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("S(2)"), absl::string_view::npos) << e.status();
    e = DTensor::Distribute(g, *mesh, {Shard(0)});
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
    e = DTensor::FromLocal(Variable(g), *mesh, {Shard(0), Replicate()}, Shape{3, 5});
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
    absl::StatusOr<DTensor> ok = DTensor::Distribute(g, *mesh, {Shard(0), Replicate()});
    ASSERT_TRUE(ok.ok()) << ok.status();
    e = ok->Redistribute(*tp, {Replicate()});
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << e.status();
    e = ok->Redistribute(*mesh, {Replicate(), Shard(1)});
    EXPECT_TRUE(e.ok()) << e.status();
    absl::StatusOr<Variable> full = ok->FullTensor();
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(TensorsClose(full->value(), g, 0, 0));

    // Every pair of 2-D placements with one Partial op per list.
    std::vector<Placements> lists;
    const std::vector<Placement> base = {Replicate(), Shard(0), Shard(1)};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<Placement> choices = base;
      choices.push_back(Partial(op));
      for (const Placement& a : choices) {
        for (const Placement& b : choices) {
          if (op != ReduceOp::kSum && !a.is_partial() && !b.is_partial()) continue;
          lists.push_back({a, b});
        }
      }
    }
    for (const Shape& shape : {Shape{4, 4}, Shape{3, 5}}) CheckAllPairs(*mesh, lists, shape);

    CheckAllToAll(*mesh, {5, 7}, {Shard(0), Replicate()}, {Shard(1), Replicate()},
                  {Replicate(), Replicate()});
    CheckAllToAll(*mesh, {5, 7}, {Replicate(), Shard(0)}, {Replicate(), Shard(1)},
                  {Replicate(), Replicate()});
    CheckAllToAll(*mesh, {5, 7}, {Shard(0), Shard(1)}, {Shard(0), Shard(0)},
                  {Shard(0), Replicate()});
    CheckAllToAll(*mesh, {5, 3, 7, 2}, {Shard(0), Shard(2)}, {Shard(1), Shard(3)},
                  {Replicate(), Replicate()});
  }, DebugChecks());
}

}  // namespace
}  // namespace tpx::dtensor
