// The compute stream of each CUDA device: one process-wide stream per device
// that every tpx op on that device is queued on, in order. Code that must run
// after (or before) those ops, e.g. a collective on another stream or a cuBLAS
// call, orders itself against this stream.
//
//   TPX_ASSIGN_OR_RETURN(cuda::Stream* stream, cuda::CurrentStream(/*device=*/0));
//   TPX_RETURN_IF_ERROR(done.Record(*stream));   // a comm stream then WaitFor(done)
//
// Created on first use (thread-safe) and never destroyed: work may still be
// queued on it while the process exits. Because all ops on a device share the
// stream, memory freed to the caching allocator is never reused before the
// ops that used it have run.
#ifndef TPX_CORE_CUDA_CURRENT_STREAM_H_
#define TPX_CORE_CUDA_CURRENT_STREAM_H_

#include "absl/status/statusor.h"
#include "core/cuda/stream.h"

namespace tpx::cuda {

// Most devices one process addresses (CheckDevice bounds the index first).
inline constexpr int kMaxDevices = 64;

// Errors: device outside [0, kMaxDevices), or the stream cannot be created
// (no driver, no such device).
absl::StatusOr<Stream*> CurrentStream(int device);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_CURRENT_STREAM_H_
