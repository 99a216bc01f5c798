// Pipelined ring building blocks shared by the bandwidth-bound collectives.
// Each block is cut into chunks (TPX_UCX_CHUNK_BYTES) so that a chunk is
// forwarded to the right neighbour as soon as it arrived (and was reduced),
// overlapping transfers of consecutive steps. Works for any world size and
// for uneven and empty blocks.
//
//   Blocks b = EvenBlocks(count, world);
//   RingReduceScatter(io, dtype, op, in, b.displs, acc, b, kPhaseA);  // acc block `rank` reduced
//   RingAllGather(io, buf, elem_size, b, kPhaseB);  // every block everywhere
#ifndef TPX_COMM_UCX_RING_H_
#define TPX_COMM_UCX_RING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "comm/plugin_abi.h"
#include "comm_ucx/p2p.h"
#include "comm_ucx/status.h"

namespace tpx::ucx {

// Per-rank blocks of a buffer, in elements.
// Per-rank values (counts, offsets), inline up to eight ranks: an
// operation's arguments and blocks need no heap allocation there.
using PerRank = absl::InlinedVector<int64_t, 8>;

struct Blocks {
  PerRank counts;
  PerRank displs;
  int64_t max_count() const;
};
// `count` split into `parts` near-equal contiguous blocks.
Blocks EvenBlocks(int64_t count, int parts);
// Contiguous blocks with the given counts.
Blocks PackedBlocks(const PerRank& counts);

// Sub-id phases; a collective that runs two ring passes uses two phases.
enum Phase : uint32_t { kPhaseA = 0, kPhaseB = 1, kPhaseC = 2, kPhaseD = 3 };

// `input` holds this rank's contribution in `dtype`, block b at element
// `input_displs[b]` (counts as in `blocks`). Afterwards block `rank` of `acc`
// (accumulation type of `dtype`, see reduce_kernels.h, laid out by `blocks`)
// holds the reduction over all ranks; other blocks of `acc` are scratch.
// The input is read once, never copied whole; `acc` may be the input itself
// (same type and layout: in place).
Status RingReduceScatter(OpIo& io, tpx_dtype_t dtype, tpx_reduce_op_t op, const void* input,
                         const PerRank& input_displs, void* acc,
                         const Blocks& blocks, Phase phase);

// Afterwards `buf` holds every rank's block (elements of `elem_size` bytes).
// This rank's block is sent from `own_block` when given, else from its
// place in `buf`. `while_in_flight`, if set, runs once the first messages
// are posted (e.g. to copy the own block into place meanwhile).
Status RingAllGather(OpIo& io, void* buf, size_t elem_size, const Blocks& blocks, Phase phase,
                     const void* own_block = nullptr,
                     const std::function<void()>& while_in_flight = nullptr);

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_RING_H_
