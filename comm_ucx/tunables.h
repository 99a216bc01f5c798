// Performance knobs of the UCX plugin, read once from the environment.
//
//   const Tunables& t = GetTunables();
//   size_t chunk = t.chunk_bytes;
//
// TPX_UCX_CHUNK_BYTES      pipeline chunk of ring algorithms (default 1 MiB)
// TPX_UCX_SMALL_BYTES      all-reduce/reduce/broadcast below this use
//                          latency-optimal trees (default 64 KiB)
// TPX_UCX_SPIN_US          longest busy-poll before yielding (default 50: a
//                          small collective's peer usually answers within
//                          it, and a yield costs more than the whole op);
//                          each worker adapts its window below it
//                          (Worker::spin_us)
// TPX_UCX_YIELD_US         sched_yield time before sleeping (default 2000)
// TPX_UCX_TICK_US          how long posted work may sit undriven before the
//                          executor thread runs it (default 200; up to 8
//                          ticks right after a waiting thread ran
//                          operations itself, as the executor then looks
//                          less often)
// TPX_UCX_BUSY_TICK_US     the executor's tick instead while the host has no
//                          idle CPU (every CPU with a runnable task besides
//                          the executor), where each of its wake-ups takes
//                          the core from a computing thread; posted work
//                          then waits up to this long for a thread to drive
//                          it (default 20000; not below TPX_UCX_TICK_US)
// TPX_UCX_SHM             0 keeps communicators whose ranks share a host off
//                          the shared-memory path (default 1)
// TPX_UCX_SHM_BYTES       largest buffer a rank copies through the shared
//                          segment per collective (default 64 KiB); larger
//                          all-gathers (from a quarter of it per rank) read
//                          peers' buffers directly (CMA)
// TPX_UCX_CMA             0 turns those direct reads off (default 1)
// TPX_UCX_SHM_MID_ALLGATHER  at 2 ranks with direct reads, the all-gather
//                          blocks from a quarter of TPX_UCX_SHM_BYTES up to
//                          all of it: 0 measures both ways when the
//                          communicator is made and takes the faster
//                          (default), 1 through the segment, 2 read
//                          directly; rank 0's setting decides
// TPX_UCX_CMA_CHUNK_BYTES  an all-gather reads each peer's block in pieces
//                          this large, copying its own block piece by piece
//                          between them (default 1 MiB, minimum 64)
// TPX_UCX_CHECK_LENGTHS    0 skips comparing each received length with the
//                          posted one (only to measure what the check costs;
//                          a size disagreement then goes undetected)
// A value that is not a non-negative integer, or below a knob's minimum, is
// replaced (default or minimum) with a warning in the host's log.
#ifndef TPX_COMM_UCX_TUNABLES_H_
#define TPX_COMM_UCX_TUNABLES_H_

#include <cstddef>
#include <cstdint>

namespace tpx::ucx {

struct Tunables {
  size_t chunk_bytes;
  size_t small_bytes;
  int64_t spin_us;
  int64_t yield_us;
  int64_t tick_us;
  int64_t busy_tick_us;
  bool check_lengths;
  bool shm;
  size_t shm_bytes;
  bool cma;
  size_t cma_chunk_bytes;
  int64_t shm_mid_allgather;  // 0 measure, 1 through the segment, 2 direct
};

const Tunables& GetTunables();

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_TUNABLES_H_
