#include "comm_ucx/collectives.h"

namespace tpx::ucx {
namespace {

PerRank CopyArray(const int64_t* values, int world) {
  return values == nullptr ? PerRank() : PerRank(values, values + world);
}

}  // namespace

CollArgs CollArgs::From(const tpx_coll_args_v1_t& raw, int world) {
  CollArgs a;
  a.kind = raw.kind;
  a.dtype = raw.dtype;
  a.op = raw.op;
  a.peer = raw.peer;
  a.tag = raw.tag;
  a.send = raw.send;
  a.recv = raw.recv;
  a.count = raw.count;
  a.send_counts = CopyArray(raw.send_counts, world);
  a.send_displs = CopyArray(raw.send_displs, world);
  a.recv_counts = CopyArray(raw.recv_counts, world);
  a.recv_displs = CopyArray(raw.recv_displs, world);
  a.seq = raw.seq;
  return a;
}

const char* CollName(tpx_coll_kind_t kind) {
  switch (kind) {
    case TPX_COLL_ALL_REDUCE: return "all_reduce";
    case TPX_COLL_BROADCAST: return "broadcast";
    case TPX_COLL_REDUCE: return "reduce";
    case TPX_COLL_ALL_GATHER_V: return "all_gather_v";
    case TPX_COLL_REDUCE_SCATTER_V: return "reduce_scatter_v";
    case TPX_COLL_GATHER_V: return "gather_v";
    case TPX_COLL_SCATTER_V: return "scatter_v";
    case TPX_COLL_ALL_TO_ALL_V: return "all_to_all_v";
    case TPX_COLL_SEND: return "send";
    case TPX_COLL_RECV: return "recv";
    case TPX_COLL_BARRIER: return "barrier";
  }
  return "unknown";
}

Status RunCollective(OpIo& io, const CollArgs& a) {
  switch (a.kind) {
    case TPX_COLL_ALL_REDUCE: return AllReduce(io, a);
    case TPX_COLL_BROADCAST: return Broadcast(io, a);
    case TPX_COLL_REDUCE: return Reduce(io, a);
    case TPX_COLL_ALL_GATHER_V: return AllGatherV(io, a);
    case TPX_COLL_REDUCE_SCATTER_V: return ReduceScatterV(io, a);
    case TPX_COLL_GATHER_V: return GatherV(io, a);
    case TPX_COLL_SCATTER_V: return ScatterV(io, a);
    case TPX_COLL_ALL_TO_ALL_V: return AllToAllV(io, a);
    case TPX_COLL_SEND:
    case TPX_COLL_RECV: return StartSendRecv(io, a);
    case TPX_COLL_BARRIER: return Barrier(io, a);
  }
  return Status::Error(TPX_ERR_UNIMPLEMENTED, "ucx: unknown collective kind " +
                                                  std::to_string(static_cast<int>(a.kind)));
}

}  // namespace tpx::ucx
