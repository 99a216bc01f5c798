#include "comm/validate.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

using K = CollectiveKind;

class Checker {
 public:
  Checker(const CollectiveArgs& args, int rank, int size)
      : args_(args), rank_(rank), size_(size) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(args_.name, " on rank ", rank_, " of ", size_, ": ", what));
  }

  absl::Status NonNegative(absl::string_view arg, int64_t value) const {
    if (value < 0) return Error(absl::StrCat("argument '", arg, "' is ", value, "; must be >= 0"));
    return absl::OkStatus();
  }

  absl::Status RankInRange(absl::string_view arg, int64_t value) const {
    if (value < 0 || value >= size_) {
      return Error(absl::StrCat("argument '", arg, "' is ", value, "; must be in [0, ", size_,
                                ")"));
    }
    return absl::OkStatus();
  }

  // A per-rank count/displacement vector: `size` entries, each >= 0.
  absl::Status PerRank(absl::string_view arg, const PerRankCounts& v) const {
    if (static_cast<int64_t>(v.size()) != size_) {
      return Error(absl::StrCat("argument '", arg, "' has ", v.size(),
                                " entries; must have one per rank (", size_, ")"));
    }
    for (int r = 0; r < size_; ++r) {
      if (v[r] < 0) {
        return Error(absl::StrCat("argument '", arg, "[", r, "]' is ", v[r], "; must be >= 0"));
      }
    }
    return absl::OkStatus();
  }

  // Blocks of a layout that receives data must not overlap one another.
  absl::Status NoOverlap(absl::string_view counts_arg, const PerRankCounts& counts,
                         const PerRankCounts& displs) const {
    // On the stack for the usual world sizes (PerRankCounts' inline size):
    // this runs on every v-collective.
    absl::InlinedVector<std::pair<int64_t, int>, 8> starts;
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0) starts.push_back({displs[r], r});
    }
    std::sort(starts.begin(), starts.end());
    for (size_t i = 1; i < starts.size(); ++i) {
      int prev = starts[i - 1].second;
      if (displs[prev] + counts[prev] > starts[i].first) {
        return Error(absl::StrCat("the ", counts_arg, " blocks of ranks ", prev, " and ",
                                  starts[i].second, " overlap"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Buffer(absl::string_view arg, const void* ptr, int64_t elements,
                      int64_t capacity) const {
    if (elements > 0 && ptr == nullptr) {
      return Error(absl::StrCat("argument '", arg, "' is null but ", elements,
                                " elements are needed"));
    }
    if (capacity >= 0 && elements > capacity) {
      return Error(absl::StrCat("buffer '", arg, "' holds ", capacity, " elements but ",
                                elements, " are needed"));
    }
    return absl::OkStatus();
  }

  // A send range [send, send+n) must either not touch the recv buffer or be
  // exactly this rank's own block within it (in-place).
  absl::Status InPlaceOrDisjoint(const void* send, int64_t send_n, const void* recv,
                                 int64_t recv_extent, int64_t own_displ) const {
    if (send == nullptr || recv == nullptr || send_n == 0 || recv_extent == 0) {
      return absl::OkStatus();
    }
    const size_t es = SizeOf(args_.dtype);
    auto s0 = reinterpret_cast<uintptr_t>(send), s1 = s0 + send_n * es;
    auto r0 = reinterpret_cast<uintptr_t>(recv), r1 = r0 + recv_extent * es;
    if (s1 <= r0 || r1 <= s0) return absl::OkStatus();
    if (s0 == r0 + own_displ * es) return absl::OkStatus();
    return Error("send and recv buffers overlap but send is not this rank's own block of recv "
                 "(in-place use must pass exactly that block)");
  }

 private:
  const CollectiveArgs& args_;
  int rank_;
  int size_;
};

int64_t Extent(const PerRankCounts& counts, const PerRankCounts& displs) {
  int64_t extent = 0;
  for (size_t r = 0; r < counts.size() && r < displs.size(); ++r) {
    if (counts[r] > 0) extent = std::max(extent, displs[r] + counts[r]);
  }
  return extent;
}

void Pack(const PerRankCounts& counts, PerRankCounts& displs) {
  if (!displs.empty() || counts.empty()) return;
  displs.resize(counts.size());
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = offset;
    offset += counts[r] > 0 ? counts[r] : 0;
  }
}

}  // namespace

void NormalizeCollective(CollectiveArgs& args, int rank, int size) {
  Pack(args.send_counts, args.send_displs);
  Pack(args.recv_counts, args.recv_displs);
  if (args.kind == K::kAllGatherV && static_cast<int>(args.recv_counts.size()) == size) {
    args.count = args.recv_counts[rank];
  }
  if (args.kind == K::kReduceScatterV && static_cast<int>(args.send_counts.size()) == size) {
    args.count = args.send_counts[rank];
  }
}

absl::Status ValidateCollective(const CollectiveArgs& a, int rank, int size) {
  Checker c(a, rank, size);
  const int32_t dtype = static_cast<int32_t>(a.dtype);
  if (dtype < 0 || dtype > static_cast<int32_t>(DType::kBool)) {
    return c.Error(absl::StrCat("argument 'dtype' has unknown value ", dtype));
  }
  if (a.kind == K::kBarrier) return absl::OkStatus();
  if (IsReduction(a.kind)) {
    const int32_t op = static_cast<int32_t>(a.op);
    if (op < 0 || op > static_cast<int32_t>(ReduceOp::kProd)) {
      return c.Error(absl::StrCat("argument 'op' has unknown value ", op));
    }
    if (a.dtype == DType::kBool) {
      return c.Error(absl::StrCat("dtype bool cannot be reduced (op ", ReduceOpName(a.op),
                                  "); use i32 or a float dtype"));
    }
    if (a.op == ReduceOp::kAvg && !IsFloatingPoint(a.dtype)) {
      return c.Error(absl::StrCat("op avg needs a floating-point dtype, got ",
                                  std::string(DTypeName(a.dtype))));
    }
  }
  if (HasRoot(a.kind)) TPX_RETURN_IF_ERROR(c.RankInRange("root", a.peer));
  const bool is_root = HasRoot(a.kind) && a.peer == rank;

  switch (a.kind) {
    case K::kAllReduce:
      TPX_RETURN_IF_ERROR(c.NonNegative("count", a.count));
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, a.count, a.send_capacity));
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, a.count, a.recv_capacity));
      return c.InPlaceOrDisjoint(a.send, a.count, a.recv, a.count, 0);
    case K::kBroadcast:
      TPX_RETURN_IF_ERROR(c.NonNegative("count", a.count));
      return c.Buffer("buffer", a.recv, a.count, a.recv_capacity);
    case K::kReduce:
      TPX_RETURN_IF_ERROR(c.NonNegative("count", a.count));
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, a.count, a.send_capacity));
      if (is_root) {
        TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, a.count, a.recv_capacity));
        return c.InPlaceOrDisjoint(a.send, a.count, a.recv, a.count, 0);
      }
      return absl::OkStatus();
    case K::kAllGatherV: {
      TPX_RETURN_IF_ERROR(c.PerRank("recv_counts", a.recv_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("recv_displs", a.recv_displs));
      TPX_RETURN_IF_ERROR(c.NoOverlap("recv", a.recv_counts, a.recv_displs));
      const int64_t extent = Extent(a.recv_counts, a.recv_displs);
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, a.recv_counts[rank], a.send_capacity));
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, extent, a.recv_capacity));
      return c.InPlaceOrDisjoint(a.send, a.recv_counts[rank], a.recv, extent,
                                 a.recv_displs[rank]);
    }
    case K::kReduceScatterV: {
      TPX_RETURN_IF_ERROR(c.PerRank("send_counts", a.send_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("send_displs", a.send_displs));
      const int64_t extent = Extent(a.send_counts, a.send_displs);
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, extent, a.send_capacity));
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, a.send_counts[rank], a.recv_capacity));
      return c.InPlaceOrDisjoint(a.recv, a.send_counts[rank], a.send, extent,
                                 a.send_displs[rank]);
    }
    case K::kGatherV: {
      TPX_RETURN_IF_ERROR(c.NonNegative("send_count", a.count));
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, a.count, a.send_capacity));
      if (!is_root) return absl::OkStatus();
      TPX_RETURN_IF_ERROR(c.PerRank("recv_counts", a.recv_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("recv_displs", a.recv_displs));
      TPX_RETURN_IF_ERROR(c.NoOverlap("recv", a.recv_counts, a.recv_displs));
      if (a.recv_counts[rank] != a.count) {
        return c.Error(absl::StrCat("at the root, recv_counts[", rank, "] is ",
                                    a.recv_counts[rank], " but send_count is ", a.count));
      }
      const int64_t extent = Extent(a.recv_counts, a.recv_displs);
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, extent, a.recv_capacity));
      return c.InPlaceOrDisjoint(a.send, a.count, a.recv, extent, a.recv_displs[rank]);
    }
    case K::kScatterV: {
      TPX_RETURN_IF_ERROR(c.NonNegative("recv_count", a.count));
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, a.count, a.recv_capacity));
      if (!is_root) return absl::OkStatus();
      TPX_RETURN_IF_ERROR(c.PerRank("send_counts", a.send_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("send_displs", a.send_displs));
      if (a.send_counts[rank] != a.count) {
        return c.Error(absl::StrCat("at the root, send_counts[", rank, "] is ",
                                    a.send_counts[rank], " but recv_count is ", a.count));
      }
      const int64_t extent = Extent(a.send_counts, a.send_displs);
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, extent, a.send_capacity));
      return c.InPlaceOrDisjoint(a.recv, a.count, a.send, extent, a.send_displs[rank]);
    }
    case K::kAllToAllV: {
      TPX_RETURN_IF_ERROR(c.PerRank("send_counts", a.send_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("send_displs", a.send_displs));
      TPX_RETURN_IF_ERROR(c.PerRank("recv_counts", a.recv_counts));
      TPX_RETURN_IF_ERROR(c.PerRank("recv_displs", a.recv_displs));
      TPX_RETURN_IF_ERROR(c.NoOverlap("recv", a.recv_counts, a.recv_displs));
      const int64_t send_extent = Extent(a.send_counts, a.send_displs);
      const int64_t recv_extent = Extent(a.recv_counts, a.recv_displs);
      TPX_RETURN_IF_ERROR(c.Buffer("send", a.send, send_extent, a.send_capacity));
      TPX_RETURN_IF_ERROR(c.Buffer("recv", a.recv, recv_extent, a.recv_capacity));
      if (a.send != nullptr && a.send == a.recv && send_extent > 0) {
        return c.Error("all_to_all cannot run in place: send and recv must be distinct buffers");
      }
      return absl::OkStatus();
    }
    case K::kSend:
    case K::kRecv: {
      TPX_RETURN_IF_ERROR(c.RankInRange("peer", a.peer));
      if (a.peer == rank) return c.Error("argument 'peer' is this rank itself");
      TPX_RETURN_IF_ERROR(c.NonNegative("tag", a.tag));
      TPX_RETURN_IF_ERROR(c.NonNegative("count", a.count));
      if (a.kind == K::kSend) return c.Buffer("buffer", a.send, a.count, a.send_capacity);
      return c.Buffer("buffer", a.recv, a.count, a.recv_capacity);
    }
    case K::kBarrier:
      return absl::OkStatus();
  }
  return c.Error(absl::StrCat("unknown collective kind ", static_cast<int>(a.kind)));
}

absl::StatusOr<Device> ValidateTensorDevices(const char* op, int rank, int size,
                                             absl::Span<const TensorPlacement> tensors,
                                             const BackendMemory& backend) {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " on rank ", rank, " of ", size, ": ", what));
  };
  auto describe = [](const TensorPlacement& t) {
    return absl::StrCat(t.arg, " is ", t.device.ToString(), " ", t.description);
  };
  if (tensors.empty()) return error("no tensors to place");
  const TensorPlacement& first = tensors[0];
  for (const TensorPlacement& t : tensors) {
    if (t.device.is_cuda() && !backend.device_memory) {
      return error(absl::StrCat(backend.backend, " backend takes CPU tensors; ", describe(t)));
    }
    if (t.device != first.device) {
      return error(absl::StrCat("tensors must be on one device; ", describe(first), " but ",
                                describe(t)));
    }
  }
  if (first.device.is_cuda() && backend.device >= 0 && first.device.index != backend.device) {
    return error(absl::StrCat(describe(first), " but this communicator (", backend.backend,
                              ") uses ", Device::CUDA(backend.device).ToString()));
  }
  return first.device;
}

}  // namespace tpx::comm
