// Data-movement collectives: broadcast, all_gather_v, gather_v, scatter_v,
// all_to_all_v, barrier, and the start of send/recv.
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm_ucx/collectives.h"
#include "comm_ucx/reduce_kernels.h"
#include "comm_ucx/ring.h"
#include "comm_ucx/shm_collectives.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

char* At(void* base, int64_t elems, size_t esz) { return static_cast<char*>(base) + elems * esz; }
const char* At(const void* base, int64_t elems, size_t esz) {
  return static_cast<const char*>(base) + elems * esz;
}

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

constexpr size_t kChainBroadcastBytes = 4 << 20;

// Pipelined chain root -> root+1 -> ...: each chunk is forwarded as soon as
// it arrived, so every link carries the data once, concurrently.
Status ChainBroadcast(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank(), root = a.peer;
  const size_t esz = ElementSize(a.dtype);
  const int vrank = RankMod(r - root, n);
  const int next = RankMod(r + 1, n), prev = RankMod(r - 1, n);
  const int64_t per_chunk = std::max<int64_t>(1, GetTunables().chunk_bytes / esz);
  const int64_t chunks = (a.count + per_chunk - 1) / per_chunk;
  auto length = [&](int64_t c) { return std::min(per_chunk, a.count - c * per_chunk) * esz; };
  std::vector<size_t> recvs;
  if (vrank > 0) {
    for (int64_t c = 0; c < chunks; ++c) {
      recvs.push_back(io.Recv(prev, Sub(kPhaseA, c), At(a.recv, c * per_chunk, esz), length(c)));
    }
  }
  for (int64_t c = 0; c < chunks; ++c) {
    if (vrank > 0) TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(recvs[c]));
    if (vrank < n - 1) io.Send(next, Sub(kPhaseA, c), At(a.recv, c * per_chunk, esz), length(c));
  }
  return io.WaitAll();
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
    const int vrank = RankMod(r - root, n);
    int mask = 1;
    while (mask < n) {
      if (vrank & mask) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            io.Wait(io.Recv(RankMod(vrank - mask + root, n), Sub(kPhaseA, 0), a.recv, bytes)));
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vrank + mask < n) io.Send(RankMod(vrank + mask + root, n), Sub(kPhaseA, 0), a.recv, bytes);
    }
    return io.WaitAll();
  }
  // Very large with more than two ranks: a pipelined chain moves each byte
  // over each link once. Otherwise scatter blocks, then ring all-gather.
  if (n > 2 && bytes >= kChainBroadcastBytes) return ChainBroadcast(io, a);
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
  TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
  return RingAllGather(io, a.recv, esz, blocks, kPhaseB);
}

Status AllGatherV(OpIo& io, const CollArgs& a) {
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(a.dtype);
  char* mine = At(a.recv, a.recv_displs[r], esz);
  const size_t my_bytes = a.recv_counts[r] * esz;
  int64_t total = 0;
  for (int64_t c : a.recv_counts) total += c;
  if (Status s; ShmAllGatherV(io, a, &s)) return s;
  if (n > 2 && total * static_cast<int64_t>(esz) <= static_cast<int64_t>(GetTunables().small_bytes)) {
    // Small: one round of direct messages beats n-1 ring steps.
    for (int i = 1; i < n; ++i) {
      const int from = RankMod(r - i, n);
      if (a.recv_counts[from] > 0) {
        io.Recv(from, Sub(kPhaseB, 0), At(a.recv, a.recv_displs[from], esz),
                a.recv_counts[from] * esz);
      }
    }
    for (int i = 1; i < n && my_bytes > 0; ++i) {
      io.Send(RankMod(r + i, n), Sub(kPhaseB, 0), a.send, my_bytes);
    }
    CopyIfDistinct(mine, a.send, my_bytes);
    return io.WaitAll();
  }
  Blocks blocks{a.recv_counts, a.recv_displs};
  if (my_bytes <= GetTunables().chunk_bytes || n == 2) {
    // The own block goes out straight from `send` while it is copied into
    // place. (Measured: with more than two ranks, for large blocks the copy
    // and the forwarding compete for memory bandwidth and copying first is
    // faster; with two the peer pulls the block by a single copy of its own
    // and overlapping wins at every size, e.g. 16 MiB 5.1 vs 5.4 ms.)
    return RingAllGather(io, a.recv, esz, blocks, kPhaseA, a.send,
                         [&] { CopyIfDistinct(mine, a.send, my_bytes); });
  }
  CopyIfDistinct(mine, a.send, my_bytes);
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
    const int from = RankMod(r - i, n);
    if (a.recv_counts[from] > 0) {
      io.Recv(from, Sub(kPhaseA, 0), At(a.recv, a.recv_displs[from], esz),
              a.recv_counts[from] * esz);
    }
  }
  CopyIfDistinct(At(a.recv, a.recv_displs[r], esz), At(a.send, a.send_displs[r], esz),
                 a.send_counts[r] * esz);
  // Staggered destinations so that not every rank sends to rank 0 first.
  for (int i = 1; i < n; ++i) {
    const int to = RankMod(r + i, n);
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
    io.Send(RankMod(r + dist, n), Sub(kPhaseA, round), nullptr, 0);
    TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(io.Recv(RankMod(r - dist, n), Sub(kPhaseA, round), nullptr, 0)));
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
