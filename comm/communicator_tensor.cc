// The Tensor forms of Communicator: shape and device checks, then the same
// CollectiveArgs as the raw-buffer forms, tagged with the tensors' device and
// its current stream.
#include <initializer_list>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/make_collective.h"
#include "comm/validate.h"
#include "core/device_kernels.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

using Counts = Communicator::Counts;

// A tensor seen as rows along dim 0.
struct Rows {
  void* data;
  int64_t rows;
  int64_t row_elements;
  Shape row_shape;
  int64_t numel;
};

class TensorCheck {
 public:
  TensorCheck(const char* op, const Communicator& comm) : op_(op), comm_(comm) {}
  const char* op() const { return op_; }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(op_, " on rank ", comm_.rank(), " of ", comm_.size(), ": ", what));
  }

  absl::StatusOr<Rows> Get(const char* arg, const Tensor& t) const {
    if (!t.defined()) return Error(absl::StrCat("tensor '", arg, "' is undefined"));
    if (!t.is_contiguous()) {
      return Error(absl::StrCat("tensor '", arg, "' (", t.ToString(),
                                ") is not contiguous; call Contiguous() first"));
    }
    Rows r;
    r.data = t.raw_data();
    r.numel = t.numel();
    if (t.dim() == 0) {
      r.rows = 1;
      r.row_elements = 1;
    } else {
      r.rows = t.size(0);
      r.row_shape.assign(t.shape().begin() + 1, t.shape().end());
      r.row_elements = NumElements(r.row_shape);
    }
    return r;
  }

  absl::Status SameDType(const Tensor& a, const Tensor& b) const {
    if (a.dtype() == b.dtype()) return absl::OkStatus();
    return Error(absl::StrCat("input is ", a.ToString(), " but output is ", b.ToString(),
                              "; dtypes must match"));
  }

  absl::Status SameShape(const Tensor& a, const Tensor& b) const {
    if (a.shape() == b.shape()) return absl::OkStatus();
    return Error(absl::StrCat("input ", a.ToString(), " and output ", b.ToString(),
                              " must have the same shape"));
  }

  // out must be [rows, ...row shape of `like`].
  absl::Status RowsOf(const char* arg, const Tensor& out, const Rows& like, int64_t rows,
                      const Tensor& like_tensor) const {
    Shape want = {rows};
    want.insert(want.end(), like.row_shape.begin(), like.row_shape.end());
    if (out.shape() == want) return absl::OkStatus();
    return Error(absl::StrCat("tensor '", arg, "' is ", out.ToString(), "; expected shape ",
                              ShapeString(want), " for ", like_tensor.ToString(), " on ",
                              comm_.size(), " ranks"));
  }

  // Checks where the op's tensors live (comm/validate.h) and tags `args`
  // with that device and, for a CUDA device, the stream its ops are queued
  // on, so the collective starts after them.
  absl::StatusOr<CollectiveArgs> Place(
      std::initializer_list<std::pair<const char*, const Tensor*>> tensors,
      CollectiveArgs args) const {
    std::vector<TensorPlacement> placements;
    for (const auto& [arg, t] : tensors) placements.push_back({arg, t->device(), t->ToString()});
    BackendMemory memory{comm_.backend(), comm_.device_memory(), comm_.device()};
    TPX_ASSIGN_OR_RETURN(
        Device device, ValidateTensorDevices(op_, comm_.rank(), comm_.size(), placements, memory));
    args.device = device;
    if (device.is_cuda()) {
      TPX_ASSIGN_OR_RETURN(DeviceKernels * kernels, KernelsFor(device, op_));
      args.stream = kernels->CurrentStream(device.index);
    }
    return args;
  }

  absl::StatusOr<std::vector<int64_t>> Elements(const char* arg, Counts rows,
                                                int64_t row_elements) const {
    if (static_cast<int>(rows.size()) != comm_.size()) {
      return Error(absl::StrCat("'", arg, "' has ", rows.size(),
                                " entries; must have one per rank (", comm_.size(), ")"));
    }
    std::vector<int64_t> out;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] < 0) return Error(absl::StrCat("'", arg, "[", r, "]' is ", rows[r]));
      out.push_back(rows[r] * row_elements);
    }
    return out;
  }

 private:
  const char* op_;
  const Communicator& comm_;
};

int64_t Sum(Counts v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// In the Tensor forms below, a failed check of TensorCheck `c` rejects the
// call (Communicator::Reject: peers hear of it).
#define TPX_WORK_ASSIGN_OR_FAIL(lhs, expr)                                        \
  auto TPX_STATUS_CONCAT_(w_, __LINE__) = (expr);                                 \
  if (!TPX_STATUS_CONCAT_(w_, __LINE__).ok())                                     \
    return IssueChecked(c.op(), TPX_STATUS_CONCAT_(w_, __LINE__).status());       \
  lhs = std::move(*TPX_STATUS_CONCAT_(w_, __LINE__))

#define TPX_WORK_RETURN_IF_ERROR(expr)                              \
  do {                                                              \
    absl::Status w_status_ = (expr);                                \
    if (!w_status_.ok()) return IssueChecked(c.op(), w_status_);    \
  } while (0)

}  // namespace

using namespace internal;  // the Make* builders of make_collective.h

Work Communicator::AllReduce(const Tensor& tensor, ReduceOp op) {
  return AllReduce(tensor, tensor, op);
}

Work Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  TensorCheck c("all_reduce", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.SameShape(input, output));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeAllReduce(in.data, out.data, in.numel, input.dtype(), op)));
}

Work Communicator::Broadcast(const Tensor& tensor, int root) {
  TensorCheck c("broadcast", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows t, c.Get("tensor", tensor));
  return IssueChecked(c.op(), c.Place({{"tensor", &tensor}},
                                    MakeBroadcast(t.data, t.numel, tensor.dtype(), root)));
}

Work Communicator::Reduce(const Tensor& tensor, ReduceOp op, int root) {
  TensorCheck c("reduce", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows t, c.Get("tensor", tensor));
  return IssueChecked(c.op(), c.Place({{"tensor", &tensor}},
                                    MakeReduce(t.data, t.data, t.numel, tensor.dtype(), op, root)));
}

Work Communicator::AllGather(const Tensor& input, const Tensor& output) {
  TensorCheck c("all_gather", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, size() * in.rows, input));
  return IssueChecked(c.op(),
                     c.Place({{"input", &input}, {"output", &output}},
                             MakeAllGather(in.data, out.data, in.numel, input.dtype(), size())));
}

Work Communicator::AllGatherV(const Tensor& input, const Tensor& output, Counts rows_per_rank) {
  TensorCheck c("all_gather_v", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> counts,
                          c.Elements("rows_per_rank", rows_per_rank, in.row_elements));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, in, rows_per_rank[rank()], input));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, Sum(rows_per_rank), input));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeAllGatherV(in.data, out.data, counts, {}, input.dtype())));
}

Work Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  TensorCheck c("reduce_scatter", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, out, size() * out.rows, output));
  return IssueChecked(
      c.op(), c.Place({{"input", &input}, {"output", &output}},
                     MakeReduceScatter(in.data, out.data, out.numel, input.dtype(), op, size())));
}

Work Communicator::ReduceScatterV(const Tensor& input, const Tensor& output,
                                  Counts rows_per_rank, ReduceOp op) {
  TensorCheck c("reduce_scatter_v", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> counts,
                          c.Elements("rows_per_rank", rows_per_rank, in.row_elements));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, in, Sum(rows_per_rank), input));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, rows_per_rank[rank()], input));
  return IssueChecked(
      c.op(), c.Place({{"input", &input}, {"output", &output}},
                     MakeReduceScatterV(in.data, out.data, counts, {}, input.dtype(), op)));
}

Work Communicator::Gather(const Tensor& input, const Tensor& output, int root) {
  TensorCheck c("gather", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  if (rank() != root) {
    // The output is not read off the root.
    return IssueChecked(c.op(), c.Place({{"input", &input}},
                                      MakeGather(in.data, nullptr, in.numel, input.dtype(), root,
                                                 rank(), size())));
  }
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, size() * in.rows, input));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeGather(in.data, out.data, in.numel, input.dtype(), root,
                                               rank(), size())));
}

Work Communicator::Scatter(const Tensor& input, const Tensor& output, int root) {
  TensorCheck c("scatter", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  if (rank() != root) {
    // The input is not read off the root.
    return IssueChecked(c.op(), c.Place({{"output", &output}},
                                      MakeScatter(nullptr, out.data, out.numel, output.dtype(),
                                                  root, rank(), size())));
  }
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, out, size() * out.rows, output));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeScatter(in.data, out.data, out.numel, output.dtype(), root,
                                                rank(), size())));
}

Work Communicator::GatherV(const Tensor& input, const Tensor& output, Counts rows_per_rank,
                           int root) {
  TensorCheck c("gather_v", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> counts,
                          c.Elements("rows_per_rank", rows_per_rank, in.row_elements));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, in, rows_per_rank[rank()], input));
  if (rank() != root) {
    // The output is not read off the root.
    return IssueChecked(c.op(), c.Place({{"input", &input}},
                                      MakeGatherV(in.data, in.numel, nullptr, counts, {},
                                                  input.dtype(), root, rank())));
  }
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, Sum(rows_per_rank), input));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeGatherV(in.data, in.numel, out.data, counts, {},
                                                input.dtype(), root, rank())));
}

Work Communicator::ScatterV(const Tensor& input, const Tensor& output, Counts rows_per_rank,
                            int root) {
  TensorCheck c("scatter_v", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> counts,
                          c.Elements("rows_per_rank", rows_per_rank, out.row_elements));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, out, rows_per_rank[rank()], output));
  if (rank() != root) {
    // The input is not read off the root.
    return IssueChecked(c.op(), c.Place({{"output", &output}},
                                      MakeScatterV(nullptr, counts, {}, out.data, out.numel,
                                                   output.dtype(), root, rank())));
  }
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, out, Sum(rows_per_rank), output));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeScatterV(in.data, counts, {}, out.data, out.numel,
                                                 output.dtype(), root, rank())));
}

Work Communicator::AllToAll(const Tensor& input, const Tensor& output) {
  TensorCheck c("all_to_all", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_RETURN_IF_ERROR(c.SameShape(input, output));
  if (in.rows % size() != 0) {
    return Work(c.Error(absl::StrCat("input ", input.ToString(), ": dim 0 must be divisible by ",
                                     size(), " ranks")));
  }
  return IssueChecked(
      c.op(), c.Place({{"input", &input}, {"output", &output}},
                     MakeAllToAll(in.data, out.data, in.numel / size(), input.dtype(), size())));
}

Work Communicator::AllToAllV(const Tensor& input, const Tensor& output, Counts send_rows,
                             Counts recv_rows) {
  TensorCheck c("all_to_all_v", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows in, c.Get("input", input));
  TPX_WORK_ASSIGN_OR_FAIL(Rows out, c.Get("output", output));
  TPX_WORK_RETURN_IF_ERROR(c.SameDType(input, output));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> send,
                          c.Elements("send_rows", send_rows, in.row_elements));
  TPX_WORK_ASSIGN_OR_FAIL(std::vector<int64_t> recv,
                          c.Elements("recv_rows", recv_rows, in.row_elements));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("input", input, in, Sum(send_rows), input));
  TPX_WORK_RETURN_IF_ERROR(c.RowsOf("output", output, in, Sum(recv_rows), input));
  return IssueChecked(c.op(), c.Place({{"input", &input}, {"output", &output}},
                                    MakeAllToAllV(in.data, send, {}, out.data, recv, {},
                                                  input.dtype())));
}

Work Communicator::Send(const Tensor& tensor, int peer, int tag) {
  TensorCheck c("send", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows t, c.Get("tensor", tensor));
  return IssueChecked(c.op(), c.Place({{"tensor", &tensor}},
                                    MakeSend(t.data, t.numel, tensor.dtype(), peer, tag)));
}

Work Communicator::Recv(const Tensor& tensor, int peer, int tag) {
  TensorCheck c("recv", *this);
  TPX_WORK_ASSIGN_OR_FAIL(Rows t, c.Get("tensor", tensor));
  return IssueChecked(c.op(), c.Place({{"tensor", &tensor}},
                                    MakeRecv(t.data, t.numel, tensor.dtype(), peer, tag)));
}

}  // namespace tpx::comm
