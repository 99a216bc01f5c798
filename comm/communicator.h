// Communicator: a group of ranks and every collective among them, on raw
// host buffers (pointer + element count + DType). Backends (UCX, NCCL, ...)
// implement Post(); argument validation, numbering and subgroup grouping
// live here once for all of them.
//
//   std::unique_ptr<Communicator> world = *comm::Init();
//   Work w = world->AllReduce(grad, n, DType::kF32, ReduceOp::kAvg);  // in place
//   TPX_RETURN_IF_ERROR(w.Wait());
//   auto tp = *world->Split(/*color=*/world->rank() / 2, /*key=*/world->rank());
//
// Every call returns a Work; invalid arguments give a Work that already
// failed with InvalidArgument naming the op, the argument and the rank, and
// the backend is never called. Calls on one communicator complete in issue
// order; every rank must issue the same collectives in the same order.
// Several communicators may be used at once (also from different threads);
// one communicator is used from one thread at a time.
//
// Layouts: counts and displacements are in elements. An empty displacement
// vector means "packed" (displs = exclusive prefix sum of counts). Ranks
// may contribute zero elements.
//
// CUDA tensors: a backend that works on device memory (device_memory(): a
// plugin with stream_wait, e.g. nccl) takes CUDA tensors in the Tensor forms.
// The op is queued after the work already on the tensors' device's current
// stream (KernelsFor(device)->CurrentStream()), runs on the backend's own
// stream, and Work::Wait() makes the current stream wait for it without
// blocking the host (comm/work.h). The tensors must stay alive until Wait()
// returned.
//
//   TPX_ASSIGN_OR_RETURN(Tensor g, Tensor::Empty({n}, DType::kF32, Device::CUDA(rank)));
//   TPX_RETURN_IF_ERROR(tp->AllReduce(g, ReduceOp::kSum).Wait());  // stream-ordered
//
// Host-only backends (ucx) reject CUDA tensors with InvalidArgument ("ucx
// backend takes CPU tensors; input is cuda:0 f32[4]"), as do all backends
// for tensors of one op on different devices or a CUDA tensor on another
// device than the communicator's. CPU tensors work with every backend.
#ifndef TPX_COMM_COMMUNICATOR_H_
#define TPX_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/collective.h"
#include "comm/work.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tpx::comm {

class Communicator {
 public:
  using Counts = absl::Span<const int64_t>;

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Unique name, e.g. "world" or "world/split1/c0".
  virtual const std::string& name() const = 0;
  // Backend name, e.g. "ucx".
  virtual const std::string& backend() const = 0;
  // Whether the backend works on CUDA device memory (takes CUDA tensors).
  virtual bool device_memory() const { return false; }
  // The CUDA device this communicator is bound to; -1 for host backends or
  // when the backend picks the device itself.
  virtual int device() const { return -1; }

  // recv[i] = op over ranks of send[i]. send == recv: in place.
  Work AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op);
  Work AllReduce(void* buffer, int64_t count, DType dtype, ReduceOp op);
  // buffer on `root` is copied to buffer on every rank.
  Work Broadcast(void* buffer, int64_t count, DType dtype, int root);
  // Like AllReduce, result only on `root` (recv ignored elsewhere, may be null).
  Work Reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, int root);
  Work Reduce(void* buffer, int64_t count, DType dtype, ReduceOp op, int root);
  // recv (size * count) = concatenation of every rank's send (count).
  Work AllGather(const void* send, void* recv, int64_t count, DType dtype);
  // In place: this rank's block is already at recv + rank * count.
  Work AllGather(void* recv, int64_t count, DType dtype);
  // Rank r contributes recv_counts[r] elements, landing at recv_displs[r].
  Work AllGatherV(const void* send, void* recv, Counts recv_counts, Counts recv_displs,
                  DType dtype);
  // send holds size * recv_count elements; rank r gets the reduction of block r.
  Work ReduceScatter(const void* send, void* recv, int64_t recv_count, DType dtype, ReduceOp op);
  // Block r of send is send_counts[r] elements at send_displs[r]; this rank
  // gets the reduction of its block (send_counts[rank] elements).
  Work ReduceScatterV(const void* send, void* recv, Counts send_counts, Counts send_displs,
                      DType dtype, ReduceOp op);
  // On root, recv (size * count) gets every rank's send (count).
  Work Gather(const void* send, void* recv, int64_t count, DType dtype, int root);
  // recv_counts / recv_displs are read on the root only (may be empty elsewhere).
  Work GatherV(const void* send, int64_t send_count, void* recv, Counts recv_counts,
               Counts recv_displs, DType dtype, int root);
  // Rank r gets block r (count elements) of root's send (size * count).
  Work Scatter(const void* send, void* recv, int64_t count, DType dtype, int root);
  // send_counts / send_displs are read on the root only.
  Work ScatterV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                int64_t recv_count, DType dtype, int root);
  // Block j (count elements) of send goes to rank j; block i of recv comes from rank i.
  Work AllToAll(const void* send, void* recv, int64_t count, DType dtype);
  Work AllToAllV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                 Counts recv_counts, Counts recv_displs, DType dtype);
  // Point-to-point, matched by (peer, tag) in issue order.
  Work Send(const void* buffer, int64_t count, DType dtype, int peer, int tag = 0);
  Work Recv(void* buffer, int64_t count, DType dtype, int peer, int tag = 0);
  Work Barrier();

  // ---- Tensor forms. Tensors must be defined and contiguous, all on one
  // device: the CPU, or the communicator's CUDA device when device_memory()
  // (see the top of this file); send and receive tensors must share a dtype. "Rows" are slices
  // along dim 0 (a 0-d tensor is one row); per-rank counts below are in rows, and every rank's
  // blocks are concatenated along dim 0. Shape mismatches give InvalidArgument naming the op, the
  // argument, both shapes and the rank.
  Work AllReduce(const Tensor& tensor, ReduceOp op);  // in place
  Work AllReduce(const Tensor& input, const Tensor& output, ReduceOp op);
  Work Broadcast(const Tensor& tensor, int root);
  Work Reduce(const Tensor& tensor, ReduceOp op, int root);  // in place, result on root
  // output: [size * rows(input), ...row shape].
  Work AllGather(const Tensor& input, const Tensor& output);
  // output: [sum(rows_per_rank), ...]; input has rows_per_rank[rank] rows.
  Work AllGatherV(const Tensor& input, const Tensor& output, Counts rows_per_rank);
  // input: [size * rows(output), ...].
  Work ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op);
  // input: [sum(rows_per_rank), ...]; output has rows_per_rank[rank] rows.
  Work ReduceScatterV(const Tensor& input, const Tensor& output, Counts rows_per_rank,
                      ReduceOp op);
  // output (read on root only): [size * rows(input), ...].
  Work Gather(const Tensor& input, const Tensor& output, int root);
  // input (read on root only): [size * rows(output), ...].
  Work Scatter(const Tensor& input, const Tensor& output, int root);
  // output (read on root only): [sum(rows_per_rank), ...]; input has
  // rows_per_rank[rank] rows.
  Work GatherV(const Tensor& input, const Tensor& output, Counts rows_per_rank, int root);
  // input (read on root only): [sum(rows_per_rank), ...]; output has
  // rows_per_rank[rank] rows.
  Work ScatterV(const Tensor& input, const Tensor& output, Counts rows_per_rank, int root);
  // input and output: [size * k, ...]; block j of input goes to rank j.
  Work AllToAll(const Tensor& input, const Tensor& output);
  // send_rows[j] rows of input go to rank j; recv_rows[j] rows come from rank j.
  Work AllToAllV(const Tensor& input, const Tensor& output, Counts send_rows, Counts recv_rows);
  Work Send(const Tensor& tensor, int peer, int tag = 0);
  Work Recv(const Tensor& tensor, int peer, int tag = 0);

  // MPI_Comm_split: ranks with the same `color` form a new communicator,
  // ordered by (key, rank in this communicator). color < 0: this rank joins
  // none and gets nullptr. Collective over this communicator.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

 protected:
  // Starts an already-validated operation.
  virtual Work Post(const CollectiveArgs& args) = 0;
  // A collective `op` whose arguments failed validation on this rank: returns
  // `why` as the Work's error. Backends that can also tell the peers, whose
  // matching collective then fails at once with this reason instead of
  // waiting for this rank (a call rejected on every rank alike leaves the
  // communicator usable). Send/recv rejections stay local.
  virtual Work Reject(absl::string_view op, absl::Status why) { return Work(std::move(why)); }
  // Issues the args a Tensor form checked (shapes; devices, which only the
  // Tensor forms set), or rejects the collective whose check failed.
  Work IssueChecked(absl::string_view op, absl::StatusOr<CollectiveArgs> checked);
  // Creates the subgroup after the host has grouped ranks: this rank becomes
  // `new_rank` of members.size(); members are ranks of this communicator in
  // new-rank order; `name` is the new communicator's unique name.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> SplitGrouped(
      int color, int key, std::vector<int32_t> members, int new_rank, std::string name) = 0;

 private:
  // Normalises, validates (comm/validate.h: counts, layouts, roots, peers,
  // dtypes, buffers) and posts `args`, or rejects them. Every typed call,
  // raw or Tensor form, ends here.
  Work Issue(CollectiveArgs args);

  int split_count_ = 0;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_COMMUNICATOR_H_
