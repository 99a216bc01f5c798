#include "comm_ucx/shm_collectives.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm_ucx/reduce_kernels.h"
#include "comm_ucx/ring.h"
#include "comm_ucx/shm_segment.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

// Stages within one operation (ShmOpLine::stage = 4 * op + phase).
constexpr uint64_t kPosted = 1;
constexpr uint64_t kReduced = 2;
constexpr uint64_t kFinished = 3;

// Direct reads of a reduction go through a buffer this large, small enough
// to stay in the core's cache until it is reduced.
constexpr int64_t kDirectChunkBytes = 256 << 10;

// Copies `bytes` (at most a slot) between buffers that do not overlap.
// From 2 KiB on glibc's memcpy uses `rep movsb`, which on the AMD cores of
// the benchmark host is slower than a plain vector loop for blocks of a
// few KiB (an all-gather of 16-64 KiB through the slots: about 5% less
// time); larger copies keep memcpy.
void CopyBlock(void* dst, const void* src, size_t bytes) {
#ifdef __AVX2__
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), v0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 32), v1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 64), v2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 96), v3);
  }
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Whether [a, a + bytes) and [b, b + bytes) do not overlap.
bool Disjoint(const char* a, const char* b, size_t bytes) { return a + bytes <= b || b + bytes <= a; }

// Marks the hash of an all-gather whose blocks are read directly.
constexpr uint64_t kDirectReadsTag = 0x9e3779b97f4a7c15ull;

uint64_t HashCounts(const PerRank& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
  for (int64_t c : counts) {
    h ^= static_cast<uint64_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// One operation through the segment: its number, the header this rank
// posts and the checks of its peers' headers.
class ShmOp {
 public:
  ShmOp(OpIo& io, const CollArgs& a)
      : io_(io), a_(a), shm_(*io.shm()), op_(shm_.ops()), parity_(op_ & 1) {
    shm_.NextOp();
  }
  int parity() const { return parity_; }
  char* slot(int rank) { return shm_.slot(rank, parity_); }
  const ShmHeader& header(int rank) { return shm_.control(rank).line[parity_].header; }

  // Publishes this rank's header and raises its stage to "posted".
  void Post(int64_t count, uint64_t counts_hash, const void* send, const void* recv) {
    ShmControl& c = shm_.control(io_.rank());
    ShmHeader& h = c.line[parity_].header;
    h.coll_seq = io_.seq();
    h.kind = a_.kind;
    h.dtype = static_cast<uint16_t>(a_.dtype);
    h.op = static_cast<uint16_t>(a_.op);
    h.count = count;
    h.counts_hash = counts_hash;
    h.send_addr = reinterpret_cast<uint64_t>(send);
    h.recv_addr = reinterpret_cast<uint64_t>(recv);
    c.last_coll.store(io_.seq() + 1, std::memory_order_relaxed);
    Raise(kPosted);
  }
  void Raise(uint64_t phase) {
    shm_.control(io_.rank()).line[parity_].stage.store(4 * op_ + phase,
                                                       std::memory_order_release);
  }
  Status WaitFor(uint64_t phase) { return io_.WaitStage(4 * op_ + phase); }

  // Waits for every peer's header and checks it against this rank's view:
  // `expected_count(peer)` and the counts hash.
  template <typename ExpectedCount>
  Status WaitPeers(uint64_t counts_hash, ExpectedCount expected_count) {
    TPX_PLUGIN_RETURN_IF_ERROR(WaitFor(kPosted));
    const size_t esz = ElementSize(a_.dtype);
    for (int peer = 0; peer < io_.size(); ++peer) {
      if (peer == io_.rank()) continue;
      const ShmHeader& h = header(peer);
      auto who = [peer] { return "rank " + std::to_string(peer); };
      if (h.coll_seq != io_.seq() || h.kind != static_cast<uint32_t>(a_.kind)) {
        return io_.Fail(TPX_ERR_FAILED_PRECONDITION,
                        "collective mismatch: " + who() + " runs " +
                            CollName(static_cast<tpx_coll_kind_t>(h.kind)) + " (collective " +
                            std::to_string(h.coll_seq) + ") where rank " +
                            std::to_string(io_.rank()) + " runs collective " +
                            std::to_string(io_.seq()));
      }
      if (h.dtype != static_cast<uint16_t>(a_.dtype) || h.op != static_cast<uint16_t>(a_.op)) {
        return io_.Fail(TPX_ERR_FAILED_PRECONDITION,
                        "dtype or reduction mismatch: " + who() + " posted dtype " +
                            std::to_string(h.dtype) + " op " + std::to_string(h.op) +
                            " where rank " + std::to_string(io_.rank()) + " has dtype " +
                            std::to_string(a_.dtype) + " op " + std::to_string(a_.op));
      }
      const int64_t want = expected_count(peer);
      if (h.count != want || h.counts_hash != counts_hash) {
        return io_.Fail(TPX_ERR_FAILED_PRECONDITION,
                        "size mismatch: " + who() + " posted " + std::to_string(h.count * esz) +
                            " bytes where rank " + std::to_string(io_.rank()) + " expected " +
                            std::to_string(want * esz) +
                            (h.counts_hash != counts_hash
                                 ? " or the per-rank counts (or the all-gather's path) differ"
                                 : "") +
                            " (the ranks disagree on a count or shape)");
      }
    }
    return Status();
  }

 private:
  OpIo& io_;
  const CollArgs& a_;
  SharedSegment& shm_;
  uint64_t op_;
  int parity_;
};

// acc = inputs[0] (op) inputs[1] (op) ... left to right, in the
// accumulation type; `acc` may alias inputs[0] when the types match.
void Fold(tpx_dtype_t dtype, tpx_reduce_op_t op, const char* const* inputs, int num_inputs,
          char* acc, int64_t count) {
  if (count == 0) return;
  int i = 1;
  if (ElementSize(dtype) == AccElementSize(dtype) && num_inputs > 1) {
    ReduceInto(dtype, op, acc, inputs[1], inputs[0], count);
    i = 2;
  } else {
    ToAcc(dtype, inputs[0], acc, count);
  }
  for (; i < num_inputs; ++i) ReduceInto(dtype, op, acc, inputs[i], acc, count);
}

// Per-rank input pointers; on the stack for the usual world sizes.
class Inputs {
 public:
  explicit Inputs(int n) : heap_(n > kStack ? n : 0), data_(n > kStack ? heap_.data() : stack_) {}
  const char*& operator[](int i) { return data_[i]; }
  const char* const* data() const { return data_; }

 private:
  static constexpr int kStack = 16;
  const char* stack_[kStack];
  std::vector<const char*> heap_;
  const char** data_;
};

// The combination order of the UCX all-reduce for small buffers (recursive
// doubling): pairs (0,1), (2,3), ... of the first 2*(n-p) ranks, then a
// balanced tree over the p partial results. `acc` holds the result.
void TreeReduce(OpIo& io, tpx_dtype_t dtype, tpx_reduce_op_t op, const char* const* inputs,
                int n, char* acc, int64_t count) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  if (p == 1 || (p == 2 && rem == 0) || (p == 2 && rem == 1)) {
    Fold(dtype, op, inputs, n, acc, count);  // ((x0 x1) x2) is the tree for n <= 3
    return;
  }
  const size_t bytes = count * AccElementSize(dtype);
  char* parts = io.scratch(Scratch::kTmp, (p - 1) * bytes);
  auto part = [&](int v) { return v == 0 ? acc : parts + (v - 1) * bytes; };
  for (int v = 0; v < p; ++v) {
    if (v < rem) {
      Fold(dtype, op, inputs + 2 * v, 2, part(v), count);
    } else {
      ToAcc(dtype, inputs[v + rem], part(v), count);
    }
  }
  for (int m = 1; m < p; m *= 2) {
    for (int v = 0; v < p; v += 2 * m) ReduceAcc(dtype, op, part(v), part(v + m), count);
  }
}

bool SmallAllReduce(const CollArgs& a, int n) {
  const size_t bytes = a.count * ElementSize(a.dtype);
  const Tunables& t = GetTunables();
  // Beyond two ranks, only where the UCX path reduces in the same (tree)
  // order; with two, every order gives the same bits.
  return bytes <= t.shm_bytes && (n == 2 || bytes <= t.small_bytes || a.count < n);
}

// dst = own (op) the peer's `count` elements at `peer_addr` in its memory,
// read a cache-sized chunk at a time so that each chunk is reduced while it
// is still in cache. peer_first puts the peer's operand first, in the order
// the path being matched combines them; dst may be `own`.
Status ReduceWithPeer(OpIo& io, const CollArgs& a, uint64_t peer_addr, const char* own,
                      char* dst, int64_t count, bool peer_first) {
  const int peer = 1 - io.rank();
  const size_t esz = ElementSize(a.dtype);
  const int64_t per_chunk = kDirectChunkBytes / esz;
  char* tmp = io.scratch(Scratch::kTmp, per_chunk * esz);
  for (int64_t done = 0; done < count; done += per_chunk) {
    const int64_t len = std::min(per_chunk, count - done);
    Status read = io.shm()->ReadPeer(peer, peer_addr + done * esz, tmp, len * esz);
    if (!read.ok()) return io.Fail(read.code(), read.message());
    const char* mine = own + done * esz;
    ReduceTwo(a.dtype, a.op, 2, dst + done * esz, peer_first ? tmp : mine,
              peer_first ? mine : tmp, len);
  }
  return Status();
}

// Two ranks, larger buffers: each rank reads its half of the peer's input
// (chunk by chunk, so the chunk is still in cache when it is reduced) and
// reduces it into its own output, then reads the other half of the result
// from the peer's output. One copy per half, no staging through the segment.
Status TwoRankDirectAllReduce(OpIo& io, const CollArgs& a) {
  SharedSegment& shm = *io.shm();
  const int r = io.rank(), peer = 1 - r;
  const size_t esz = ElementSize(a.dtype);
  const Blocks blocks = EvenBlocks(a.count, 2);
  ShmOp op(io, a);
  op.Post(a.count, 0, a.send, a.recv);
  TPX_PLUGIN_RETURN_IF_ERROR(op.WaitPeers(0, [&](int) { return a.count; }));
  const uint64_t peer_send = op.header(peer).send_addr, peer_recv = op.header(peer).recv_addr;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  const int64_t own_at = blocks.displs[r];
  TPX_PLUGIN_RETURN_IF_ERROR(ReduceWithPeer(io, a, peer_send + own_at * esz,
                                            send + own_at * esz, recv + own_at * esz,
                                            blocks.counts[r], /*peer_first=*/true));
  // Once the peer's half is reduced, it has also stopped reading this
  // rank's input (which may be this rank's output: in place).
  op.Raise(kReduced);
  TPX_PLUGIN_RETURN_IF_ERROR(op.WaitFor(kReduced));
  const int64_t at = blocks.displs[peer];
  if (blocks.counts[peer] > 0) {
    Status read = shm.ReadPeer(peer, peer_recv + at * esz, recv + at * esz,
                               blocks.counts[peer] * esz);
    if (!read.ok()) return io.Fail(read.code(), read.message());
  }
  // The peer may still be reading this rank's output.
  op.Raise(kFinished);
  return op.WaitFor(kFinished);
}

// Two ranks, larger buffers: each rank reads its block from the peer's input
// chunk by chunk and reduces it with its own block straight into its output.
// Each rank publishes the address of the block its peer reads (the ranks may
// lay out their inputs differently). Where the output overlaps that block,
// or overlaps this rank's own block other than exactly, the result goes
// through a buffer and is copied out once the peer has finished reading.
Status TwoRankDirectReduceScatter(OpIo& io, const CollArgs& a) {
  const int r = io.rank(), peer = 1 - r;
  const size_t esz = ElementSize(a.dtype);
  const uint64_t hash = HashCounts(a.send_counts);
  const char* send = static_cast<const char*>(a.send);
  const char* own = send + a.send_displs[r] * esz;
  const char* peers_block = send + a.send_displs[peer] * esz;
  const int64_t mine = a.send_counts[r];
  char* out = static_cast<char*>(a.recv);
  ShmOp op(io, a);
  op.Post(mine, hash, peers_block, a.recv);
  TPX_PLUGIN_RETURN_IF_ERROR(
      op.WaitPeers(hash, [&](int p) { return a.send_counts[p]; }));
  const uint64_t peer_block = op.header(peer).send_addr;
  const size_t out_bytes = mine * esz;
  const bool in_place = (out == own || Disjoint(out, own, out_bytes)) &&
                        Disjoint(out, peers_block, a.send_counts[peer] * esz);
  char* dst = in_place ? out : io.scratch(Scratch::kOut, out_bytes);
  // Own block first, as the ring and the slot path combine them.
  TPX_PLUGIN_RETURN_IF_ERROR(
      ReduceWithPeer(io, a, peer_block, own, dst, mine, /*peer_first=*/false));
  // The peer may still be reading this rank's input.
  op.Raise(kFinished);
  TPX_PLUGIN_RETURN_IF_ERROR(op.WaitFor(kFinished));
  if (!in_place && out_bytes > 0) std::memcpy(out, dst, out_bytes);
  return Status();
}

}  // namespace

bool ShmAllReduce(OpIo& io, const CollArgs& a, Status* status) {
  if (io.shm() == nullptr) return false;
  if (!SmallAllReduce(a, io.size())) {
    if (io.size() != 2 || !io.shm()->cma()) return false;
    *status = TwoRankDirectAllReduce(io, a);
    return true;
  }
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(a.dtype), asz = AccElementSize(a.dtype);
  const size_t bytes = a.count * esz;
  ShmOp op(io, a);
  CopyBlock(op.slot(r), a.send, bytes);
  op.Post(a.count, 0, a.send, a.recv);
  *status = op.WaitPeers(0, [&](int) { return a.count; });
  if (!status->ok()) return true;
  Inputs inputs(n);
  for (int i = 0; i < n; ++i) inputs[i] = i == r ? static_cast<const char*>(a.send) : op.slot(i);
  // Straight into the output where that cannot overwrite an input before
  // it is read (with two ranks both are read in one pass).
  const bool direct = esz == asz && n <= 3 && (n == 2 || a.send != a.recv);
  char* acc = direct ? static_cast<char*>(a.recv) : io.scratch(Scratch::kAcc, a.count * asz);
  TreeReduce(io, a.dtype, a.op, inputs.data(), n, acc, a.count);
  FromAcc(a.dtype, a.op, n, acc, a.recv, a.count);
  return true;
}

bool ShmAllGatherV(OpIo& io, const CollArgs& a, Status* status) {
  SharedSegment* shm = io.shm();
  if (shm == nullptr) return false;
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(a.dtype);
  const int64_t largest = *std::max_element(a.recv_counts.begin(), a.recv_counts.end());
  // A block through the slots is copied once more than one read directly
  // from the peer's buffer, which costs a system call and pinning the
  // peer's pages instead. Where the ranks can read each other, blocks over
  // largest_slot_block() (a quarter of a slot, or all of it where that
  // was measured faster) are read directly.
  const size_t block_bytes = largest * esz, slot_bytes = GetTunables().shm_bytes;
  const bool small =
      block_bytes <= slot_bytes && (!shm->cma() || block_bytes <= shm->largest_slot_block());
  if (!small && !shm->cma()) return false;
  char* recv = static_cast<char*>(a.recv);
  const char* send = static_cast<const char*>(a.send);
  const int64_t mine = a.recv_counts[r];
  // The path goes into what peers compare: ranks that took different ones
  // (which the segment's shared choice rules out) fail instead of reading
  // a slot nobody wrote.
  const uint64_t hash = HashCounts(a.recv_counts) ^ (small ? 0 : kDirectReadsTag);
  char* own = recv + a.recv_displs[r] * esz;
  const bool copy_own = mine > 0 && own != send;
  ShmOp op(io, a);
  if (small) {
    // Through the slots; the own block is copied while the peers post theirs.
    if (mine > 0) CopyBlock(op.slot(r), send, mine * esz);
    op.Post(mine, hash, send, recv);
    if (copy_own) {
      Disjoint(own, send, mine * esz) ? CopyBlock(own, send, mine * esz)
                                      : void(std::memmove(own, send, mine * esz));
    }
    *status = op.WaitPeers(hash, [&](int peer) { return a.recv_counts[peer]; });
    if (!status->ok()) return true;
    for (int i = 1; i < n; ++i) {
      const int peer = RankMod(r + i, n);
      const int64_t c = a.recv_counts[peer];
      if (c > 0) CopyBlock(recv + a.recv_displs[peer] * esz, op.slot(peer), c * esz);
    }
    return true;
  }
  // Larger blocks: the peers read them straight from the send buffer (one
  // copy per block). Piece by piece, each rank reads its peers' pieces and
  // then copies its own: a peer reads a piece of this rank's send buffer
  // while this rank copies it, so the piece comes from memory once for both.
  // Once it has read everything, a rank says so and copies its last own
  // piece while waiting for its peers to say the same (only then may its
  // caller reuse the send buffer).
  op.Post(mine, hash, send, recv);
  // An own block that overlaps the send buffer elsewhere cannot go in pieces.
  const bool own_in_pieces = copy_own && Disjoint(own, send, mine * esz);
  if (copy_own && !own_in_pieces) std::memmove(own, send, mine * esz);
  *status = op.WaitPeers(hash, [&](int peer) { return a.recv_counts[peer]; });
  if (!status->ok()) return true;
  const int64_t piece = std::max<int64_t>(1, GetTunables().cma_chunk_bytes / esz);
  for (int64_t at = 0; at < largest; at += piece) {
    for (int i = 1; i < n; ++i) {
      const int peer = RankMod(r + i, n);
      const int64_t len = std::min(piece, a.recv_counts[peer] - at);
      if (len <= 0) continue;
      Status read = shm->ReadPeer(peer, op.header(peer).send_addr + at * esz,
                                  recv + (a.recv_displs[peer] + at) * esz, len * esz);
      if (!read.ok()) {
        *status = io.Fail(read.code(), read.message());
        return true;
      }
    }
    if (at + piece >= largest) op.Raise(kFinished);
    const int64_t len = std::min(piece, mine - at);
    if (own_in_pieces && len > 0) std::memcpy(own + at * esz, send + at * esz, len * esz);
  }
  *status = op.WaitFor(kFinished);
  return true;
}

bool ShmReduceScatterV(OpIo& io, const CollArgs& a, Status* status) {
  if (io.shm() == nullptr) return false;
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(a.dtype), asz = AccElementSize(a.dtype);
  int64_t total = 0;
  for (int64_t c : a.send_counts) total += c;
  const Tunables& t = GetTunables();
  if (total * esz > t.shm_bytes) {
    if (n != 2 || !io.shm()->cma()) return false;
    *status = TwoRankDirectReduceScatter(io, a);
    return true;
  }
  const uint64_t hash = HashCounts(a.send_counts);
  ShmOp op(io, a);
  // The slot holds the peers' blocks, packed in rank order (this rank
  // reads its own block from `send`); block r is at `packed_r` in each.
  const char* send = static_cast<const char*>(a.send);
  int64_t packed_r = 0, at = 0;
  for (int b = 0; b < n; at += a.send_counts[b], ++b) {
    if (b == r) {
      packed_r = at;
    } else if (a.send_counts[b] > 0) {
      CopyBlock(op.slot(r) + at * esz, send + a.send_displs[b] * esz, a.send_counts[b] * esz);
    }
  }
  op.Post(a.send_counts[r], hash, a.send, a.recv);
  *status = op.WaitPeers(hash, [&](int peer) { return a.send_counts[peer]; });
  if (!status->ok()) return true;
  const int64_t mine = a.send_counts[r];
  if (mine == 0) return true;
  // The order of the UCX algorithm at this size: own block first, then the
  // others by rank (direct messages, more than two ranks and small), else
  // around the ring from rank r+1.
  const bool direct_order = n > 2 && total * esz <= t.small_bytes;
  Inputs inputs(n);
  for (int j = 0; j < n; ++j) {
    const int i = direct_order ? (j == 0 ? r : (j <= r ? j - 1 : j)) : RankMod(r + 1 + j, n);
    inputs[j] = i == r ? send + a.send_displs[r] * esz : op.slot(i) + packed_r * esz;
  }
  // Straight into the output where that cannot overwrite an input before
  // it is read: the peers' blocks are in their slots; this rank's own block
  // is read in the first pass with two ranks, else it must lie apart.
  char* out = static_cast<char*>(a.recv);
  const char* own = send + a.send_displs[r] * esz;
  const bool direct = esz == asz && (Disjoint(out, own, mine * esz) || (n == 2 && out == own));
  char* acc = direct ? out : io.scratch(Scratch::kAcc, mine * asz);
  Fold(a.dtype, a.op, inputs.data(), n, acc, mine);
  FromAcc(a.dtype, a.op, n, acc, out, mine);
  return true;
}

}  // namespace tpx::ucx
