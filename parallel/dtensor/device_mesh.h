// DeviceMesh: the ranks of a world communicator arranged as an N-d grid
// (e.g. 2x2 of 4 ranks), with one communicator per mesh dim connecting this
// rank to the ranks that differ from it only along that dim.
//
//   TPX_ASSIGN_OR_RETURN(DeviceMesh mesh,
//                        DeviceMesh::Create(*world, /*shape=*/{2, 2}, {"dp", "tp"}));
//   mesh.coordinate();                 // {rank / 2, rank % 2}
//   comm::Communicator& tp = mesh.group(1);
//   TPX_ASSIGN_OR_RETURN(DeviceMesh tp_mesh, mesh.SubMesh("tp"));   // 1-D, shares tp's group
//
// World rank r sits at the row-major coordinate of r. Create is collective
// over the world (it calls Split once per mesh dim, in mesh-dim order, on
// every rank). A DeviceMesh is a cheap shared handle; its groups live as long
// as any handle (or sub-mesh) does. The world communicator is only used during
// Create. Like communicators, one mesh is used from one thread at a time.
#ifndef TPX_PARALLEL_DTENSOR_DEVICE_MESH_H_
#define TPX_PARALLEL_DTENSOR_DEVICE_MESH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "parallel/dtensor/placement.h"

namespace tpx::dtensor {

class DeviceMesh {
 public:
  // Errors: InvalidArgument when the shape's product is not the world size,
  // a size is < 1, or dim_names (if given) are not one distinct non-empty name
  // per dim — all checked before any communication, identically on every
  // rank. Split errors otherwise.
  static absl::StatusOr<DeviceMesh> Create(comm::Communicator& world, std::vector<int64_t> shape,
                                           std::vector<std::string> dim_names = {});

  int64_t ndim() const { return static_cast<int64_t>(state_->shape.size()); }
  const std::vector<int64_t>& shape() const { return state_->shape; }
  // Size of one mesh dim; programming error if out of range.
  int64_t size(int64_t mesh_dim) const;
  // Number of ranks in the mesh.
  int64_t num_ranks() const { return static_cast<int64_t>(state_->ranks.size()); }
  // This rank's coordinate; coordinate()[i] == group(i).rank().
  const std::vector<int64_t>& coordinate() const { return state_->coordinate; }
  MeshPosition position() const { return {state_->shape, state_->coordinate}; }
  // World ranks in row-major mesh order.
  const std::vector<int64_t>& ranks() const { return state_->ranks; }
  // Names given at Create ("dim0", "dim1", ... by default).
  const std::vector<std::string>& dim_names() const { return state_->names; }
  // Index of the mesh dim with this name; NotFound naming the known names.
  absl::StatusOr<int64_t> DimIndex(absl::string_view name) const;
  // The communicator of mesh dim i (this rank's row along it); programming
  // error if out of range.
  comm::Communicator& group(int64_t mesh_dim) const;
  // The communicator of the named mesh dim.
  absl::StatusOr<comm::Communicator*> group(absl::string_view name) const;
  // The mesh of the named dims (in the given order) through this rank: the
  // ranks whose coordinates differ from this rank's only on those dims. No
  // communication: it shares those dims' communicators. Errors: an unknown
  // or repeated name.
  absl::StatusOr<DeviceMesh> SubMesh(absl::Span<const std::string> names) const;
  // The 1-D mesh along one mesh dim through this rank.
  absl::StatusOr<DeviceMesh> SubMesh(absl::string_view name) const;
  absl::StatusOr<DeviceMesh> SubMesh(int64_t mesh_dim) const;

  // "DeviceMesh(world, [2, 2] (dp, tp), ranks [0, 1, 2, 3])".
  std::string ToString() const;

  // Same world, same shape and same ranks in the same order.
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b);
  friend bool operator!=(const DeviceMesh& a, const DeviceMesh& b) { return !(a == b); }

 private:
  struct State {
    std::string world_name;
    std::vector<int64_t> shape;
    std::vector<int64_t> coordinate;
    std::vector<int64_t> ranks;
    std::vector<std::string> names;
    std::vector<std::shared_ptr<comm::Communicator>> groups;
  };
  explicit DeviceMesh(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  DeviceMesh SubMeshOfDims(const std::vector<int64_t>& mesh_dims) const;

  std::shared_ptr<const State> state_;
};

}  // namespace tpx::dtensor

#endif  // TPX_PARALLEL_DTENSOR_DEVICE_MESH_H_
