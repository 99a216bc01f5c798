#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpx/", path);
}

struct Result {
  int exit_code;
  std::vector<std::string> lines;
};

// Runs tpxrun with `args`, stdout and stderr merged.
Result RunTpxrun(const std::string& args) {
  std::string cmd = absl::StrCat(Runfile("tools/tpxrun"), " ", args, " 2>&1");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = ::pclose(pipe);
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}};
  r.lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  return r;
}

bool Has(const Result& r, const std::string& line) {
  return std::find(r.lines.begin(), r.lines.end(), line) != r.lines.end();
}

std::string Dump(const Result& r) { return absl::StrJoin(r.lines, "\n"); }

const std::string kProg = "tools/tpxrun_test_prog";

TEST(Tpxrun, SetsEnvironmentAndPrefixesLines) {
  Result r = RunTpxrun(absl::StrCat("--nproc 3 -- ", Runfile(kProg), " env"));
  EXPECT_EQ(r.exit_code, 0) << Dump(r);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(Has(r, absl::StrCat("[rank ", rank, "] rank=", rank, " size=3 local=", rank,
                                    " launcher=tpx port_set=1")))
        << Dump(r);
    EXPECT_TRUE(Has(r, absl::StrCat("[rank ", rank, "] second line"))) << Dump(r);
    EXPECT_TRUE(Has(r, absl::StrCat("[rank ", rank, "] to stderr"))) << Dump(r);
  }
}

TEST(Tpxrun, FirstFailureStopsTheRestAndSetsTheExitCode) {
  Result r = RunTpxrun(absl::StrCat("--nproc 3 -- ", Runfile(kProg), " fail 1"));
  EXPECT_EQ(r.exit_code, 3) << Dump(r);
  EXPECT_TRUE(Has(r, "tpxrun: rank 1 exited with code 3; stopping the other ranks")) << Dump(r);
}

TEST(Tpxrun, ForwardsSigterm) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string tpxrun = Runfile("tools/tpxrun"), prog = Runfile(kProg);
    ::execl(tpxrun.c_str(), tpxrun.c_str(), "--nproc", "2", "--", prog.c_str(), "sleep",
            nullptr);
    ::_exit(127);
  }
  ::sleep(1);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

TEST(Tpxrun, BadUsage) {
  EXPECT_EQ(RunTpxrun("--nproc 0 -- true").exit_code, 2);
  EXPECT_EQ(RunTpxrun("--nproc 2").exit_code, 2);
}

TEST(Tpxrun, RanksInitAndAllReduceThroughTheLauncherStore) {
  Result r = RunTpxrun(absl::StrCat("--nproc 3 -- ", Runfile(kProg), " allreduce"));
  EXPECT_EQ(r.exit_code, 0) << Dump(r);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(Has(r, absl::StrCat("[rank ", rank, "] sum=6"))) << Dump(r);
  }
}

TEST(Tpxrun, RankZeroCanHostTheStore) {
  Result r = RunTpxrun(absl::StrCat("--nproc 2 --store_on_rank0 -- ", Runfile(kProg),
                                    " allreduce"));
  EXPECT_EQ(r.exit_code, 0) << Dump(r);
  EXPECT_TRUE(Has(r, "[rank 1] sum=3")) << Dump(r);
}

}  // namespace
