// Host-side logic of the NCCL backend that needs no GPU: which bytes each
// operation reads and writes (this decides what host memory is staged).
#include "comm_nccl/collectives.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpx::nccl {
namespace {

tpx_coll_args_v1_t Args(tpx_coll_kind_t kind, tpx_dtype_t dtype, int64_t count, int root = 0) {
  tpx_coll_args_v1_t a{};
  a.struct_size = sizeof(a);
  a.kind = kind;
  a.dtype = dtype;
  a.count = count;
  a.peer = root;
  return a;
}

TEST(OperandsOfTest, ReductionsAndBroadcast) {
  Operands o = OperandsOf(Args(TPX_COLL_ALL_REDUCE, TPX_DTYPE_BF16, 10), 0, 4);
  EXPECT_EQ(o.send_bytes, 20u);
  EXPECT_EQ(o.recv_bytes, 20u);
  o = OperandsOf(Args(TPX_COLL_BROADCAST, TPX_DTYPE_I64, 3, /*root=*/1), 2, 4);
  EXPECT_EQ(o.send_bytes, 0u);  // broadcast uses recv only
  EXPECT_EQ(o.recv_bytes, 24u);
  // Reduce: only the root writes.
  o = OperandsOf(Args(TPX_COLL_REDUCE, TPX_DTYPE_F32, 5, /*root=*/2), 1, 4);
  EXPECT_EQ(o.send_bytes, 20u);
  EXPECT_EQ(o.recv_bytes, 0u);
  o = OperandsOf(Args(TPX_COLL_REDUCE, TPX_DTYPE_F32, 5, /*root=*/2), 2, 4);
  EXPECT_EQ(o.recv_bytes, 20u);
  o = OperandsOf(Args(TPX_COLL_BARRIER, TPX_DTYPE_F32, 0), 0, 2);
  EXPECT_EQ(o.send_bytes + o.recv_bytes, 0u);
}

TEST(OperandsOfTest, VariableLayoutsUseTheFurthestBlockEnd) {
  // Blocks out of rank order with a gap and an empty contribution.
  const std::vector<int64_t> counts = {3, 0, 5}, displs = {10, 99, 0};
  tpx_coll_args_v1_t a = Args(TPX_COLL_ALL_GATHER_V, TPX_DTYPE_F16, 5);
  a.recv_counts = counts.data();
  a.recv_displs = displs.data();
  Operands o = OperandsOf(a, 2, 3);
  EXPECT_EQ(o.send_bytes, 10u);      // recv_counts[rank 2] = 5 elements
  EXPECT_EQ(o.recv_bytes, 13u * 2);  // block 0 ends at 13; empty block 1 ignored
  a.kind = TPX_COLL_REDUCE_SCATTER_V;
  a.recv_counts = a.recv_displs = nullptr;
  a.send_counts = counts.data();
  a.send_displs = displs.data();
  o = OperandsOf(a, 0, 3);
  EXPECT_EQ(o.send_bytes, 26u);
  EXPECT_EQ(o.recv_bytes, 6u);
}

TEST(OperandsOfTest, RootedVOpsReadLayoutsOnlyAtTheRoot) {
  const std::vector<int64_t> counts = {2, 4}, displs = {4, 0};
  tpx_coll_args_v1_t g = Args(TPX_COLL_GATHER_V, TPX_DTYPE_I32, 4, /*root=*/0);
  Operands o = OperandsOf(g, 1, 2);  // non-root: no layout arrays
  EXPECT_EQ(o.send_bytes, 16u);
  EXPECT_EQ(o.recv_bytes, 0u);
  g.count = 2;
  g.recv_counts = counts.data();
  g.recv_displs = displs.data();
  o = OperandsOf(g, 0, 2);
  EXPECT_EQ(o.recv_bytes, 24u);
  tpx_coll_args_v1_t s = Args(TPX_COLL_SCATTER_V, TPX_DTYPE_BOOL, 4, /*root=*/1);
  o = OperandsOf(s, 0, 2);
  EXPECT_EQ(o.send_bytes, 0u);
  EXPECT_EQ(o.recv_bytes, 4u);
  s.send_counts = counts.data();
  s.send_displs = displs.data();
  o = OperandsOf(s, 1, 2);
  EXPECT_EQ(o.send_bytes, 6u);
}

TEST(OperandsOfTest, AllToAllAndPointToPoint) {
  const std::vector<int64_t> sc = {1, 2}, sd = {0, 1}, rc = {3, 0}, rd = {0, 3};
  tpx_coll_args_v1_t a = Args(TPX_COLL_ALL_TO_ALL_V, TPX_DTYPE_F32, 0);
  a.send_counts = sc.data();
  a.send_displs = sd.data();
  a.recv_counts = rc.data();
  a.recv_displs = rd.data();
  Operands o = OperandsOf(a, 0, 2);
  EXPECT_EQ(o.send_bytes, 12u);
  EXPECT_EQ(o.recv_bytes, 12u);
  o = OperandsOf(Args(TPX_COLL_SEND, TPX_DTYPE_I64, 7, 1), 0, 2);
  EXPECT_EQ(o.send_bytes, 56u);
  EXPECT_EQ(o.recv_bytes, 0u);
  o = OperandsOf(Args(TPX_COLL_RECV, TPX_DTYPE_I64, 7, 1), 0, 2);
  EXPECT_EQ(o.recv_bytes, 56u);
}

}  // namespace
}  // namespace tpx::nccl
