// The CollectiveArgs behind each typed Communicator call, built in one place
// for the raw-buffer forms and the Tensor forms (which add where the
// tensors live). Internal to //comm:communicator.
//
//   CollectiveArgs a = MakeAllReduce(send, recv, n, DType::kF32, ReduceOp::kSum);
//   a.device = Device::CUDA(0);
//   return IssueChecked(op, std::move(a));  // inside a Communicator member
#ifndef TPX_COMM_MAKE_COLLECTIVE_H_
#define TPX_COMM_MAKE_COLLECTIVE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "comm/collective.h"
#include "core/dtype.h"

namespace tpx::comm::internal {

using Counts = absl::Span<const int64_t>;

CollectiveArgs MakeAllReduce(const void* send, void* recv, int64_t count, DType dtype,
                             ReduceOp op);
CollectiveArgs MakeBroadcast(void* buffer, int64_t count, DType dtype, int root);
CollectiveArgs MakeReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                          int root);
CollectiveArgs MakeAllGather(const void* send, void* recv, int64_t count, DType dtype, int size);
CollectiveArgs MakeAllGatherV(const void* send, void* recv, Counts recv_counts,
                              Counts recv_displs, DType dtype);
CollectiveArgs MakeReduceScatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                 ReduceOp op, int size);
CollectiveArgs MakeReduceScatterV(const void* send, void* recv, Counts send_counts,
                                  Counts send_displs, DType dtype, ReduceOp op);
CollectiveArgs MakeGather(const void* send, void* recv, int64_t count, DType dtype, int root,
                          int rank, int size);
CollectiveArgs MakeScatter(const void* send, void* recv, int64_t count, DType dtype, int root,
                           int rank, int size);
// recv_counts / recv_displs (send_counts / send_displs) are kept on the root only.
CollectiveArgs MakeGatherV(const void* send, int64_t send_count, void* recv, Counts recv_counts,
                           Counts recv_displs, DType dtype, int root, int rank);
CollectiveArgs MakeScatterV(const void* send, Counts send_counts, Counts send_displs, void* recv,
                            int64_t recv_count, DType dtype, int root, int rank);
CollectiveArgs MakeAllToAll(const void* send, void* recv, int64_t count, DType dtype, int size);
CollectiveArgs MakeAllToAllV(const void* send, Counts send_counts, Counts send_displs,
                             void* recv, Counts recv_counts, Counts recv_displs, DType dtype);
CollectiveArgs MakeSend(const void* buffer, int64_t count, DType dtype, int peer, int tag);
CollectiveArgs MakeRecv(void* buffer, int64_t count, DType dtype, int peer, int tag);

}  // namespace tpx::comm::internal

#endif  // TPX_COMM_MAKE_COLLECTIVE_H_
