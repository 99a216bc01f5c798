// Files a test reads and writes: its runfiles (data dependencies), whole
// files, and log files in its own temporary directory (TEST_TMPDIR).
//
//   const std::string prog = Runfile("tools/tpxrun_test_prog");
//   const std::string log = LogPath("node_0");    // $TEST_TMPDIR/node_0.log
//   ... run prog with its output appended to log ...
//   EXPECT_NE(ReadAll(log).find("sum=3"), std::string::npos);
#ifndef TPX_TESTING_TEST_FILES_H_
#define TPX_TESTING_TEST_FILES_H_

#include <string>

namespace tpx::testing {

// The path of a data dependency of the test: "tools/tpxrun" is the target
// //tools:tpxrun.
std::string Runfile(const std::string& path);

// A file's whole content; "" when it cannot be read.
std::string ReadAll(const std::string& path);

// "$TEST_TMPDIR/<name>.log".
std::string LogPath(const std::string& name);

}  // namespace tpx::testing

#endif  // TPX_TESTING_TEST_FILES_H_
