#include "examples/gpt/program.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "launch/local_job.h"

namespace tpx::gpt {

int RunProgram(absl::string_view program, int nproc,
               const std::function<absl::Status()>& rank_main) {
  const std::string name(program);
  return launch::RunRanks(nproc, [&] {
    absl::Status s = rank_main();
    if (s.ok()) return 0;
    std::fprintf(stderr, "%s: %s\n", name.c_str(), s.ToString().c_str());
    return 1;
  });
}

std::string UserPath(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr) return path;
  return absl::StrCat(wd, "/", path);
}

}  // namespace tpx::gpt
