#include "rng/tracker.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tpx::rng {
namespace {

thread_local Generator* active_generator = nullptr;

// The forks open on this thread that own their generator, innermost last.
struct OpenFork {
  const RngStatesTracker* tracker;
  std::string name;
  Generator* generator;
};
thread_local std::vector<OpenFork> open_forks;

Generator* OpenGenerator(const RngStatesTracker* tracker, const std::string& name) {
  for (const OpenFork& f : open_forks) {
    if (f.tracker == tracker && f.name == name) return f.generator;
  }
  return nullptr;
}

}  // namespace

RngFork::RngFork(RngStatesTracker* tracker, std::string name, Generator* previous)
    : tracker_(tracker), name_(std::move(name)), previous_(previous) {
  // A fork of a state that is already forked further out continues from its
  // live position, and the outer fork takes its progress home at its end.
  if (Generator* open = OpenGenerator(tracker_, name_)) {
    active_generator = open;
    return;
  }
  forked_ = std::make_unique<Generator>();
  forked_->set_state(tracker_->states_.at(name_));
  open_forks.push_back({tracker_, name_, forked_.get()});
  active_generator = forked_.get();
}

RngFork::RngFork(RngFork&& other) noexcept
    : tracker_(std::exchange(other.tracker_, nullptr)),
      name_(std::move(other.name_)),
      forked_(std::move(other.forked_)),
      previous_(other.previous_) {}

RngFork::~RngFork() {
  if (tracker_ == nullptr) return;
  active_generator = previous_;
  if (forked_ == nullptr) return;  // nested in a fork of the same state
  for (auto it = open_forks.begin(); it != open_forks.end(); ++it) {
    if (it->generator == forked_.get()) {
      open_forks.erase(it);
      break;
    }
  }
  // SetStates/Reset inside the fork may have dropped the name; then the
  // advanced state has nowhere to go, as with a replaced state dictionary.
  auto it = tracker_->states_.find(name_);
  if (it != tracker_->states_.end()) it->second = forked_->state();
}

absl::Status RngStatesTracker::Add(absl::string_view name, uint64_t seed) {
  if (seeds_.count(seed) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("RngStatesTracker::Add(\"", name, "\"): seed ", seed, " already exists"));
  }
  if (Contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("RngStatesTracker::Add: rng state \"", name, "\" already exists"));
  }
  seeds_.insert(seed);
  states_[std::string(name)] = GeneratorState{seed, 0};
  return absl::OkStatus();
}

absl::StatusOr<RngFork> RngStatesTracker::Fork(absl::string_view name) {
  if (!Contains(name)) {
    return absl::NotFoundError(
        absl::StrCat("RngStatesTracker::Fork: rng state \"", name, "\" is not added"));
  }
  return RngFork(this, std::string(name), active_generator);
}

void RngStatesTracker::Reset() {
  states_.clear();
  seeds_.clear();
}

bool RngStatesTracker::Contains(absl::string_view name) const {
  return states_.count(std::string(name)) != 0;
}

RngStatesTracker& GetRngTracker() {
  static RngStatesTracker* const tracker = new RngStatesTracker();
  return *tracker;
}

Generator& ActiveGenerator() {
  return active_generator != nullptr ? *active_generator : DefaultGenerator();
}

absl::Status ModelParallelManualSeed(uint64_t seed, int64_t tp_rank, int64_t ep_rank,
                                     int64_t etp_rank, SeedMode mode) {
  if (tp_rank < 0 || ep_rank < 0 || etp_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelParallelManualSeed: ranks must be >= 0, got tp_rank=", tp_rank,
        " ep_rank=", ep_rank, " etp_rank=", etp_rank));
  }
  const bool per_rank = mode == SeedMode::kPerRank;
  const uint64_t tp_seed =
      seed + kTensorParallelSeedOffset + (per_rank ? static_cast<uint64_t>(tp_rank) : 0);
  const uint64_t expert_seed = seed + kExpertSeedOffset +
                               kExpertRankStride * static_cast<uint64_t>(ep_rank) +
                               (per_rank ? static_cast<uint64_t>(etp_rank) : 0);
  RngStatesTracker& tracker = GetRngTracker();
  tracker.Reset();
  tracker.set_mode(mode);
  DefaultGenerator().ManualSeed(seed);
  absl::Status s = tracker.Add(kDataParallelRng, seed);
  if (s.ok()) s = tracker.Add(kModelParallelRng, tp_seed);
  if (s.ok()) s = tracker.Add(kExpertParallelRng, expert_seed);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("ModelParallelManualSeed(", seed, ", tp_rank=",
                                               tp_rank, ", ep_rank=", ep_rank, ", etp_rank=",
                                               etp_rank, "): ", s.message()));
  }
  return absl::OkStatus();
}

AllRngStates GetAllRngStates() {
  return AllRngStates{ActiveGenerator().state(), GetRngTracker().GetStates()};
}

void SetAllRngStates(const AllRngStates& states) {
  ActiveGenerator().set_state(states.active_state);
  GetRngTracker().SetStates(states.tracker_states);
}

}  // namespace tpx::rng
