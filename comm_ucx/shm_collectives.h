// Collectives of communicators whose ranks share a host, through the
// communicator's shared-memory segment (shm_segment.h) instead of UCX:
//  - small buffers (up to TPX_UCX_SHM_BYTES per rank): every rank copies its
//    input into its slot, raises its stage, waits for its peers' stages and
//    reads their slots (all_reduce, all_gather_v, reduce_scatter_v;
//    all_gather_v only up to a quarter of that per block where direct reads
//    work, or at two ranks all of it where SharedSegment measured the
//    slots faster: largest_slot_block());
//  - larger all_gather_v blocks: every rank posts its send buffer's
//    address and reads its peers' blocks straight from their memory with
//    one copy (process_vm_readv, when every rank can), piece by piece
//    between the pieces of its own block's copy, then waits until its peers
//    have read its own block before returning (the caller may reuse `send`);
//  - larger all_reduce at two ranks, the same way: each rank reads and
//    reduces one half of its peer's input, then reads the other half of
//    the result from its peer's output;
//  - larger reduce_scatter_v at two ranks: each rank reads its block from
//    its peer's input and reduces it with its own into its output (bf16 and
//    f16 through an f32 buffer in cache, rounded once, ReduceTwo).
// Every rank posts what it runs (collective number, kind, dtype, op, sizes)
// and checks its peers': disagreeing ranks get a "size mismatch" error,
// never a wrong result. Reductions combine the ranks' contributions in the
// order the UCX algorithms do at the same size, so results are bitwise the
// same on one host as across hosts.
//
//   Status s;
//   if (ShmAllReduce(io, args, &s)) return s;  // else: not for the fast path
#ifndef TPX_COMM_UCX_SHM_COLLECTIVES_H_
#define TPX_COMM_UCX_SHM_COLLECTIVES_H_

#include "comm_ucx/collectives.h"
#include "comm_ucx/p2p.h"
#include "comm_ucx/status.h"

namespace tpx::ucx {

// Each returns false, doing nothing, when the operation is not for the
// shared-memory path (no segment, sizes); else runs it and sets *status.
// The choice depends only on arguments every rank shares.
bool ShmAllReduce(OpIo& io, const CollArgs& a, Status* status);
bool ShmAllGatherV(OpIo& io, const CollArgs& a, Status* status);
bool ShmReduceScatterV(OpIo& io, const CollArgs& a, Status* status);

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_SHM_COLLECTIVES_H_
