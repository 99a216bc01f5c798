// Data-movement collectives: broadcast, all_gather_v, gather_v, scatter_v,
// all_to_all_v, barrier, and the start of send/recv.
#include <cstring>

#include "comm_ucx/collectives.h"
#include "comm_ucx/reduce_kernels.h"
#include "comm_ucx/ring.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

int Mod(int a, int n) { return ((a % n) + n) % n; }

char* At(void* base, int64_t elems, size_t esz) { return static_cast<char*>(base) + elems * esz; }
const char* At(const void* base, int64_t elems, size_t esz) {
  return static_cast<const char*>(base) + elems * esz;
}

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

}  // namespace

Status Broadcast(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank(), root = a.peer;
  const size_t esz = ElementSize(a.dtype);
  const size_t bytes = a.count * esz;
  if (n == 1 || bytes == 0) return Status();
  if (bytes <= GetTunables().small_bytes || a.count < n) {
    // Binomial tree rooted at `root`: receive from the parent, then send to
    // children from the largest subtree down.
    const int vrank = Mod(r - root, n);
    int mask = 1;
    while (mask < n) {
      if (vrank & mask) {
        TPX_UCX_RETURN_IF_ERROR(
            io.Wait(io.Recv(Mod(vrank - mask + root, n), Sub(kPhaseA, 0), a.recv, bytes)));
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vrank + mask < n) io.Send(Mod(vrank + mask + root, n), Sub(kPhaseA, 0), a.recv, bytes);
    }
    return io.WaitAll();
  }
  // Large: scatter blocks from the root, then ring all-gather.
  const Blocks blocks = EvenBlocks(a.count, n);
  if (r == root) {
    for (int i = 0; i < n; ++i) {
      if (i != r && blocks.counts[i] > 0) {
        io.Send(i, Sub(kPhaseA, 0), At(a.recv, blocks.displs[i], esz), blocks.counts[i] * esz);
      }
    }
  } else if (blocks.counts[r] > 0) {
    io.Recv(root, Sub(kPhaseA, 0), At(a.recv, blocks.displs[r], esz), blocks.counts[r] * esz);
  }
  TPX_UCX_RETURN_IF_ERROR(io.WaitAll());
  return RingAllGather(io, a.recv, esz, blocks, kPhaseB);
}

Status AllGatherV(OpIo& io, const CollArgs& a) {
  const int r = io.rank();
  const size_t esz = ElementSize(a.dtype);
  CopyIfDistinct(At(a.recv, a.recv_displs[r], esz), a.send, a.recv_counts[r] * esz);
  Blocks blocks{a.recv_counts, a.recv_displs};
  return RingAllGather(io, a.recv, esz, blocks, kPhaseA);
}

Status GatherV(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank(), root = a.peer;
  const size_t esz = ElementSize(a.dtype);
  if (r == root) {
    for (int i = 0; i < n; ++i) {
      const size_t bytes = a.recv_counts[i] * esz;
      if (i == r) {
        CopyIfDistinct(At(a.recv, a.recv_displs[i], esz), a.send, bytes);
      } else if (bytes > 0) {
        io.Recv(i, Sub(kPhaseA, 0), At(a.recv, a.recv_displs[i], esz), bytes);
      }
    }
    return io.WaitAll();
  }
  const int64_t mine = a.recv_counts.empty() ? a.count : a.recv_counts[r];
  if (mine > 0) io.Send(root, Sub(kPhaseA, 0), a.send, mine * esz);
  return io.WaitAll();
}

Status ScatterV(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank(), root = a.peer;
  const size_t esz = ElementSize(a.dtype);
  if (r == root) {
    for (int i = 0; i < n; ++i) {
      const size_t bytes = a.send_counts[i] * esz;
      if (i == r) {
        CopyIfDistinct(a.recv, At(a.send, a.send_displs[i], esz), bytes);
      } else if (bytes > 0) {
        io.Send(i, Sub(kPhaseA, 0), At(a.send, a.send_displs[i], esz), bytes);
      }
    }
    return io.WaitAll();
  }
  const int64_t mine = a.send_counts.empty() ? a.count : a.send_counts[r];
  if (mine > 0) io.Recv(root, Sub(kPhaseA, 0), a.recv, mine * esz);
  return io.WaitAll();
}

Status AllToAllV(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(a.dtype);
  for (int i = 1; i < n; ++i) {
    const int from = Mod(r - i, n);
    if (a.recv_counts[from] > 0) {
      io.Recv(from, Sub(kPhaseA, 0), At(a.recv, a.recv_displs[from], esz),
              a.recv_counts[from] * esz);
    }
  }
  CopyIfDistinct(At(a.recv, a.recv_displs[r], esz), At(a.send, a.send_displs[r], esz),
                 a.send_counts[r] * esz);
  // Staggered destinations so that not every rank sends to rank 0 first.
  for (int i = 1; i < n; ++i) {
    const int to = Mod(r + i, n);
    if (a.send_counts[to] > 0) {
      io.Send(to, Sub(kPhaseA, 0), At(a.send, a.send_displs[to], esz), a.send_counts[to] * esz);
    }
  }
  return io.WaitAll();
}

Status Barrier(OpIo& io, const CollArgs&) {
  // Dissemination: after round k every rank has heard (transitively) from
  // 2^(k+1) ranks; ceil(log2 n) rounds of empty messages.
  const int n = io.size(), r = io.rank();
  for (int dist = 1, round = 0; dist < n; dist <<= 1, ++round) {
    io.Send(Mod(r + dist, n), Sub(kPhaseA, round), nullptr, 0);
    TPX_UCX_RETURN_IF_ERROR(io.Wait(io.Recv(Mod(r - dist, n), Sub(kPhaseA, round), nullptr, 0)));
  }
  return io.WaitAll();
}

Status StartSendRecv(OpIo& io, const CollArgs& a) {
  const size_t bytes = a.count * ElementSize(a.dtype);
  if (a.kind == TPX_COLL_SEND) {
    io.SendTagged(a.peer, a.tag, a.send, bytes);
  } else {
    io.RecvTagged(a.peer, a.tag, a.recv, bytes);
  }
  return Status();
}

}  // namespace tpx::ucx
