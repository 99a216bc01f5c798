#include "comm_ucx/ring.h"

#include <algorithm>

#include "comm_ucx/reduce_kernels.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

// The chunking of one block, identical on sender and receiver.
struct Chunking {
  int64_t per_chunk;  // elements
  int64_t Count(int64_t block_count) const { return (block_count + per_chunk - 1) / per_chunk; }
  int64_t Begin(int64_t c) const { return c * per_chunk; }
  int64_t Length(int64_t block_count, int64_t c) const {
    return std::min(per_chunk, block_count - c * per_chunk);
  }
};

Chunking ChunkingFor(size_t elem_size) {
  return Chunking{std::max<int64_t>(1, GetTunables().chunk_bytes / elem_size)};
}

}  // namespace

int64_t Blocks::max_count() const {
  int64_t m = 0;
  for (int64_t c : counts) m = std::max(m, c);
  return m;
}

Blocks EvenBlocks(int64_t count, int parts) {
  Blocks b;
  int64_t base = count / parts, extra = count % parts, offset = 0;
  for (int i = 0; i < parts; ++i) {
    int64_t c = base + (i < extra ? 1 : 0);
    b.counts.push_back(c);
    b.displs.push_back(offset);
    offset += c;
  }
  return b;
}

Blocks PackedBlocks(const PerRank& counts) {
  Blocks b;
  int64_t offset = 0;
  for (int64_t c : counts) {
    b.counts.push_back(c);
    b.displs.push_back(offset);
    offset += c;
  }
  return b;
}

Status RingReduceScatter(OpIo& io, tpx_dtype_t dtype, tpx_reduce_op_t op, const void* input,
                         const PerRank& input_displs, void* acc,
                         const Blocks& blocks, Phase phase) {
  const int n = io.size(), r = io.rank();
  const size_t esz = ElementSize(dtype), asz = AccElementSize(dtype);
  const char* in = static_cast<const char*>(input);
  char* base = static_cast<char*>(acc);
  auto in_block = [&](int b) { return in + input_displs[b] * esz; };
  auto acc_block = [&](int b) { return base + blocks.displs[b] * asz; };
  if (n == 1) {
    ToAcc(dtype, in_block(0), acc_block(0), blocks.counts[0]);
    return Status();
  }
  const int right = RankMod(r + 1, n), left = RankMod(r - 1, n);
  const Chunking ch = ChunkingFor(asz);
  const int64_t slot_elems = blocks.max_count();
  const int64_t max_chunks = ch.Count(slot_elems);
  char* tmp = io.scratch(Scratch::kTmp, 2 * slot_elems * asz);
  // At step s this rank sends block r-s-1 and receives block r-s-2 from the
  // left, combining it with its own input into `acc`; the block it reduced at
  // step s is the one it sends at step s+1. Each block is combined once, and
  // after n-1 steps block r is complete.
  auto recv_block = [&](int s) { return RankMod(r - s - 2, n); };
  auto index = [&](int s, int64_t c) { return static_cast<uint64_t>(s) * max_chunks + c; };
  std::vector<std::vector<size_t>> recvs(n - 1);
  auto post_recvs = [&](int s) {
    const int b = recv_block(s);
    char* slot = tmp + (s % 2) * slot_elems * asz;
    for (int64_t c = 0; c < ch.Count(blocks.counts[b]); ++c) {
      recvs[s].push_back(io.Recv(left, Sub(phase, index(s, c)), slot + ch.Begin(c) * asz,
                                 ch.Length(blocks.counts[b], c) * asz));
    }
  };
  post_recvs(0);
  {
    // Step 0 sends the raw input block, widened first if its type differs.
    const int b = RankMod(r - 1, n);
    const char* src = in_block(b);
    if (asz != esz) {
      ToAcc(dtype, src, acc_block(b), blocks.counts[b]);
      src = acc_block(b);
    }
    for (int64_t c = 0; c < ch.Count(blocks.counts[b]); ++c) {
      io.Send(right, Sub(phase, index(0, c)), src + ch.Begin(c) * asz,
              ch.Length(blocks.counts[b], c) * asz);
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    // Slot (s+1)%2 was last used by step s-1, fully reduced by now.
    if (s + 1 < n - 1) post_recvs(s + 1);
    const int b = recv_block(s);
    const char* slot = tmp + (s % 2) * slot_elems * asz;
    for (int64_t c = 0; c < ch.Count(blocks.counts[b]); ++c) {
      TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(recvs[s][c]));
      const int64_t len = ch.Length(blocks.counts[b], c);
      char* dst = acc_block(b) + ch.Begin(c) * asz;
      ReduceInto(dtype, op, dst, in_block(b) + ch.Begin(c) * esz, slot + ch.Begin(c) * asz, len);
      if (s + 1 < n - 1) io.Send(right, Sub(phase, index(s + 1, c)), dst, len * asz);
    }
  }
  return io.WaitAll();
}

Status RingAllGather(OpIo& io, void* buf, size_t elem_size, const Blocks& blocks, Phase phase,
                     const void* own_block, const std::function<void()>& while_in_flight) {
  const int n = io.size(), r = io.rank();
  if (n == 1) {
    if (while_in_flight) while_in_flight();
    return Status();
  }
  const int right = RankMod(r + 1, n), left = RankMod(r - 1, n);
  // Chunks only let a block be forwarded before it fully arrived; with two
  // ranks nothing is forwarded and each block goes as one message (one
  // rendezvous, one single-copy transfer).
  const Chunking ch =
      n == 2 ? Chunking{std::max<int64_t>(1, blocks.max_count())} : ChunkingFor(elem_size);
  const int64_t max_chunks = ch.Count(blocks.max_count());
  char* base = static_cast<char*>(buf);
  // At step s this rank sends block r-s and receives block r-s-1, which it
  // forwards at step s+1. Receives land in place, so all are posted first.
  auto index = [&](int s, int64_t c) { return static_cast<uint64_t>(s) * max_chunks + c; };
  auto chunk_ptr = [&](int b, int64_t c) {
    return base + (blocks.displs[b] + ch.Begin(c)) * elem_size;
  };
  std::vector<std::vector<size_t>> recvs(n - 1);
  for (int s = 0; s < n - 1; ++s) {
    const int b = RankMod(r - s - 1, n);
    for (int64_t c = 0; c < ch.Count(blocks.counts[b]); ++c) {
      recvs[s].push_back(io.Recv(left, Sub(phase, index(s, c)), chunk_ptr(b, c),
                                 ch.Length(blocks.counts[b], c) * elem_size));
    }
  }
  const char* own = own_block != nullptr ? static_cast<const char*>(own_block) : chunk_ptr(r, 0);
  for (int64_t c = 0; c < ch.Count(blocks.counts[r]); ++c) {
    io.Send(right, Sub(phase, index(0, c)), own + ch.Begin(c) * elem_size,
            ch.Length(blocks.counts[r], c) * elem_size);
  }
  if (while_in_flight) while_in_flight();
  for (int s = 0; s + 1 < n - 1; ++s) {
    const int b = RankMod(r - s - 1, n);
    for (int64_t c = 0; c < ch.Count(blocks.counts[b]); ++c) {
      TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(recvs[s][c]));
      io.Send(right, Sub(phase, index(s + 1, c)), chunk_ptr(b, c),
              ch.Length(blocks.counts[b], c) * elem_size);
    }
  }
  return io.WaitAll();
}

}  // namespace tpx::ucx
