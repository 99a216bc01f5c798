// Running a PyTorch peer script of a benchmark (bench/peers/*.py: the same
// workload in eager PyTorch, a measured baseline run beside tpx in the same
// rounds). The interpreter and the peer's OpenBLAS kernels come from two
// flags shared by every benchmark that runs a peer, defined here:
//   --python                 interpreter (Debian's python3-torch is under /usr/bin)
//   --pytorch_openblas_core  auto or env (see the flag's help)
//
//   TPX_ASSIGN_OR_RETURN(PeerThreads threads, ParsePeerThreads("1:2"));
//   absl::StatusOr<std::string> out =
//       RunPytorchPeer("bench/peers/gpt_pytorch.py", {"--steps=20", "--tp=1"}, threads);
//   if (!out.ok()) { ... print the benchmark's "skipped" line with out.status().message() }
//   double step_ms = JsonNumber(*out, "step_ms", -1.0);
//
// The peer's JSON lines go to this process's stdout as they come (so they
// interleave with tpx's in run order) and are returned for the caller to
// read its figures from.
#ifndef TPX_BENCH_PYTORCH_PEER_H_
#define TPX_BENCH_PYTORCH_PEER_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

ABSL_DECLARE_FLAG(std::string, python);
ABSL_DECLARE_FLAG(std::string, pytorch_openblas_core);

namespace tpx::bench {

// The peer's thread pools: PyTorch's intra-op (OpenMP) threads and
// OpenBLAS's, set apart as the peers do.
struct PeerThreads {
  int omp = 1;
  int blas = 1;
};

// "omp:blas", both >= 1; InvalidArgument naming the entry otherwise.
absl::StatusOr<PeerThreads> ParsePeerThreads(absl::string_view setting);

// InvalidArgument when --pytorch_openblas_core is neither auto nor env.
absl::Status CheckPeerFlags();

// Runs `--python script args... --omp_threads= --blas_threads=
// --openblas_core=`, the script's path relative to the current directory
// (the runfiles root under `bazel run`, or the source tree), copying the
// peer's stdout to this process's as it comes. Returns what it
// printed; an error saying why it could not run (script or interpreter
// missing, could not start, printed nothing, exited with a failure status).
absl::StatusOr<std::string> RunPytorchPeer(absl::string_view script,
                                           const std::vector<std::string>& args,
                                           PeerThreads threads);

// The number after `"key":` in the first line of `json_lines` that has it,
// or `fallback`.
double JsonNumber(absl::string_view json_lines, absl::string_view key, double fallback);

}  // namespace tpx::bench

#endif  // TPX_BENCH_PYTORCH_PEER_H_
