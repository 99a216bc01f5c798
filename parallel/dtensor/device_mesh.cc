#include "parallel/dtensor/device_mesh.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace tpx::dtensor {
namespace {

// Row-major linear index of `coordinate`, skipping mesh dim `skip` (-1: none).
int64_t LinearIndex(const std::vector<int64_t>& shape, const std::vector<int64_t>& coordinate,
                    int64_t skip) {
  int64_t index = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (static_cast<int64_t>(k) == skip) continue;
    index = index * shape[k] + coordinate[k];
  }
  return index;
}

}  // namespace

absl::StatusOr<DeviceMesh> DeviceMesh::Create(comm::Communicator& world, std::vector<int64_t> shape,
                                              std::vector<std::string> dim_names) {
  int64_t total = 1;
  for (int64_t s : shape) {
    if (s < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceMesh::Create: mesh shape ", ShapeString(shape),
                       " has a size < 1 (on rank ", world.rank(), ")"));
    }
    total *= s;
  }
  if (shape.empty() || total != world.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMesh::Create: mesh shape ", ShapeString(shape), " holds ", total,
                     " ranks but communicator '", world.name(), "' has ", world.size(),
                     " (on rank ", world.rank(), ")"));
  }
  if (dim_names.empty()) {
    for (size_t i = 0; i < shape.size(); ++i) dim_names.push_back(absl::StrCat("dim", i));
  }
  std::set<std::string> distinct(dim_names.begin(), dim_names.end());
  if (dim_names.size() != shape.size() || distinct.size() != dim_names.size() ||
      distinct.count("") > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceMesh::Create: dim names (", absl::StrJoin(dim_names, ", "),
        ") must be one distinct non-empty name per dim of mesh shape ", ShapeString(shape)));
  }

  auto state = std::make_shared<State>();
  state->world_name = world.name();
  state->shape = shape;
  state->names = std::move(dim_names);
  state->coordinate.assign(shape.size(), 0);
  int64_t rest = world.rank();
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    state->coordinate[i] = rest % shape[i];
    rest /= shape[i];
  }
  for (int64_t r = 0; r < total; ++r) state->ranks.push_back(r);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int color = static_cast<int>(LinearIndex(shape, state->coordinate, i));
    const int key = static_cast<int>(state->coordinate[i]);
    TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> group, world.Split(color, key));
    TPX_CHECK(group != nullptr && group->rank() == key && group->size() == shape[i])
        << "DeviceMesh::Create: split of mesh dim " << i << " gave an unexpected group";
    state->groups.push_back(std::move(group));
  }
  return DeviceMesh(std::move(state));
}

int64_t DeviceMesh::size(int64_t mesh_dim) const {
  TPX_CHECK(mesh_dim >= 0 && mesh_dim < ndim())
      << "DeviceMesh::size: mesh dim " << mesh_dim << " of a " << ndim() << "-d mesh";
  return state_->shape[mesh_dim];
}

absl::StatusOr<int64_t> DeviceMesh::DimIndex(absl::string_view name) const {
  for (size_t i = 0; i < state_->names.size(); ++i) {
    if (state_->names[i] == name) return static_cast<int64_t>(i);
  }
  return absl::NotFoundError(absl::StrCat("DeviceMesh: no mesh dim named '", name,
                                          "' (dims: ", absl::StrJoin(state_->names, ", "), ")"));
}

comm::Communicator& DeviceMesh::group(int64_t mesh_dim) const {
  TPX_CHECK(mesh_dim >= 0 && mesh_dim < ndim())
      << "DeviceMesh::group: mesh dim " << mesh_dim << " of a " << ndim() << "-d mesh";
  return *state_->groups[mesh_dim];
}

absl::StatusOr<comm::Communicator*> DeviceMesh::group(absl::string_view name) const {
  TPX_ASSIGN_OR_RETURN(int64_t i, DimIndex(name));
  return &group(i);
}

absl::StatusOr<DeviceMesh> DeviceMesh::SubMesh(absl::Span<const std::string> names) const {
  std::vector<int64_t> dims;
  for (const std::string& name : names) {
    TPX_ASSIGN_OR_RETURN(int64_t i, DimIndex(name));
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceMesh::SubMesh: mesh dim '", name, "' named twice"));
    }
    dims.push_back(i);
  }
  if (dims.empty()) return absl::InvalidArgumentError("DeviceMesh::SubMesh: no mesh dims named");
  return SubMeshOfDims(dims);
}

absl::StatusOr<DeviceMesh> DeviceMesh::SubMesh(absl::string_view name) const {
  TPX_ASSIGN_OR_RETURN(int64_t i, DimIndex(name));
  return SubMeshOfDims({i});
}

absl::StatusOr<DeviceMesh> DeviceMesh::SubMesh(int64_t mesh_dim) const {
  if (mesh_dim < 0 || mesh_dim >= ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMesh::SubMesh: mesh dim ", mesh_dim, " of a ", ndim(), "-d mesh"));
  }
  return SubMeshOfDims({mesh_dim});
}

DeviceMesh DeviceMesh::SubMeshOfDims(const std::vector<int64_t>& mesh_dims) const {
  auto sub = std::make_shared<State>();
  sub->world_name = state_->world_name;
  for (int64_t i : mesh_dims) {
    sub->shape.push_back(state_->shape[i]);
    sub->coordinate.push_back(state_->coordinate[i]);
    sub->names.push_back(state_->names[i]);
    sub->groups.push_back(state_->groups[i]);
  }
  // Enumerate the sub-mesh row-major, other coordinates fixed at this rank's.
  std::vector<int64_t> c = state_->coordinate;
  const int64_t count = NumElements(sub->shape);
  for (int64_t linear = 0; linear < count; ++linear) {
    int64_t rest = linear;
    for (int64_t k = static_cast<int64_t>(mesh_dims.size()) - 1; k >= 0; --k) {
      c[mesh_dims[k]] = rest % sub->shape[k];
      rest /= sub->shape[k];
    }
    sub->ranks.push_back(state_->ranks[LinearIndex(state_->shape, c, -1)]);
  }
  return DeviceMesh(std::move(sub));
}

std::string DeviceMesh::ToString() const {
  return absl::StrCat("DeviceMesh(", state_->world_name, ", ", ShapeString(state_->shape), " (",
                      absl::StrJoin(state_->names, ", "), "), ranks ", ShapeString(state_->ranks),
                      ")");
}

bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
  return a.state_ == b.state_ ||
         (a.state_->world_name == b.state_->world_name && a.state_->shape == b.state_->shape &&
          a.state_->ranks == b.state_->ranks);
}

}  // namespace tpx::dtensor
