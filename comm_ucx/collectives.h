// The collective algorithms of the UCX plugin, one function per operation,
// each running to completion on the calling (executor) thread through an
// OpIo. Algorithms are picked by size and world size:
//   all_reduce   recursive doubling (small) or pipelined ring
//                reduce-scatter + all-gather (large)
//   reduce       binomial tree (small) or ring reduce-scatter + gather
//   broadcast    binomial tree (small), scatter + ring all-gather, or a
//                pipelined chain (very large, more than two ranks)
//   reduce_scatter_v, all_gather_v   pipelined ring (direct messages when
//                small and more than two ranks)
//   gather_v, scatter_v, all_to_all_v  direct messages
//   barrier      dissemination
// All handle any world size and uneven or empty per-rank counts.
//
//   CollArgs args = CollArgs::From(raw);   // copies per-rank arrays
//   OpIo io(worker, scratch, CollName(args.kind), seq, deadline);
//   Status s = RunCollective(io, args);
#ifndef TPX_COMM_UCX_COLLECTIVES_H_
#define TPX_COMM_UCX_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/p2p.h"
#include "comm_ucx/ring.h"
#include "comm_ucx/status.h"

namespace tpx::ucx {

// tpx_coll_args_v1_t with its per-rank arrays copied (they are only valid
// during post()).
struct CollArgs {
  tpx_coll_kind_t kind;
  tpx_dtype_t dtype;
  tpx_reduce_op_t op;
  int32_t peer;
  int32_t tag;
  const void* send;
  void* recv;
  int64_t count;
  PerRank send_counts, send_displs, recv_counts, recv_displs;
  uint64_t seq;

  static CollArgs From(const tpx_coll_args_v1_t& raw, int world);
};

const char* CollName(tpx_coll_kind_t kind);
// True for SEND and RECV, which may overlap with later operations.
inline bool IsPointToPoint(tpx_coll_kind_t kind) {
  return kind == TPX_COLL_SEND || kind == TPX_COLL_RECV;
}

// Runs a collective to completion. SEND/RECV only start here; the caller
// completes them with io.WaitAll() / io.Test().
Status RunCollective(OpIo& io, const CollArgs& args);

// Per family (coll_reduce.cc, coll_move.cc).
Status AllReduce(OpIo& io, const CollArgs& a);
Status Reduce(OpIo& io, const CollArgs& a);
Status ReduceScatterV(OpIo& io, const CollArgs& a);
Status Broadcast(OpIo& io, const CollArgs& a);
Status AllGatherV(OpIo& io, const CollArgs& a);
Status GatherV(OpIo& io, const CollArgs& a);
Status ScatterV(OpIo& io, const CollArgs& a);
Status AllToAllV(OpIo& io, const CollArgs& a);
Status Barrier(OpIo& io, const CollArgs& a);
Status StartSendRecv(OpIo& io, const CollArgs& a);

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_COLLECTIVES_H_
