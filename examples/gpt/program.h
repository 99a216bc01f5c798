// What the GPT example's programs (train, generate) share: running their
// per-rank main on the job's ranks, and taking paths from the user the way
// `bazel run` users expect.
//
//   int main(int argc, char** argv) {
//     absl::ParseCommandLine(argc, argv);
//     return tpx::gpt::RunProgram("train", absl::GetFlag(FLAGS_nproc), RankMain);
//   }
#ifndef TPX_EXAMPLES_GPT_PROGRAM_H_
#define TPX_EXAMPLES_GPT_PROGRAM_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpx::gpt {

// Runs rank_main once as this process's rank when a launcher (tpxrun,
// torchrun, mpirun, srun) started it, else on `nproc` ranks it forks
// (launch/local_job.h). A failing rank prints "<program>: <status>" and
// exits 1. Returns main's exit code.
int RunProgram(absl::string_view program, int nproc,
               const std::function<absl::Status()>& rank_main);

// `path` as the user meant it: under `bazel run` a relative path is taken
// from the directory bazel was started in (BUILD_WORKING_DIRECTORY), not
// from the runfiles tree; "" and absolute paths stay as they are.
std::string UserPath(const std::string& path);

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_PROGRAM_H_
