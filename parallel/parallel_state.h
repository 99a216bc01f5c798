// ParallelState: the tensor-parallel and data-parallel groups of a run, built
// from the world communicator, plus any extra named groups.
//
// Rank order follows Megatron: the ranks of one tensor-parallel group are
// contiguous (world 8, tp 2: tp groups {0,1} {2,3} ...; dp groups {0,2,4,6}
// {1,3,5,7}). Groups are found by handle (cheap, for hot paths) or by name
// ("tp", "dp", "world", or names given to AddGroup), as in makani-style code.
//
//   TPX_ASSIGN_OR_RETURN(auto state, ParallelState::Create(world, /*tensor_parallel_size=*/2));
//   comm::Communicator& tp = state->tp();
//   TPX_ASSIGN_OR_RETURN(comm::Communicator* dp, state->Group("dp"));
//
// The world communicator must outlive the state. Not thread-safe for AddGroup.
#ifndef TPX_PARALLEL_PARALLEL_STATE_H_
#define TPX_PARALLEL_PARALLEL_STATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"

namespace tpx::parallel {

// Index of a group inside a ParallelState.
struct GroupHandle {
  int index = -1;
};

class ParallelState {
 public:
  // Splits world into tp groups of tensor_parallel_size contiguous ranks and
  // dp groups of the ranks with equal tp rank. Collective over world.
  // Errors: size < 1 or world size not divisible by it (message names both).
  static absl::StatusOr<std::unique_ptr<ParallelState>> Create(comm::Communicator& world,
                                                               int tensor_parallel_size);

  static constexpr GroupHandle kWorld{0};
  static constexpr GroupHandle kTensorParallel{1};
  static constexpr GroupHandle kDataParallel{2};

  comm::Communicator& world() const { return group(kWorld); }
  comm::Communicator& tp() const { return group(kTensorParallel); }
  comm::Communicator& dp() const { return group(kDataParallel); }
  int tensor_parallel_size() const { return tp().size(); }
  int tensor_parallel_rank() const { return tp().rank(); }
  int data_parallel_size() const { return dp().size(); }
  int data_parallel_rank() const { return dp().rank(); }

  // Programming error for an invalid handle.
  comm::Communicator& group(GroupHandle handle) const;
  // NotFound listing the known names.
  absl::StatusOr<GroupHandle> Find(absl::string_view name) const;
  absl::StatusOr<comm::Communicator*> Group(absl::string_view name) const;
  // Registers another group (e.g. "cp", or a Split of world); AlreadyExists on
  // a duplicate name.
  absl::StatusOr<GroupHandle> AddGroup(std::string name,
                                       std::unique_ptr<comm::Communicator> group);

 private:
  struct Entry {
    std::string name;
    comm::Communicator* comm = nullptr;
    std::unique_ptr<comm::Communicator> owned;
  };
  std::vector<Entry> groups_;
};

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_PARALLEL_STATE_H_
