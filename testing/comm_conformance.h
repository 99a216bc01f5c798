// Backend conformance suite: test bodies that every communication backend
// must pass, run on real ranks through RunOnRanks. Each body computes a
// serial reference from closed-form per-rank inputs and compares.
//
//   TEST_P(Conformance, AllReduce) { RunOnRanks(GetParam().world, AllReduceConformance, opts); }
//
// comm_conformance_test.cc instantiates every body for each backend and
// world size; a new backend adds itself there.
#ifndef TPX_TESTING_COMM_CONFORMANCE_H_
#define TPX_TESTING_COMM_CONFORMANCE_H_

#include "testing/multiprocess.h"

namespace tpx::testing {

// Every dtype x op x in-place/out-of-place x several counts (including 0).
void AllReduceConformance(RankContext& ctx);
// Every dtype x every root x several counts.
void BroadcastConformance(RankContext& ctx);
// Every dtype x ops x roots x in-place/out-of-place.
void ReduceConformance(RankContext& ctx);
// AllGather (in/out of place) and AllGatherV with uneven, zero and gapped blocks.
void AllGatherConformance(RankContext& ctx);
// ReduceScatter and ReduceScatterV (uneven, zero-length), in/out of place.
void ReduceScatterConformance(RankContext& ctx);
// Gather(V) and Scatter(V) at every root, including in place at the root.
void GatherScatterConformance(RankContext& ctx);
// AllToAll and AllToAllV with per-pair counts (some zero).
void AllToAllConformance(RankContext& ctx);
// Send/Recv around a ring and with several tags.
void SendRecvConformance(RankContext& ctx);
// No rank leaves a barrier before every rank entered it.
void BarrierConformance(RankContext& ctx);
// Split into two overlapping families of subgroups used concurrently;
// color < 0 gives no communicator.
void SplitConformance(RankContext& ctx);
// 1,000 back-to-back small all-reduces, issued before any is waited on.
void BackToBackConformance(RankContext& ctx);
// One all-reduce of >= 64 MiB.
void LargeAllReduceConformance(RankContext& ctx);
// The Tensor forms: shapes along dim 0, results, and shape errors.
void TensorConformance(RankContext& ctx);
// The same on CUDA tensors of the communicator's device (device backends
// only): stream-ordered Wait(), host polling, mixed/wrong-device errors.
void DeviceTensorConformance(RankContext& ctx);
// Work handles: Wait(timeout) on a running op says "still running" and
// leaves it running; ops complete in issue order.
void WorkConformance(RankContext& ctx);
// Bad arguments give InvalidArgument naming op, argument and rank; the
// communicator stays usable.
void InvalidArgumentConformance(RankContext& ctx);

}  // namespace tpx::testing

#endif  // TPX_TESTING_COMM_CONFORMANCE_H_
