#include "comm_nccl/collectives.h"

#include <algorithm>
#include <string>

#include "comm_nccl/communicator.h"

namespace tpx::nccl {
namespace {

ncclDataType_t NcclType(tpx_dtype_t dtype) {
  switch (dtype) {
    case TPX_DTYPE_F32: return ncclFloat32;
    case TPX_DTYPE_BF16: return ncclBfloat16;
    case TPX_DTYPE_F16: return ncclFloat16;
    case TPX_DTYPE_I32: return ncclInt32;
    case TPX_DTYPE_I64: return ncclInt64;
    case TPX_DTYPE_BOOL: return ncclUint8;  // only non-reducing ops carry bool
  }
  return ncclUint8;
}

// AVG reaches only float dtypes (the host rejects it on integers); ncclAvg
// sums in the dtype's NCCL accumulation and divides by the rank count.
ncclRedOp_t NcclOp(tpx_reduce_op_t op) {
  switch (op) {
    case TPX_REDUCE_SUM: return ncclSum;
    case TPX_REDUCE_AVG: return ncclAvg;
    case TPX_REDUCE_MAX: return ncclMax;
    case TPX_REDUCE_MIN: return ncclMin;
    case TPX_REDUCE_PROD: return ncclProd;
  }
  return ncclSum;
}

int64_t MaxEnd(const int64_t* counts, const int64_t* displs, int size) {
  int64_t end = 0;
  if (counts == nullptr || displs == nullptr) return 0;
  for (int r = 0; r < size; ++r) {
    if (counts[r] > 0) end = std::max(end, displs[r] + counts[r]);
  }
  return end;
}

// Equal counts laid out back to back in rank order: NCCL's own layout.
bool IsUniform(const int64_t* counts, const int64_t* displs, int size) {
  for (int r = 0; r < size; ++r) {
    if (counts[r] != counts[0] || displs[r] != r * counts[0]) return false;
  }
  return true;
}

Status SelfCopy(char* dst, const char* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return Status();
  return CudaCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                  "self copy");
}

}  // namespace

Operands OperandsOf(const tpx_coll_args_v1_t& a, int rank, int size) {
  const size_t es = ElementSize(a.dtype);
  Operands o;
  switch (a.kind) {
    case TPX_COLL_ALL_REDUCE:
      o.send_bytes = o.recv_bytes = a.count * es;
      break;
    case TPX_COLL_BROADCAST:
      o.recv_bytes = a.count * es;
      break;
    case TPX_COLL_REDUCE:
      o.send_bytes = a.count * es;
      if (rank == a.peer) o.recv_bytes = a.count * es;
      break;
    case TPX_COLL_ALL_GATHER_V:
      o.send_bytes = a.recv_counts[rank] * es;
      o.recv_bytes = MaxEnd(a.recv_counts, a.recv_displs, size) * es;
      break;
    case TPX_COLL_REDUCE_SCATTER_V:
      o.send_bytes = MaxEnd(a.send_counts, a.send_displs, size) * es;
      o.recv_bytes = a.send_counts[rank] * es;
      break;
    case TPX_COLL_GATHER_V:
      o.send_bytes = a.count * es;
      if (rank == a.peer) o.recv_bytes = MaxEnd(a.recv_counts, a.recv_displs, size) * es;
      break;
    case TPX_COLL_SCATTER_V:
      if (rank == a.peer) o.send_bytes = MaxEnd(a.send_counts, a.send_displs, size) * es;
      o.recv_bytes = a.count * es;
      break;
    case TPX_COLL_ALL_TO_ALL_V:
      o.send_bytes = MaxEnd(a.send_counts, a.send_displs, size) * es;
      o.recv_bytes = MaxEnd(a.recv_counts, a.recv_displs, size) * es;
      break;
    case TPX_COLL_SEND:
      o.send_bytes = a.count * es;
      break;
    case TPX_COLL_RECV:
      o.recv_bytes = a.count * es;
      break;
    case TPX_COLL_BARRIER:
      break;
  }
  return o;
}

Status EnqueueCollective(const tpx_coll_args_v1_t& a, const char* send, char* recv, int rank,
                         int size, ncclComm_t comm, cudaStream_t stream, void* barrier_word,
                         ncclResult_t* group_result) {
  const size_t es = ElementSize(a.dtype);
  const ncclDataType_t type = NcclType(a.dtype);
  const ncclRedOp_t op = NcclOp(a.op);
  const std::string what = std::string("nccl ") + plugin::CollKindName(a.kind);

  // Self copies first: they touch only this rank's memory.
  switch (a.kind) {
    case TPX_COLL_GATHER_V:
      if (rank == a.peer) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            SelfCopy(recv + a.recv_displs[rank] * es, send, a.count * es, stream));
      }
      break;
    case TPX_COLL_SCATTER_V:
      if (rank == a.peer) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            SelfCopy(recv, send + a.send_displs[rank] * es, a.count * es, stream));
      }
      break;
    case TPX_COLL_ALL_TO_ALL_V:
      TPX_PLUGIN_RETURN_IF_ERROR(SelfCopy(recv + a.recv_displs[rank] * es,
                                        send + a.send_displs[rank] * es,
                                        a.recv_counts[rank] * es, stream));
      break;
    default:
      break;
  }

  ncclResult_t rc = ncclGroupStart();
  TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(rc, what + ": ncclGroupStart", comm));
  auto call = [&](ncclResult_t r, const char* fn) -> Status {
    if (r == ncclSuccess || r == ncclInProgress) return Status();
    ncclGroupEnd();
    return NcclCall(r, what + ": " + fn, comm);
  };
  switch (a.kind) {
    case TPX_COLL_ALL_REDUCE:
      TPX_PLUGIN_RETURN_IF_ERROR(
          call(ncclAllReduce(send, recv, a.count, type, op, comm, stream), "ncclAllReduce"));
      break;
    case TPX_COLL_BROADCAST:
      TPX_PLUGIN_RETURN_IF_ERROR(
          call(ncclBroadcast(recv, recv, a.count, type, a.peer, comm, stream), "ncclBroadcast"));
      break;
    case TPX_COLL_REDUCE:
      // recvbuff is only read at the root; elsewhere pass send (never null).
      TPX_PLUGIN_RETURN_IF_ERROR(call(ncclReduce(send, rank == a.peer ? recv : const_cast<char*>(send),
                                               a.count, type, op, a.peer, comm, stream),
                                    "ncclReduce"));
      break;
    case TPX_COLL_ALL_GATHER_V:
      if (IsUniform(a.recv_counts, a.recv_displs, size)) {
        // In place when send == recv + rank*count, which NCCL detects.
        TPX_PLUGIN_RETURN_IF_ERROR(call(
            ncclAllGather(send, recv, a.recv_counts[0], type, comm, stream), "ncclAllGather"));
      } else {
        for (int r = 0; r < size; ++r) {
          if (a.recv_counts[r] == 0) continue;
          char* block = recv + a.recv_displs[r] * es;
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclBroadcast(r == rank ? send : block, block,
                                                      a.recv_counts[r], type, r, comm, stream),
                                        "ncclBroadcast"));
        }
      }
      break;
    case TPX_COLL_REDUCE_SCATTER_V:
      if (IsUniform(a.send_counts, a.send_displs, size)) {
        TPX_PLUGIN_RETURN_IF_ERROR(call(
            ncclReduceScatter(send, recv, a.send_counts[0], type, op, comm, stream),
            "ncclReduceScatter"));
      } else {
        for (int r = 0; r < size; ++r) {
          if (a.send_counts[r] == 0) continue;
          const char* block = send + a.send_displs[r] * es;
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclReduce(block, r == rank ? recv : const_cast<char*>(block),
                                                   a.send_counts[r], type, op, r, comm, stream),
                                        "ncclReduce"));
        }
      }
      break;
    case TPX_COLL_GATHER_V:
      if (rank == a.peer) {
        for (int r = 0; r < size; ++r) {
          if (r == rank || a.recv_counts[r] == 0) continue;
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclRecv(recv + a.recv_displs[r] * es, a.recv_counts[r],
                                                 type, r, comm, stream),
                                        "ncclRecv"));
        }
      } else if (a.count > 0) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            call(ncclSend(send, a.count, type, a.peer, comm, stream), "ncclSend"));
      }
      break;
    case TPX_COLL_SCATTER_V:
      if (rank == a.peer) {
        for (int r = 0; r < size; ++r) {
          if (r == rank || a.send_counts[r] == 0) continue;
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclSend(send + a.send_displs[r] * es, a.send_counts[r],
                                                 type, r, comm, stream),
                                        "ncclSend"));
        }
      } else if (a.count > 0) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            call(ncclRecv(recv, a.count, type, a.peer, comm, stream), "ncclRecv"));
      }
      break;
    case TPX_COLL_ALL_TO_ALL_V:
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        if (a.send_counts[r] > 0) {
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclSend(send + a.send_displs[r] * es, a.send_counts[r],
                                                 type, r, comm, stream),
                                        "ncclSend"));
        }
        if (a.recv_counts[r] > 0) {
          TPX_PLUGIN_RETURN_IF_ERROR(call(ncclRecv(recv + a.recv_displs[r] * es, a.recv_counts[r],
                                                 type, r, comm, stream),
                                        "ncclRecv"));
        }
      }
      break;
    case TPX_COLL_SEND:
    case TPX_COLL_RECV:
      // Point-to-point ops travel on their own channels (p2p.cc).
      ncclGroupEnd();
      return Status::Error(TPX_ERR_INTERNAL, what + ": not a collective");
    case TPX_COLL_BARRIER:
      // A one-element all-reduce: nobody leaves before everybody arrived.
      TPX_PLUGIN_RETURN_IF_ERROR(call(ncclAllReduce(barrier_word, barrier_word, 1, ncclFloat32,
                                                  ncclSum, comm, stream),
                                    "ncclAllReduce (barrier)"));
      break;
  }
  *group_result = ncclGroupEnd();
  return NcclCall(*group_result, what + ": ncclGroupEnd", comm);
}

}  // namespace tpx::nccl
