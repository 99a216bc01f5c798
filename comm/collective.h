// The description of one communication operation as the host sees it: the
// kind, the ReduceOp, buffers and per-rank layouts, before it is handed to a
// backend. Shared by argument validation, debug checks and failure messages.
//
//   CollectiveArgs args{.kind = CollectiveKind::kAllReduce, .dtype = DType::kF32,
//                       .op = ReduceOp::kSum, .send = x, .recv = x, .count = n};
//   absl::Status s = ValidateCollective(args, rank, size);   // comm/validate.h
//   std::string what = DescribeCollective(args, seq);         // "all_reduce #3 (16 KiB f32)"
#ifndef TPX_COMM_COLLECTIVE_H_
#define TPX_COMM_COLLECTIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "core/device.h"
#include "core/dtype.h"

namespace tpx::comm {

// Numbered like tpx_reduce_op_t (comm/plugin_abi.h; static_asserted in
// comm/plugin_host/plugin_communicator.cc).
enum class ReduceOp : int32_t { kSum = 0, kAvg = 1, kMax = 2, kMin = 3, kProd = 4 };

// Numbered like tpx_coll_kind_t. Fixed-size collectives (AllGather, Gather,
// ReduceScatter, Scatter, AllToAll) travel as their V forms.
enum class CollectiveKind : int32_t {
  kAllReduce = 0,
  kBroadcast = 1,
  kReduce = 2,
  kAllGatherV = 3,
  kReduceScatterV = 4,
  kGatherV = 5,
  kScatterV = 6,
  kAllToAllV = 7,
  kSend = 8,
  kRecv = 9,
  kBarrier = 10,
};

absl::string_view ReduceOpName(ReduceOp op);        // "sum", ...
absl::string_view CollectiveKindName(CollectiveKind kind);  // "all_reduce", ...
// Send/Recv are point-to-point: they do not take part in collective numbering.
inline bool IsPointToPoint(CollectiveKind kind) {
  return kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv;
}

// Per-rank counts or displacements: inline up to 8 ranks, as a tensor-
// parallel group usually is, so that a v-collective allocates nothing.
using PerRankCounts = absl::InlinedVector<int64_t, 8>;

// Field meanings follow tpx_coll_args_v1_t. Per-rank vectors are empty where
// the operation does not use them. `name` is the user-facing op name for
// messages (e.g. "all_gather" for an AllGather travelling as kAllGatherV).
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const char* name = "barrier";
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int32_t peer = 0;  // root, or peer of send/recv
  int32_t tag = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  PerRankCounts send_counts, send_displs, recv_counts, recv_displs;
  // Elements the send/recv buffers hold, when known (tensor overloads); -1 =
  // unknown (raw pointers: the caller vouches for the size).
  int64_t send_capacity = -1;
  int64_t recv_capacity = -1;
  // Where send/recv live. CPU: host memory (raw pointers: whatever the
  // backend accepts). A CUDA device (the Tensor forms on CUDA tensors; the
  // backend must take device memory): the op starts after the work queued
  // on `stream` (a cudaStream_t), and Work::Wait() orders the device's
  // current stream after the op instead of blocking the host.
  Device device = Device::CPU();
  void* stream = nullptr;
};

// Whether `kind` reduces values (and therefore needs an arithmetic dtype).
bool IsReduction(CollectiveKind kind);
bool HasRoot(CollectiveKind kind);

// Total bytes this rank contributes (for messages).
int64_t PayloadBytes(const CollectiveArgs& args, int rank);

// What a message needs to say about an operation, cheap to keep per
// in-flight op (no vectors, no strings).
struct OpSummary {
  const char* name = "barrier";
  CollectiveKind kind = CollectiveKind::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int32_t peer = 0;
  int32_t tag = 0;
  int64_t bytes = 0;
};
OpSummary Summarize(const CollectiveArgs& args, int rank);

// "all_reduce #42 (16 MiB f32, sum)"; seq 0 means unnumbered.
std::string DescribeCollective(const OpSummary& op, uint64_t seq);
std::string DescribeCollective(const CollectiveArgs& args, int rank, uint64_t seq);

// "16 MiB", "1.5 KiB", "12 B".
std::string FormatBytes(int64_t bytes);

}  // namespace tpx::comm

#endif  // TPX_COMM_COLLECTIVE_H_
