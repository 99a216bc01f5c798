// RngStatesTracker: named generator states for model-parallel training.
//
// Tensor-parallel ranks need different dropout masks on their shards but the
// same mask on replicated activations; data-parallel replicas of a TP rank need
// the same numbers. The tracker holds one GeneratorState per name; Fork(name)
// makes that state the active generator for a scope and writes the advanced
// state back at the end, so the outer (default) generator is untouched.
//
//   TPX_RETURN_IF_ERROR(rng::ModelParallelManualSeed(1234, tp_rank, ep_rank, etp_rank));
//   {
//     TPX_ASSIGN_OR_RETURN(rng::RngFork fork, rng::GetRngTracker().Fork());  // TP state
//     TPX_ASSIGN_OR_RETURN(Variable y, ag::Dropout(x, 0.1));                  // draws from it
//   }                                                                         // default again
//
// Seeding modes (SeedMode):
//  - kPerRank (the reference behaviour): TP state seed = seed + 2718 + tp_rank,
//    expert = seed + 1024 + 100 * ep_rank + etp_rank; draws index the local tensor.
//  - kTpInvariant: the TP state seed is seed + 2718 on every TP rank (expert:
//    seed + 1024 + 100 * ep_rank), and draws on sharded tensors pass a ShardSpec
//    (rng/random.h) so each element's number depends on its GLOBAL index: the
//    numbers are the same at every TP size and for uneven shards.
// Data-parallel state = seed in both modes; the default generator is seeded with it.
//
// The active-generator pointer is per thread; the tracker's states are shared
// (not synchronised: seed and fork from one thread at a time per tracker).
#ifndef TPX_RNG_TRACKER_H_
#define TPX_RNG_TRACKER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rng/generator.h"

namespace tpx::rng {

inline constexpr char kDataParallelRng[] = "data-parallel-rng";
inline constexpr char kModelParallelRng[] = "model-parallel-rng";
inline constexpr char kExpertParallelRng[] = "expert-parallel-rng";

// Offsets of the reference seeding scheme.
inline constexpr uint64_t kTensorParallelSeedOffset = 2718;
inline constexpr uint64_t kExpertSeedOffset = 1024;
inline constexpr uint64_t kExpertRankStride = 100;

enum class SeedMode { kPerRank, kTpInvariant };

using RngStates = std::map<std::string, GeneratorState>;

class RngStatesTracker;

// RAII scope of RngStatesTracker::Fork: movable, restores the previous active
// generator and stores the forked state back when destroyed.
class RngFork {
 public:
  RngFork(RngFork&& other) noexcept;
  RngFork& operator=(RngFork&&) = delete;
  RngFork(const RngFork&) = delete;
  ~RngFork();

 private:
  friend class RngStatesTracker;
  RngFork(RngStatesTracker* tracker, std::string name, Generator* previous);
  RngStatesTracker* tracker_;
  std::string name_;
  std::unique_ptr<Generator> forked_;  // null when nested in a fork of the same name
  Generator* previous_;
};

class RngStatesTracker {
 public:
  // Errors: AlreadyExists if the seed or the name is already tracked.
  absl::Status Add(absl::string_view name, uint64_t seed);
  // Makes state `name` the active generator until the returned scope ends.
  // Forking a state that is already forked on this thread (a -> b -> a)
  // continues from its live position: draws are the same as without the
  // nesting, and the outermost fork of the name writes the state back.
  // Error: NotFound if the name was never added.
  absl::StatusOr<RngFork> Fork(absl::string_view name = kModelParallelRng);
  // Copies of the states (a fork in progress is written back at its end).
  RngStates GetStates() const { return states_; }
  void SetStates(RngStates states) { states_ = std::move(states); }
  // Forgets every state and seed.
  void Reset();
  bool Contains(absl::string_view name) const;
  // The mode chosen by ModelParallelManualSeed (kPerRank until then).
  SeedMode mode() const { return mode_; }
  void set_mode(SeedMode mode) { mode_ = mode; }

 private:
  friend class RngFork;
  RngStates states_;
  std::set<uint64_t> seeds_;
  SeedMode mode_ = SeedMode::kPerRank;
};

// The process-wide tracker.
RngStatesTracker& GetRngTracker();

// The generator draws use: the innermost Fork of this thread, else DefaultGenerator().
Generator& ActiveGenerator();

// Resets the tracker, seeds DefaultGenerator() with `seed` and adds the
// data-parallel, model-parallel and expert-parallel states (see SeedMode).
absl::Status ModelParallelManualSeed(uint64_t seed, int64_t tp_rank, int64_t ep_rank = 0,
                                     int64_t etp_rank = 0, SeedMode mode = SeedMode::kPerRank);

// Everything a replay needs: the active generator's state (the default
// generator outside any fork, the forked state inside one) and every tracker
// state. SetAllRngStates writes the first into the generator active then.
struct AllRngStates {
  GeneratorState active_state;
  RngStates tracker_states;
};
AllRngStates GetAllRngStates();
void SetAllRngStates(const AllRngStates& states);

}  // namespace tpx::rng

#endif  // TPX_RNG_TRACKER_H_
