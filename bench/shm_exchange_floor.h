// The least a collective through shared memory costs between processes of
// one host, as a yardstick for tpx's small-message path
// (comm_ucx/shm_collectives.h): each rank copies what its peers need into a
// shared buffer, raises its flag, waits for its peers' flags and reads their
// contributions (summing them for a reduction). Nothing else: no header, no
// checks, no dispatch, no queue. Processes' own buffers are private, so a
// copy into shared memory and a read from it are the two copies such a path
// cannot avoid without a system call per operation (CMA).
//
//   auto floor = ShmExchangeFloor::Create(world, max_bytes_per_rank);  // before forking
//   // in rank r of the forked ranks:
//   std::string e = (*floor)->Run(r, "all_reduce", bytes, send, recv);
//
// f32 sums; `bytes` as bench:collectives counts them (the whole buffer of an
// all_reduce, the gathered output of an all_gather, the scattered input of a
// reduce_scatter). A wait for a peer gives up with an error after
// `wait_limit`.
#ifndef TPX_BENCH_SHM_EXCHANGE_FLOOR_H_
#define TPX_BENCH_SHM_EXCHANGE_FLOOR_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tpx::bench {

class ShmExchangeFloor {
 public:
  // A shared mapping for `world` ranks of up to `max_bytes` each per
  // operation (what one rank copies in); call before forking the ranks.
  static absl::StatusOr<std::unique_ptr<ShmExchangeFloor>> Create(
      int world, int64_t max_bytes,
      std::chrono::milliseconds wait_limit = std::chrono::seconds(20));
  ~ShmExchangeFloor();
  ShmExchangeFloor(const ShmExchangeFloor&) = delete;
  ShmExchangeFloor& operator=(const ShmExchangeFloor&) = delete;

  // Whether Run takes `op` ("all_reduce", "all_gather", "reduce_scatter")
  // at `bytes`.
  bool Covers(const std::string& op, int64_t bytes) const;

  // One operation on rank `rank`; every rank runs the same sequence. "" or
  // why it failed (a peer that stopped raising its flag).
  std::string Run(int rank, const std::string& op, int64_t bytes, const float* send, float* recv);
  // An operation that exchanges nothing.
  std::string Barrier(int rank);

 private:
  struct Control;
  ShmExchangeFloor(int world, int64_t max_bytes, std::chrono::milliseconds wait_limit,
                   void* mapping, size_t mapping_bytes);
  float* slot(int rank, uint64_t op);
  // Raises `rank`'s flag to `op` and waits for every rank's.
  std::string Exchange(int rank, uint64_t op);

  int world_;
  int64_t max_bytes_;
  std::chrono::milliseconds wait_limit_;
  void* mapping_;
  size_t mapping_bytes_;
  Control* control_;
  uint32_t spins_before_yield_;
  // Operations this process has run (each rank's copy counts its own).
  uint64_t ops_ = 0;
};

}  // namespace tpx::bench

#endif  // TPX_BENCH_SHM_EXCHANGE_FLOOR_H_
