#include "parallel/parallel_state.h"

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace tpx::parallel {

absl::StatusOr<std::unique_ptr<ParallelState>> ParallelState::Create(comm::Communicator& world,
                                                                     int tensor_parallel_size) {
  const int n = world.size();
  if (tensor_parallel_size < 1 || n % tensor_parallel_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParallelState: world size ", n, " is not divisible by the tensor-parallel size ",
        tensor_parallel_size));
  }
  const int r = world.rank();
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> tp,
                       world.Split(r / tensor_parallel_size, r));
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> dp,
                       world.Split(r % tensor_parallel_size, r));
  auto state = std::unique_ptr<ParallelState>(new ParallelState());
  state->groups_.push_back(Entry{"world", &world, nullptr});
  TPX_RETURN_IF_ERROR(state->AddGroup("tp", std::move(tp)).status());
  TPX_RETURN_IF_ERROR(state->AddGroup("dp", std::move(dp)).status());
  return state;
}

comm::Communicator& ParallelState::group(GroupHandle handle) const {
  TPX_CHECK(handle.index >= 0 && handle.index < static_cast<int>(groups_.size()))
      << "ParallelState: invalid group handle " << handle.index;
  return *groups_[static_cast<size_t>(handle.index)].comm;
}

absl::StatusOr<GroupHandle> ParallelState::Find(absl::string_view name) const {
  std::string known;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].name == name) return GroupHandle{static_cast<int>(i)};
    absl::StrAppend(&known, i ? ", " : "", groups_[i].name);
  }
  return absl::NotFoundError(
      absl::StrCat("ParallelState: no group named '", name, "' (known: ", known, ")"));
}

absl::StatusOr<comm::Communicator*> ParallelState::Group(absl::string_view name) const {
  TPX_ASSIGN_OR_RETURN(GroupHandle h, Find(name));
  return &group(h);
}

absl::StatusOr<GroupHandle> ParallelState::AddGroup(std::string name,
                                                    std::unique_ptr<comm::Communicator> group) {
  if (Find(name).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("ParallelState: group '", name, "' exists"));
  }
  if (group == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelState: group '", name, "' is null"));
  }
  Entry e{std::move(name), group.get(), std::move(group)};
  groups_.push_back(std::move(e));
  return GroupHandle{static_cast<int>(groups_.size()) - 1};
}

}  // namespace tpx::parallel
