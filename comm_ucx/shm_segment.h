// The shared-memory segment of a communicator whose ranks all run on one
// host: per rank a control block (progress counter, operation headers) and
// two data slots, mapped by every rank. Collectives use it to exchange small
// buffers without UCX (shm_collectives.h); with cross-memory attach (CMA,
// process_vm_readv) working between the ranks, large buffers are read
// straight out of a peer's memory.
//
//   std::unique_ptr<SharedSegment> shm;
//   Status s = SharedSegment::Create(config, local_peers, &shm);  // collective; null when unusable
//   shm->control(rank).stage.store(...);  char* slot = shm->slot(rank, parity);
//
// Creation is collective over the store: rank 0 creates a uniquely named
// POSIX shared-memory object and publishes its name and a random nonce;
// every rank maps it and checks the nonce (so ranks that merely look local
// but see another /dev/shm never share); every rank publishes whether that
// worked, and the segment is used only when it worked everywhere. The
// name is unlinked as soon as every rank has answered (by whichever rank
// maps it last, and by rank 0), so no segment outlives the communicator,
// even when a rank is killed. At two ranks that can read each other's
// memory, Create also measures whether mid-size all-gather blocks move
// faster through the slots or read directly (largest_slot_block()).
#ifndef TPX_COMM_UCX_SHM_SEGMENT_H_
#define TPX_COMM_UCX_SHM_SEGMENT_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/status.h"

namespace tpx::ucx {

// What a rank posts about the collective it runs through the segment, so
// that peers can check that they run the same one with the same sizes.
struct ShmHeader {
  uint64_t coll_seq;  // the communicator's collective number
  uint32_t kind;
  uint16_t dtype;
  uint16_t op;
  int64_t count;        // this rank's element count (v-collectives: its block)
  uint64_t counts_hash;  // of the per-rank counts (v-collectives)
  uint64_t send_addr;  // buffers in this rank's address space (CMA reads)
  uint64_t recv_addr;
};

// A rank's operations of one parity (op number & 1): its progress through
// the latest of them and what it posted for it, in one cache line, so that
// a peer that sees the stage gets the header with it.
struct alignas(64) ShmOpLine {
  // Monotonic: 4 * op + phase (1 posted, 2 first pass done, 3 finished).
  std::atomic<uint64_t> stage;
  ShmHeader header;
};
static_assert(sizeof(ShmOpLine) == 64, "stage and header share one cache line");

// One rank's control block; its own cache lines.
struct alignas(128) ShmControl {
  ShmOpLine line[2];  // by operation parity
  // 1 + the collective number of this rank's latest operation through the
  // segment: a peer running that collective over UCX instead has a
  // different idea of its size. Apart from the lines peers poll.
  alignas(64) std::atomic<uint64_t> last_coll;
  // Only while the segment is made (SharedSegment::Create measuring the
  // all-gather paths): the steps this rank has reached, and where its
  // measured block is in its own address space.
  alignas(64) std::atomic<uint64_t> setup_step;
  uint64_t setup_block_addr;
  // Rank `rank`'s stage word for stage `stage` (4 * op + phase): that of
  // the op's parity, which reached `stage` once the rank did.
  std::atomic<uint64_t>& stage_for(uint64_t stage) { return line[(stage >> 2) & 1].stage; }
};

class SharedSegment {
 public:
  // `pids` are the ranks' process ids (this host). Collective over the
  // store; on success *out is the segment, or null when some rank cannot
  // use it (then the communicator uses UCX only). Errors are store failures.
  static Status Create(const tpx_comm_config_v1_t& config, const std::vector<int>& pids,
                       bool cma_ok, std::unique_ptr<SharedSegment>* out);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Bytes each data slot holds.
  size_t slot_bytes() const { return slot_bytes_; }
  ShmControl& control(int rank) { return controls_[rank]; }
  char* slot(int rank, int parity) {
    return data_ + (static_cast<size_t>(rank) * 2 + parity) * slot_bytes_;
  }
  // Whether every rank can read every other rank's memory (CMA).
  bool cma() const { return cma_; }
  // With cma(): the largest all-gather block that still goes through the
  // slots; larger ones are read directly. A quarter of a slot, or (two
  // ranks, where Create measured that faster or TPX_UCX_SHM_MID_ALLGATHER
  // says so) a whole slot. The same on every rank.
  size_t largest_slot_block() const { return largest_slot_block_; }
  // Copies `bytes` at `remote` in rank `peer`'s address space to `local`;
  // an error names the peer.
  Status ReadPeer(int peer, uint64_t remote, void* local, size_t bytes) const;

  // Operations run through the segment so far (the next one's number).
  uint64_t ops() const { return ops_; }
  void NextOp() { ++ops_; }

 private:
  SharedSegment() = default;
  // Two ranks: this rank's best time over a few rounds, in nanoseconds, to
  // get a freshly written block of `bytes` from its peer through the slots
  // (copied in by the peer, then out) and read directly; false when the
  // peer did not keep pace or a read failed.
  bool MeasureBlockPaths(size_t bytes, int64_t* via_slots_ns, int64_t* direct_ns);
  // Sets largest_slot_block_ (every rank the same), collectively over the
  // store, after every rank has mapped the segment.
  Status ChooseAllGatherPaths(const tpx_comm_config_v1_t& config, const std::string& prefix,
                              char rank0_mode);

  int rank_ = 0;
  int size_ = 0;
  size_t slot_bytes_ = 0;
  size_t map_bytes_ = 0;
  void* map_ = nullptr;
  ShmControl* controls_ = nullptr;
  char* data_ = nullptr;
  bool cma_ = false;
  size_t largest_slot_block_ = 0;
  std::vector<int> pids_;
  uint64_t ops_ = 0;
};

// Process identity for the CMA probe: every rank publishes the address and
// value of a word in its memory; a peer that reads that value back through
// process_vm_readv can read this rank's buffers.
struct CmaProbe {
  uint64_t address = 0;
  uint64_t value = 0;
};
// This process's probe word (stable for the process's lifetime).
CmaProbe OwnCmaProbe();
// Whether `probe` of process `pid` reads back correctly.
bool CmaWorks(int pid, const CmaProbe& probe);

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_SHM_SEGMENT_H_
