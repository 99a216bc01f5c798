// Multi-rank tests of parallel state, utilities, every mapping pair and the
// variable-size primitives: forward outputs and input gradients are compared
// with values computed locally from the full tensors every rank can rebuild.
// One case per mapping and TP size (e.g. Parallel/Mappings.AllToAllSp2Hp/Tp4),
// each a usage example of that mapping.
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/engine.h"
#include "core/autograd/variable.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "parallel/mappings.h"
#include "parallel/parallel_state.h"
#include "parallel/shard_comm.h"
#include "parallel/utils.h"
#include "parallel/v_primitives.h"
#include "testing/multiprocess.h"

namespace tpx::parallel {
namespace {

using Sizes = std::vector<int64_t>;
using tpx::testing::RankContext;
using tpx::testing::RunOnRanks;

Tensor Piece(const Tensor& t, int64_t dim, const Sizes& sizes, int r) {
  return *PieceAlongDim(t, dim, sizes, r);
}
Tensor Scaled(const Tensor& t, double s) { return *ops::Scale(t, s); }
Sizes Equal(int64_t n, int parts) { return Sizes(static_cast<size_t>(parts), n / parts); }
std::string TpName(const ::testing::TestParamInfo<int>& info) {
  return absl::StrCat("Tp", info.param);
}

// y = mapping(x); Backward(y, dy); checks y and x.grad.
template <typename MappingFn>
void CheckPair(MappingFn mapping, const Tensor& x, const Tensor& expected_y, const Tensor& dy,
               const Tensor& expected_dx) {
  Variable xv(x, true);
  absl::StatusOr<Variable> y = mapping(xv);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(TensorsClose(y->value(), expected_y, 1e-5, 1e-5));
  ASSERT_TRUE(Backward(*y, dy).ok());
  EXPECT_TRUE(TensorsClose(xv.grad(), expected_dx, 1e-5, 1e-5));
}

// The full tensors every rank rebuilds from seeds, and how they split.
struct Full {
  explicit Full(const RankContext& ctx) : n(ctx.size), r(ctx.rank) {}
  const int n, r;
  const double tri = n * (n + 1) / 2.0;  // sum over ranks of (rank + 1)
  // Uneven shapes: 5 rows, 7 columns, split as evenly as they go.
  const Tensor X = RandomTensor({5, 7}, DType::kF32, 1);
  const Tensor G = RandomTensor({5, 7}, DType::kF32, 2);
  const Sizes cols = ops::SplitSizes(7, n), rows = ops::SplitSizes(5, n);
  // Equal splits (Megatron's default) on 3-D tensors [12, 2, 12].
  const Tensor Y = RandomTensor({12, 2, 12}, DType::kF32, 3);
  const Tensor H = RandomTensor({12, 2, 12}, DType::kF32, 4);
  const Sizes eq = Equal(12, n);
};

// Each mapping at TP = 1..4: rank r's input and upstream gradient, and the
// slice of the full tensors its output and input gradient must equal. Read
// a case as: this rank holds `x`; mapping(x) is `expected_y`; backward of
// `dy` gives `expected_dx`.
class Mappings : public ::testing::TestWithParam<int> {};

TEST_P(Mappings, CopyToTensorParallelRegion) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return CopyToTensorParallelRegion(ctx.comm, v); }, f.X,
              f.X, Scaled(f.G, f.r + 1), Scaled(f.G, f.tri));
  });
}

TEST_P(Mappings, ReduceFromTensorParallelRegion) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return ReduceFromTensorParallelRegion(ctx.comm, v); },
              Scaled(f.X, f.r + 1), Scaled(f.X, f.tri), f.G, f.G);
  });
}

TEST_P(Mappings, ScatterToTensorParallelRegionUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) { return ScatterToTensorParallelRegion(ctx.comm, v, f.cols); },
        f.X, Piece(f.X, 1, f.cols, f.r), Piece(f.G, 1, f.cols, f.r), f.G);
  });
}

TEST_P(Mappings, GatherFromTensorParallelRegionUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) { return GatherFromTensorParallelRegion(ctx.comm, v, f.cols); },
        Piece(f.X, 1, f.cols, f.r), f.X, f.G, Piece(f.G, 1, f.cols, f.r));
  });
}

TEST_P(Mappings, ScatterToSequenceParallelRegionUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) { return ScatterToSequenceParallelRegion(ctx.comm, v, f.rows); },
        f.X, Piece(f.X, 0, f.rows, f.r), Piece(f.G, 0, f.rows, f.r), f.G);
  });
}

// With tensor_parallel_output_grad: the backward reduce-scatters.
TEST_P(Mappings, GatherFromSequenceParallelRegionUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) {
          return GatherFromSequenceParallelRegion(ctx.comm, v, true, f.rows);
        },
        Piece(f.X, 0, f.rows, f.r), f.X, Scaled(f.G, f.r + 1),
        Scaled(Piece(f.G, 0, f.rows, f.r), f.tri));
  });
}

// Without tensor_parallel_output_grad: the backward only splits.
TEST_P(Mappings, GatherFromSequenceParallelRegionWithoutTpOutputGrad) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) {
          return GatherFromSequenceParallelRegion(ctx.comm, v, false, f.rows);
        },
        Piece(f.X, 0, f.rows, f.r), f.X, Scaled(f.G, f.r + 1),
        Scaled(Piece(f.G, 0, f.rows, f.r), f.r + 1));
  });
}

TEST_P(Mappings, ReduceScatterToSequenceParallelRegionUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) {
          return ReduceScatterToSequenceParallelRegion(ctx.comm, v, f.rows);
        },
        Scaled(f.X, f.r + 1), Scaled(Piece(f.X, 0, f.rows, f.r), f.tri),
        Piece(f.G, 0, f.rows, f.r), f.G);
  });
}

TEST_P(Mappings, AllGatherLastDimUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return AllGatherLastDim(ctx.comm, v, f.cols); },
              Piece(f.X, 1, f.cols, f.r), f.X, Scaled(f.G, f.r + 1),
              Scaled(Piece(f.G, 1, f.cols, f.r), f.tri));
  });
}

TEST_P(Mappings, ReduceScatterLastDimUneven) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return ReduceScatterLastDim(ctx.comm, v, f.cols); },
              Scaled(f.X, f.r + 1), Scaled(Piece(f.X, 1, f.cols, f.r), f.tri),
              Piece(f.G, 1, f.cols, f.r), f.G);
  });
}

TEST_P(Mappings, GatherFromTensorParallelRegionEqual) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return GatherFromTensorParallelRegion(ctx.comm, v); },
              Piece(f.Y, 2, f.eq, f.r), f.Y, f.H, Piece(f.H, 2, f.eq, f.r));
  });
}

TEST_P(Mappings, ReduceScatterToSequenceParallelRegionEqual) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair(
        [&](const Variable& v) { return ReduceScatterToSequenceParallelRegion(ctx.comm, v); },
        Scaled(f.Y, f.r + 1), Scaled(Piece(f.Y, 0, f.eq, f.r), f.tri), Piece(f.H, 0, f.eq, f.r),
        f.H);
  });
}

// Sequence-parallel [s/n, b, h] -> head-parallel [s, b, h/n], and back.
TEST_P(Mappings, AllToAllSp2Hp) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return AllToAllSp2Hp(ctx.comm, v); },
              Piece(f.Y, 0, f.eq, f.r), Piece(f.Y, 2, f.eq, f.r), Piece(f.H, 2, f.eq, f.r),
              Piece(f.H, 0, f.eq, f.r));
  });
}

TEST_P(Mappings, AllToAllHp2Sp) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return AllToAllHp2Sp(ctx.comm, v); },
              Piece(f.Y, 2, f.eq, f.r), Piece(f.Y, 0, f.eq, f.r), Piece(f.H, 0, f.eq, f.r),
              Piece(f.H, 2, f.eq, f.r));
  });
}

// AllToAll with split sizes: rank i sends send(i, j) rows to rank j.
TEST_P(Mappings, AllToAllWithSplitSizes) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const int n = ctx.size, r = ctx.rank;
    auto send = [](int i, int j) -> int64_t { return (i + 2 * j) % 3; };
    std::vector<Tensor> xs, gs;
    for (int i = 0; i < n; ++i) {
      int64_t m = 0, k = 0;
      for (int j = 0; j < n; ++j) m += send(i, j), k += send(j, i);
      xs.push_back(RandomTensor({m, 3}, DType::kF32, 100 + i));
      gs.push_back(RandomTensor({k, 3}, DType::kF32, 200 + i));
    }
    auto row_sizes_of = [&](int i) {  // split of rank i's input by destination
      Sizes s;
      for (int j = 0; j < n; ++j) s.push_back(send(i, j));
      return s;
    };
    auto col_sizes_of = [&](int j) {  // split of rank j's output by source
      Sizes s;
      for (int i = 0; i < n; ++i) s.push_back(send(i, j));
      return s;
    };
    std::vector<Tensor> expect_y, expect_dx;
    for (int i = 0; i < n; ++i) {
      expect_y.push_back(Piece(xs[static_cast<size_t>(i)], 0, row_sizes_of(i), r));
    }
    for (int j = 0; j < n; ++j) {
      expect_dx.push_back(Piece(gs[static_cast<size_t>(j)], 0, col_sizes_of(j), r));
    }
    CheckPair(
        [&](const Variable& v) { return AllToAll(ctx.comm, v, col_sizes_of(r), row_sizes_of(r)); },
        xs[static_cast<size_t>(r)], *ops::Concat(expect_y, 0), gs[static_cast<size_t>(r)],
        *ops::Concat(expect_dx, 0));
  });
}

INSTANTIATE_TEST_SUITE_P(Parallel, Mappings, ::testing::Values(1, 2, 3, 4), TpName);

// The variable-size primitives at TP = 1..4, read the same way.
class VPrimitives : public ::testing::TestWithParam<int> {};

TEST_P(VPrimitives, AllGatherV) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return AllGatherV(ctx.comm, v, f.rows, 0); },
              Piece(f.X, 0, f.rows, f.r), f.X, Scaled(f.G, f.r + 1),
              Scaled(Piece(f.G, 0, f.rows, f.r), f.tri));
  });
}

// bf16 with the backward reduction in f32.
TEST_P(VPrimitives, AllGatherVBf16ReducesGradientsInF32) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    Tensor xb = *Piece(f.X, 1, f.cols, f.r).To(DType::kBF16);
    Tensor gb = *Scaled(f.G, f.r + 1).To(DType::kBF16);
    Variable v(xb, true);
    auto y = AllGatherV(ctx.comm, v, f.cols, 1, /*use_fp32=*/true);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsClose(y->value(), *f.X.To(DType::kBF16), 0, 0));
    ASSERT_TRUE(Backward(*y, gb).ok());
    EXPECT_EQ(v.grad().dtype(), DType::kBF16);
    EXPECT_TRUE(TensorsClose(*v.grad().To(DType::kF32), Scaled(Piece(f.G, 1, f.cols, f.r), f.tri),
                             2e-2, 2e-2));
  });
}

// Gather to the last rank: only the root's output holds the full tensor.
TEST_P(VPrimitives, GatherV) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    const int root = f.n - 1;
    CheckPair([&](const Variable& v) { return GatherV(ctx.comm, v, f.cols, 1, root); },
              Piece(f.X, 1, f.cols, f.r), f.r == root ? f.X : *Tensor::Empty({5, 0}),
              f.r == root ? f.G : *Tensor::Empty({5, 0}), Piece(f.G, 1, f.cols, f.r));
  });
}

// Scatter from rank 0: the other ranks' inputs are placeholders.
TEST_P(VPrimitives, ScatterV) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const Full f(ctx);
    CheckPair([&](const Variable& v) { return ScatterV(ctx.comm, v, f.rows, 0, 0); },
              f.r == 0 ? f.X : *Tensor::Zeros({1, 7}), Piece(f.X, 0, f.rows, f.r),
              Piece(f.G, 0, f.rows, f.r), f.r == 0 ? f.G : *Tensor::Zeros({1, 7}));
  });
}

// IndexedAllToAllV: rank i sends rows idx(i, j) of x_i to rank j.
TEST_P(VPrimitives, IndexedAllToAllV) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const int n = ctx.size, r = ctx.rank;
    auto count = [](int i, int j) -> int64_t { return (i + 2 * j) % 3 + (i == j ? 1 : 0); };
    auto idx = [&](int i, int j) {
      std::vector<int64_t> v;
      for (int64_t k = 0; k < count(i, j); ++k) v.push_back((k * (j + 1) + i) % (4 + i));
      return *Tensor::FromVector<int64_t>(v, {static_cast<int64_t>(v.size())});
    };
    std::vector<std::vector<int64_t>> sizes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) sizes[static_cast<size_t>(i)].push_back(count(i, j));
    }
    std::vector<Tensor> xi, my_indices, pieces;
    for (int i = 0; i < n; ++i) xi.push_back(RandomTensor({4 + i, 3}, DType::kF32, 300 + i));
    for (int j = 0; j < n; ++j) my_indices.push_back(idx(r, j));
    for (int i = 0; i < n; ++i) {
      pieces.push_back(*ops::IndexSelect(xi[static_cast<size_t>(i)], 0, idx(i, r)));
    }
    Tensor expect = *ops::Concat(pieces, 0);
    // Gradients: g_j has one row per received row; rows from source r start
    // after those of sources < r.
    auto g_of = [&](int j) {
      int64_t m = 0;
      for (int i = 0; i < n; ++i) m += count(i, j);
      return RandomTensor({m, 3}, DType::kF32, 400 + j);
    };
    Tensor expect_grad = *Tensor::Zeros({4 + r, 3});
    for (int j = 0; j < n; ++j) {
      int64_t off = 0;
      for (int i = 0; i < r; ++i) off += count(i, j);
      Tensor rows_from_me = *g_of(j).Narrow(0, off, count(r, j));
      ASSERT_TRUE(ops::IndexAdd(expect_grad, 0, idx(r, j), rows_from_me).ok());
    }
    CheckPair([&](const Variable& v) { return IndexedAllToAllV(ctx.comm, v, my_indices, sizes); },
              xi[static_cast<size_t>(r)], expect, g_of(r), expect_grad);
  });
}

INSTANTIATE_TEST_SUITE_P(Parallel, VPrimitives, ::testing::Values(1, 2, 3, 4), TpName);

// Errors that must be clear (TP > 1): 7 columns do not split evenly, and
// split sizes that do not match the group size are refused.
class MappingErrors : public ::testing::TestWithParam<int> {};

TEST_P(MappingErrors, UnevenSplitsWithoutSizesAndWrongSizesAreRefused) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const int n = ctx.size;
    Variable odd(*Tensor::Zeros({5, 7}), true);
    if (7 % n != 0) {
      auto s = ScatterToTensorParallelRegion(ctx.comm, odd);
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.status().message().find("not divisible"), absl::string_view::npos)
          << s.status();
    }
    auto bad = GatherFromTensorParallelRegion(ctx.comm, odd, Sizes{1});
    EXPECT_FALSE(bad.ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Parallel, MappingErrors, ::testing::Values(2, 3, 4), TpName);

void StateAndUtilsBody(RankContext& ctx) {
  comm::Communicator& c = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  for (int tp = 1; tp <= n; ++tp) {
    auto state = ParallelState::Create(c, tp);
    if (n % tp != 0) {
      ASSERT_FALSE(state.ok());
      EXPECT_NE(state.status().message().find("not divisible"), absl::string_view::npos);
      continue;
    }
    ASSERT_TRUE(state.ok()) << state.status();
    ParallelState& s = **state;
    EXPECT_EQ(s.tensor_parallel_size(), tp);
    EXPECT_EQ(s.tensor_parallel_rank(), r % tp);  // tp ranks contiguous
    EXPECT_EQ(s.data_parallel_size(), n / tp);
    EXPECT_EQ(s.data_parallel_rank(), r / tp);
    auto by_name = s.Group("dp");
    ASSERT_TRUE(by_name.ok());
    EXPECT_EQ(*by_name, &s.dp());
    EXPECT_FALSE(s.Group("cp").ok());
    // The tp group really contains the contiguous ranks: sum of world ranks.
    int32_t v = r;
    ASSERT_TRUE(s.tp().AllReduce(&v, 1, DType::kI32, comm::ReduceOp::kSum).Wait().ok());
    const int first = (r / tp) * tp;
    EXPECT_EQ(v, tp * first + tp * (tp - 1) / 2);
    auto extra = c.Split(0, r);
    ASSERT_TRUE(extra.ok());
    auto h = s.AddGroup("all", std::move(*extra));
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(s.group(*h).size(), n);
  }

  // Utilities.
  EXPECT_EQ(*Divide(12, 4), 3);
  auto bad = Divide(10, 4, "hidden by tp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("10 is not divisible by 4"), absl::string_view::npos);
  const Tensor X = RandomTensor({3, 12}, DType::kF32, 5);
  auto parts = SplitTensorAlongLastDim(X, 4, true);
  ASSERT_TRUE(parts.ok());
  EXPECT_TRUE(TensorsClose((*parts)[2], *X.Narrow(1, 6, 3)));
  EXPECT_FALSE(SplitTensorAlongLastDim(X, 5).ok());
  if (36 % n == 0) {
    Tensor chunk = *SplitTensorInto1DEqualChunks(X, r, n);
    EXPECT_EQ(chunk.numel(), 36 / n);
    auto back = GatherSplit1DTensor(c, chunk);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(TensorsClose(*back, *X.Reshape({36})));
  }
  VocabRange vr = VocabUtility::RangeFromPerPartitionVocabSize(10, r, n);
  EXPECT_EQ(vr.first, 10 * r);
  EXPECT_EQ(vr.last, 10 * (r + 1));
  auto g = VocabUtility::RangeFromGlobalVocabSize(12 * n, r, n);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->first, 12 * r);
  if (n > 1) {
    EXPECT_FALSE(VocabUtility::RangeFromGlobalVocabSize(12 * n + 1, r, n).ok());
  }
  std::map<std::string, Tensor> data;
  const Tensor tokens = *Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor labels = *Tensor::FromVector<int64_t>({7, 8}, {2});
  if (r == 0) data = {{"tokens", tokens}, {"labels", labels}};
  auto got = BroadcastData(c, {"tokens", "labels"}, data, DType::kI64);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsClose(got->at("tokens"), tokens, 0, 0));
  EXPECT_TRUE(TensorsClose(got->at("labels"), labels, 0, 0));
}

// Parallel state at every TP size that divides the world (1, 2, 4 ranks),
// and the utilities.
class ParallelStateAndUtilities : public ::testing::TestWithParam<int> {};

TEST_P(ParallelStateAndUtilities, GroupsAndHelpersMatchTheirDefinitions) {
  RunOnRanks(GetParam(), StateAndUtilsBody);
}

INSTANTIATE_TEST_SUITE_P(Parallel, ParallelStateAndUtilities, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("World", info.param);
                         });

}  // namespace
}  // namespace tpx::parallel
