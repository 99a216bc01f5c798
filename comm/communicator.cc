#include "comm/communicator.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/make_collective.h"
#include "comm/validate.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

using K = CollectiveKind;

PerRankCounts ToCounts(absl::Span<const int64_t> v) { return {v.begin(), v.end()}; }

PerRankCounts Uniform(int size, int64_t count) { return PerRankCounts(size, count); }

CollectiveArgs Make(K kind, const char* name, DType dtype) {
  CollectiveArgs args;
  args.kind = kind;
  args.name = name;
  args.dtype = dtype;
  return args;
}

}  // namespace

Work Communicator::Issue(CollectiveArgs args) {
  NormalizeCollective(args, rank(), size());
  absl::Status valid = ValidateCollective(args, rank(), size());
  if (!valid.ok()) {
    if (IsPointToPoint(args.kind)) return Work(std::move(valid));
    return Reject(args.name, std::move(valid));
  }
  return Post(args);
}

Work Communicator::IssueChecked(absl::string_view op, absl::StatusOr<CollectiveArgs> checked) {
  if (checked.ok()) return Issue(*std::move(checked));
  if (op == "send" || op == "recv") return Work(checked.status());
  return Reject(op, checked.status());
}

namespace internal {

CollectiveArgs MakeAllReduce(const void* send, void* recv, int64_t count, DType dtype,
                             ReduceOp op) {
  CollectiveArgs a = Make(K::kAllReduce, "all_reduce", dtype);
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.op = op;
  return a;
}

CollectiveArgs MakeBroadcast(void* buffer, int64_t count, DType dtype, int root) {
  CollectiveArgs a = Make(K::kBroadcast, "broadcast", dtype);
  a.send = buffer;
  a.recv = buffer;
  a.count = count;
  a.peer = root;
  return a;
}

CollectiveArgs MakeReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                          int root) {
  CollectiveArgs a = Make(K::kReduce, "reduce", dtype);
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.op = op;
  a.peer = root;
  return a;
}

CollectiveArgs MakeAllGather(const void* send, void* recv, int64_t count, DType dtype, int size) {
  CollectiveArgs a = Make(K::kAllGatherV, "all_gather", dtype);
  a.send = send;
  a.recv = recv;
  a.recv_counts = Uniform(size, count);
  return a;
}

CollectiveArgs MakeAllGatherV(const void* send, void* recv, Counts recv_counts,
                              Counts recv_displs, DType dtype) {
  CollectiveArgs a = Make(K::kAllGatherV, "all_gather_v", dtype);
  a.send = send;
  a.recv = recv;
  a.recv_counts = ToCounts(recv_counts);
  a.recv_displs = ToCounts(recv_displs);
  return a;
}

CollectiveArgs MakeReduceScatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                 ReduceOp op, int size) {
  CollectiveArgs a = Make(K::kReduceScatterV, "reduce_scatter", dtype);
  a.send = send;
  a.recv = recv;
  a.op = op;
  a.send_counts = Uniform(size, recv_count);
  return a;
}

CollectiveArgs MakeReduceScatterV(const void* send, void* recv, Counts send_counts,
                                  Counts send_displs, DType dtype, ReduceOp op) {
  CollectiveArgs a = Make(K::kReduceScatterV, "reduce_scatter_v", dtype);
  a.send = send;
  a.recv = recv;
  a.op = op;
  a.send_counts = ToCounts(send_counts);
  a.send_displs = ToCounts(send_displs);
  return a;
}

CollectiveArgs MakeGather(const void* send, void* recv, int64_t count, DType dtype, int root,
                          int rank, int size) {
  CollectiveArgs a = Make(K::kGatherV, "gather", dtype);
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.peer = root;
  if (rank == root) a.recv_counts = Uniform(size, count);
  return a;
}

CollectiveArgs MakeScatter(const void* send, void* recv, int64_t count, DType dtype, int root,
                           int rank, int size) {
  CollectiveArgs a = Make(K::kScatterV, "scatter", dtype);
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.peer = root;
  if (rank == root) a.send_counts = Uniform(size, count);
  return a;
}

CollectiveArgs MakeGatherV(const void* send, int64_t send_count, void* recv, Counts recv_counts,
                           Counts recv_displs, DType dtype, int root, int rank) {
  CollectiveArgs a = Make(K::kGatherV, "gather_v", dtype);
  a.send = send;
  a.recv = recv;
  a.count = send_count;
  a.peer = root;
  if (rank == root) {
    a.recv_counts = ToCounts(recv_counts);
    a.recv_displs = ToCounts(recv_displs);
  }
  return a;
}

CollectiveArgs MakeScatterV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                            int64_t recv_count, DType dtype, int root, int rank) {
  CollectiveArgs a = Make(K::kScatterV, "scatter_v", dtype);
  a.send = send;
  a.recv = recv;
  a.count = recv_count;
  a.peer = root;
  if (rank == root) {
    a.send_counts = ToCounts(send_counts);
    a.send_displs = ToCounts(send_displs);
  }
  return a;
}

CollectiveArgs MakeAllToAll(const void* send, void* recv, int64_t count, DType dtype, int size) {
  CollectiveArgs a = Make(K::kAllToAllV, "all_to_all", dtype);
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.send_counts = Uniform(size, count);
  a.recv_counts = Uniform(size, count);
  return a;
}

CollectiveArgs MakeAllToAllV(const void* send, Counts send_counts, Counts send_displs,
                             void* recv, Counts recv_counts, Counts recv_displs, DType dtype) {
  CollectiveArgs a = Make(K::kAllToAllV, "all_to_all_v", dtype);
  a.send = send;
  a.recv = recv;
  a.send_counts = ToCounts(send_counts);
  a.send_displs = ToCounts(send_displs);
  a.recv_counts = ToCounts(recv_counts);
  a.recv_displs = ToCounts(recv_displs);
  return a;
}

CollectiveArgs MakeSend(const void* buffer, int64_t count, DType dtype, int peer, int tag) {
  CollectiveArgs a = Make(K::kSend, "send", dtype);
  a.send = buffer;
  a.count = count;
  a.peer = peer;
  a.tag = tag;
  return a;
}

CollectiveArgs MakeRecv(void* buffer, int64_t count, DType dtype, int peer, int tag) {
  CollectiveArgs a = Make(K::kRecv, "recv", dtype);
  a.recv = buffer;
  a.count = count;
  a.peer = peer;
  a.tag = tag;
  return a;
}

}  // namespace internal

using namespace internal;  // the Make* builders of make_collective.h

Work Communicator::AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                             ReduceOp op) {
  return Issue(MakeAllReduce(send, recv, count, dtype, op));
}

Work Communicator::AllReduce(void* buffer, int64_t count, DType dtype, ReduceOp op) {
  return AllReduce(buffer, buffer, count, dtype, op);
}

Work Communicator::Broadcast(void* buffer, int64_t count, DType dtype, int root) {
  return Issue(MakeBroadcast(buffer, count, dtype, root));
}

Work Communicator::Reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                          int root) {
  return Issue(MakeReduce(send, recv, count, dtype, op, root));
}

Work Communicator::Reduce(void* buffer, int64_t count, DType dtype, ReduceOp op, int root) {
  return Reduce(buffer, buffer, count, dtype, op, root);
}

Work Communicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  return Issue(MakeAllGather(send, recv, count, dtype, size()));
}

Work Communicator::AllGather(void* recv, int64_t count, DType dtype) {
  const void* own = recv == nullptr
                        ? nullptr
                        : static_cast<const char*>(recv) +
                              std::max<int64_t>(count, 0) * rank() * SizeOf(dtype);
  return AllGather(own, recv, count, dtype);
}

Work Communicator::AllGatherV(const void* send, void* recv, Counts recv_counts,
                              Counts recv_displs, DType dtype) {
  return Issue(MakeAllGatherV(send, recv, recv_counts, recv_displs, dtype));
}

Work Communicator::ReduceScatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                 ReduceOp op) {
  return Issue(MakeReduceScatter(send, recv, recv_count, dtype, op, size()));
}

Work Communicator::ReduceScatterV(const void* send, void* recv, Counts send_counts,
                                  Counts send_displs, DType dtype, ReduceOp op) {
  return Issue(MakeReduceScatterV(send, recv, send_counts, send_displs, dtype, op));
}

Work Communicator::Gather(const void* send, void* recv, int64_t count, DType dtype, int root) {
  return Issue(MakeGather(send, recv, count, dtype, root, rank(), size()));
}

Work Communicator::GatherV(const void* send, int64_t send_count, void* recv, Counts recv_counts,
                           Counts recv_displs, DType dtype, int root) {
  return Issue(
      MakeGatherV(send, send_count, recv, recv_counts, recv_displs, dtype, root, rank()));
}

Work Communicator::Scatter(const void* send, void* recv, int64_t count, DType dtype, int root) {
  return Issue(MakeScatter(send, recv, count, dtype, root, rank(), size()));
}

Work Communicator::ScatterV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                            int64_t recv_count, DType dtype, int root) {
  return Issue(
      MakeScatterV(send, send_counts, send_displs, recv, recv_count, dtype, root, rank()));
}

Work Communicator::AllToAll(const void* send, void* recv, int64_t count, DType dtype) {
  return Issue(MakeAllToAll(send, recv, count, dtype, size()));
}

Work Communicator::AllToAllV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                             Counts recv_counts, Counts recv_displs, DType dtype) {
  return Issue(
      MakeAllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype));
}

Work Communicator::Send(const void* buffer, int64_t count, DType dtype, int peer, int tag) {
  return Issue(MakeSend(buffer, count, dtype, peer, tag));
}

Work Communicator::Recv(void* buffer, int64_t count, DType dtype, int peer, int tag) {
  return Issue(MakeRecv(buffer, count, dtype, peer, tag));
}

Work Communicator::Barrier() { return Issue(Make(K::kBarrier, "barrier", DType::kI32)); }

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  // One all-gather of (color, key) through this communicator; every rank
  // then computes the same grouping.
  const int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * size());
  absl::Status gathered = AllGather(mine, all.data(), 2, DType::kI32).Wait();
  if (!gathered.ok()) {
    return absl::Status(gathered.code(),
                        absl::StrCat("split of ", name(), " on rank ", rank(),
                                     ": exchanging (color, key) failed: ", gathered.message()));
  }
  const int split_index = ++split_count_;
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<int32_t> members;
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int32_t a, int32_t b) { return all[2 * a + 1] < all[2 * b + 1]; });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  return SplitGrouped(color, key, std::move(members), new_rank,
                      absl::StrCat(name(), "/split", split_index, "/c", color));
}

}  // namespace tpx::comm
