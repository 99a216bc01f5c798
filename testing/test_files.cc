#include "testing/test_files.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tpx::testing {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpx/", path);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LogPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".log");
}

}  // namespace tpx::testing
