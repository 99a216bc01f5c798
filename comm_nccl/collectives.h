// Maps each plugin operation (tpx_coll_args_v1_t) onto NCCL calls on device
// buffers. Where NCCL has a primitive for the layout every rank agrees on
// (uniform all-gather / reduce-scatter), it is used; the v-variants become a
// group of broadcasts / reduces, and gather, scatter and all-to-all a group
// of ncclSend/ncclRecv (NCCL's own gather/scatter/all-to-all need uniform
// counts, which a non-root rank cannot see). SEND/RECV are not collectives:
// they go through the communicator's point-to-point channels (p2p.cc).
//
//   Operands ops = OperandsOf(args, rank, size);   // which bytes are read/written
//   ncclResult_t rc;
//   Status s = EnqueueCollective(args, dev_send, dev_recv, rank, size, comm, stream,
//                                barrier_word, &rc);
#ifndef TPX_COMM_NCCL_COLLECTIVES_H_
#define TPX_COMM_NCCL_COLLECTIVES_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "comm/plugin_abi.h"
#include "comm_nccl/status.h"

namespace tpx::nccl {

// The byte ranges an operation reads (send) and writes (recv) on this rank,
// starting at args.send / args.recv. Zero bytes: the pointer is unused here.
struct Operands {
  size_t send_bytes = 0;
  size_t recv_bytes = 0;
};
Operands OperandsOf(const tpx_coll_args_v1_t& args, int rank, int size);

// Enqueues the operation on `stream` with send/recv replaced by device
// pointers at the same offsets. Self copies use cudaMemcpyAsync; NCCL calls
// go into one group whose ncclGroupEnd result lands in *group_result
// (ncclInProgress on non-blocking communicators: the caller polls).
Status EnqueueCollective(const tpx_coll_args_v1_t& args, const char* send, char* recv, int rank,
                         int size, ncclComm_t comm, cudaStream_t stream, void* barrier_word,
                         ncclResult_t* group_result);

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_COLLECTIVES_H_
