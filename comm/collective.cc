#include "comm/collective.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpx::comm {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
  }
  return "unknown_op";
}

absl::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllGatherV: return "all_gather_v";
    case CollectiveKind::kReduceScatterV: return "reduce_scatter_v";
    case CollectiveKind::kGatherV: return "gather_v";
    case CollectiveKind::kScatterV: return "scatter_v";
    case CollectiveKind::kAllToAllV: return "all_to_all_v";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown_collective";
}

bool IsReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kReduceScatterV;
}

bool HasRoot(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGatherV || kind == CollectiveKind::kScatterV;
}

namespace {
int64_t Sum(const PerRankCounts& v) {
  int64_t total = 0;
  for (int64_t x : v) total += x;
  return total;
}
}  // namespace

int64_t PayloadBytes(const CollectiveArgs& args, int rank) {
  int64_t elements = args.count;
  switch (args.kind) {
    case CollectiveKind::kReduceScatterV:
    case CollectiveKind::kAllToAllV:
      elements = Sum(args.send_counts);
      break;
    case CollectiveKind::kScatterV:
      if (!args.send_counts.empty()) elements = Sum(args.send_counts);
      break;
    case CollectiveKind::kBarrier:
      elements = 0;
      break;
    default:
      break;
  }
  return elements * static_cast<int64_t>(SizeOf(args.dtype));
}

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.4g %s", value, units[unit]);
}

OpSummary Summarize(const CollectiveArgs& args, int rank) {
  OpSummary s;
  s.name = args.name;
  s.kind = args.kind;
  s.dtype = args.dtype;
  s.op = args.op;
  s.peer = args.peer;
  s.tag = args.tag;
  s.bytes = PayloadBytes(args, rank);
  return s;
}

std::string DescribeCollective(const OpSummary& s, uint64_t seq) {
  std::string out = s.name;
  if (seq > 0) absl::StrAppend(&out, " #", seq);
  if (s.kind == CollectiveKind::kBarrier) return out;
  absl::StrAppend(&out, " (", FormatBytes(s.bytes), " ", std::string(DTypeName(s.dtype)));
  if (IsReduction(s.kind)) absl::StrAppend(&out, ", ", ReduceOpName(s.op));
  if (HasRoot(s.kind)) absl::StrAppend(&out, ", root ", s.peer);
  if (IsPointToPoint(s.kind)) absl::StrAppend(&out, ", peer ", s.peer, ", tag ", s.tag);
  absl::StrAppend(&out, ")");
  return out;
}

std::string DescribeCollective(const CollectiveArgs& args, int rank, uint64_t seq) {
  return DescribeCollective(Summarize(args, rank), seq);
}

}  // namespace tpx::comm
