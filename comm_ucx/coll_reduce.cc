// Reducing collectives: all_reduce, reduce, reduce_scatter_v.
#include <cstring>
#include <vector>

#include "comm_ucx/collectives.h"
#include "comm_ucx/reduce_kernels.h"
#include "comm_ucx/ring.h"
#include "comm_ucx/shm_collectives.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

Status RequireReducible(const CollArgs& a) {
  if (Reducible(a.dtype)) return Status();
  return Status::Error(TPX_ERR_INVALID_ARGUMENT,
                       std::string("ucx ") + CollName(a.kind) + ": dtype cannot be reduced");
}

// The accumulation buffer of a reduction: `target` itself when it has the
// accumulation type (and may be written), else owned storage.
class AccBuffer {
 public:
  AccBuffer(OpIo& io, tpx_dtype_t dtype, const void* input, void* target, int64_t count) {
    if (target != nullptr && AccElementSize(dtype) == ElementSize(dtype)) {
      data_ = target;
    } else {
      data_ = io.scratch(Scratch::kAcc, count * AccElementSize(dtype));
    }
    ToAcc(dtype, input, data_, count);
  }
  char* data() { return static_cast<char*>(data_); }

 private:
  void* data_;
};

// Recursive doubling over the largest power of two p <= n; the first
// 2*(n-p) ranks pair up first (even sends to odd) and get the result back at
// the end. Every rank ends with a bitwise identical `acc` (the ops commute).
// With `input` (n a power of two, input already in the accumulation type)
// `acc` starts uninitialised: the first exchange sends `input` itself and
// combines it with the peer's straight into `acc`, saving a staging copy.
Status RecursiveDoubling(OpIo& io, const CollArgs& a, const void* input, char* acc,
                         int64_t count) {
  const int n = io.size(), r = io.rank();
  const size_t bytes = count * AccElementSize(a.dtype);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  char* tmp = io.scratch(Scratch::kTmp, bytes);
  int vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      io.Send(r + 1, Sub(kPhaseA, 0), acc, bytes);
      vrank = -1;
    } else {
      TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(io.Recv(r - 1, Sub(kPhaseA, 0), tmp, bytes)));
      ReduceAcc(a.dtype, a.op, acc, tmp, count);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    int step = 1;
    for (int mask = 1; mask < p; mask <<= 1, ++step) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      const bool from_input = input != nullptr && mask == 1;
      io.Recv(peer, Sub(kPhaseA, step), tmp, bytes);
      io.Send(peer, Sub(kPhaseA, step), from_input ? input : acc, bytes);
      TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
      if (from_input) {
        ReduceInto(a.dtype, a.op, acc, input, tmp, count);
      } else {
        ReduceAcc(a.dtype, a.op, acc, tmp, count);
      }
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      io.Send(r - 1, Sub(kPhaseB, 0), acc, bytes);
    } else {
      TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
      io.Recv(r + 1, Sub(kPhaseB, 0), acc, bytes);
    }
  }
  return io.WaitAll();
}

bool UseTree(const CollArgs& a, int world) {
  return a.count * static_cast<int64_t>(ElementSize(a.dtype)) <=
             static_cast<int64_t>(GetTunables().small_bytes) ||
         a.count < world;
}

}  // namespace

Status AllReduce(OpIo& io, const CollArgs& a) {
  TPX_PLUGIN_RETURN_IF_ERROR(RequireReducible(a));
  const int n = io.size(), r = io.rank();
  if (a.count == 0) return Status();
  const size_t esz = ElementSize(a.dtype), asz = AccElementSize(a.dtype);
  if (n == 1) {
    if (a.send != a.recv) std::memcpy(a.recv, a.send, a.count * esz);
    return Status();
  }
  if (Status s; ShmAllReduce(io, a, &s)) return s;
  if (UseTree(a, n)) {
    if (esz == asz && (n & (n - 1)) == 0) {
      char* acc = static_cast<char*>(a.recv);
      TPX_PLUGIN_RETURN_IF_ERROR(RecursiveDoubling(io, a, a.send, acc, a.count));
      FromAcc(a.dtype, a.op, n, acc, a.recv, a.count);
      return Status();
    }
    AccBuffer acc(io, a.dtype, a.send, a.recv, a.count);
    TPX_PLUGIN_RETURN_IF_ERROR(RecursiveDoubling(io, a, nullptr, acc.data(), a.count));
    FromAcc(a.dtype, a.op, n, acc.data(), a.recv, a.count);
    return Status();
  }
  // Reduce-scatter in the accumulation type, round this rank's block once,
  // then all-gather the final values in the element type.
  const Blocks blocks = EvenBlocks(a.count, n);
  char* acc = asz == esz ? static_cast<char*>(a.recv) : io.scratch(Scratch::kAcc, a.count * asz);
  TPX_PLUGIN_RETURN_IF_ERROR(
      RingReduceScatter(io, a.dtype, a.op, a.send, blocks.displs, acc, blocks, kPhaseA));
  FromAcc(a.dtype, a.op, n, acc + blocks.displs[r] * asz,
          static_cast<char*>(a.recv) + blocks.displs[r] * esz, blocks.counts[r]);
  return RingAllGather(io, a.recv, esz, blocks, kPhaseB);
}

Status Reduce(OpIo& io, const CollArgs& a) {
  TPX_PLUGIN_RETURN_IF_ERROR(RequireReducible(a));
  const int n = io.size(), r = io.rank(), root = a.peer;
  if (a.count == 0) return Status();
  const size_t esz = ElementSize(a.dtype), asz = AccElementSize(a.dtype);
  if (n == 1) {
    if (a.send != a.recv) std::memcpy(a.recv, a.send, a.count * esz);
    return Status();
  }
  if (UseTree(a, n)) {
    // Only the root's output buffer is written.
    AccBuffer acc(io, a.dtype, a.send, r == root ? a.recv : nullptr, a.count);
    const int vrank = RankMod(r - root, n);
    const size_t bytes = a.count * asz;
    char* tmp = io.scratch(Scratch::kTmp, bytes);
    for (int mask = 1, step = 0; mask < n; mask <<= 1, ++step) {
      if (vrank & mask) {
        io.Send(RankMod(vrank - mask + root, n), Sub(kPhaseA, step), acc.data(), bytes);
        break;
      }
      if (vrank + mask < n) {
        TPX_PLUGIN_RETURN_IF_ERROR(
            io.Wait(io.Recv(RankMod(vrank + mask + root, n), Sub(kPhaseA, step), tmp, bytes)));
        ReduceAcc(a.dtype, a.op, acc.data(), tmp, a.count);
      }
    }
    TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
    if (r == root) FromAcc(a.dtype, a.op, n, acc.data(), a.recv, a.count);
    return Status();
  }
  const Blocks blocks = EvenBlocks(a.count, n);
  char* acc = (r == root && asz == esz) ? static_cast<char*>(a.recv)
                                        : io.scratch(Scratch::kAcc, a.count * asz);
  TPX_PLUGIN_RETURN_IF_ERROR(
      RingReduceScatter(io, a.dtype, a.op, a.send, blocks.displs, acc, blocks, kPhaseA));
  const char* mine = acc + blocks.displs[r] * asz;
  if (r == root) {
    FromAcc(a.dtype, a.op, n, mine, static_cast<char*>(a.recv) + blocks.displs[r] * esz,
            blocks.counts[r]);
    for (int i = 0; i < n; ++i) {
      if (i == r || blocks.counts[i] == 0) continue;
      io.Recv(i, Sub(kPhaseB, 0), static_cast<char*>(a.recv) + blocks.displs[i] * esz,
              blocks.counts[i] * esz);
    }
    return io.WaitAll();
  }
  const size_t out_bytes = blocks.counts[r] * esz;
  char* out = io.scratch(Scratch::kOut, out_bytes);
  FromAcc(a.dtype, a.op, n, mine, out, blocks.counts[r]);
  if (out_bytes > 0) io.Send(root, Sub(kPhaseB, 0), out, out_bytes);
  return io.WaitAll();
}

Status ReduceScatterV(OpIo& io, const CollArgs& a) {
  TPX_PLUGIN_RETURN_IF_ERROR(RequireReducible(a));
  const int n = io.size(), r = io.rank();
  const size_t asz = AccElementSize(a.dtype);
  const Blocks blocks = PackedBlocks(a.send_counts);
  int64_t total = 0;
  for (int64_t c : a.send_counts) total += c;
  if (total == 0) return Status();
  if (Status s; ShmReduceScatterV(io, a, &s)) return s;
  const size_t esz = ElementSize(a.dtype);
  if (n > 2 && total * static_cast<int64_t>(esz) <= static_cast<int64_t>(GetTunables().small_bytes)) {
    // Small: every rank sends each block straight to its owner, which
    // combines the n contributions (in a fixed order).
    const int64_t mine = blocks.counts[r];
    char* incoming = io.scratch(Scratch::kTmp, (n - 1) * mine * esz);
    for (int i = 0, slot = 0; i < n; ++i) {
      if (i == r) continue;
      if (mine > 0) io.Recv(i, Sub(kPhaseB, 0), incoming + slot * mine * esz, mine * esz);
      ++slot;
    }
    for (int i = 1; i < n; ++i) {
      const int to = RankMod(r + i, n);
      if (blocks.counts[to] > 0) {
        io.Send(to, Sub(kPhaseB, 0),
                static_cast<const char*>(a.send) + a.send_displs[to] * esz,
                blocks.counts[to] * esz);
      }
    }
    TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
    char* acc = io.scratch(Scratch::kAcc, mine * asz);
    ToAcc(a.dtype, static_cast<const char*>(a.send) + a.send_displs[r] * esz, acc, mine);
    for (int slot = 0; slot < n - 1; ++slot) {
      ReduceInto(a.dtype, a.op, acc, incoming + slot * mine * esz, acc, mine);
    }
    FromAcc(a.dtype, a.op, n, acc, a.recv, mine);
    return Status();
  }
  char* acc = io.scratch(Scratch::kAcc, total * asz);
  TPX_PLUGIN_RETURN_IF_ERROR(
      RingReduceScatter(io, a.dtype, a.op, a.send, a.send_displs, acc, blocks, kPhaseA));
  FromAcc(a.dtype, a.op, n, acc + blocks.displs[r] * asz, a.recv, blocks.counts[r]);
  return Status();
}

}  // namespace tpx::ucx
