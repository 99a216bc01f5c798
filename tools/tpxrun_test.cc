#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "testing/test_files.h"

namespace {

using ::tpx::testing::Runfile;

struct Result {
  int exit_code;
  std::vector<std::string> lines;
};

// Runs tpxrun with `args`, stdout and stderr merged; `env` prefixes the
// command line (e.g. "VAR=value").
Result RunTpxrun(const std::string& args, const std::string& env = "") {
  std::string cmd = absl::StrCat(env, " ", Runfile("tools/tpxrun"), " ", args, " 2>&1");
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


// The secret a run gave its ranks: every rank the same one, "" on mismatch.
std::string SecretOf(const Result& r, int nproc) {
  std::string secret;
  for (int rank = 0; rank < nproc; ++rank) {
    const std::string prefix = absl::StrCat("[rank ", rank, "] secret=");
    auto it = std::find_if(r.lines.begin(), r.lines.end(),
                           [&](const std::string& l) { return absl::StartsWith(l, prefix); });
    if (it == r.lines.end()) return "";
    std::string mine = it->substr(prefix.size());
    if (rank > 0 && mine != secret) return "";
    secret = mine;
  }
  return secret;
}

TEST(Tpxrun, GivesEachJobItsOwnStoreSecret) {
  const std::string cmd = absl::StrCat("--nproc 2 -- ", Runfile(kProg), " secret");
  Result a = RunTpxrun(cmd), b = RunTpxrun(cmd);
  ASSERT_EQ(a.exit_code, 0) << Dump(a);
  std::string sa = SecretOf(a, 2), sb = SecretOf(b, 2);
  EXPECT_EQ(sa.size(), 32u) << Dump(a);
  EXPECT_EQ(sb.size(), 32u) << Dump(b);
  EXPECT_NE(sa, sb);
  // A secret in tpxrun's environment is used as given, also for a store on rank 0.
  Result c = RunTpxrun(cmd, "TPX_STORE_SECRET=from-env");
  EXPECT_EQ(SecretOf(c, 2), "from-env") << Dump(c);
  Result e = RunTpxrun(absl::StrCat("--nproc 2 --store_on_rank0 -- ", Runfile(kProg), " allreduce"),
                       "TPX_STORE_SECRET=from-env");
  EXPECT_EQ(e.exit_code, 0) << Dump(e);
}

// Whether process `pid` has exited (gone, or a zombie nobody reaped yet).
bool Exited(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return true;
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* p = std::strrchr(buf, ')');
  return n == 0 || p == nullptr || p[1] == '\0' || p[2] == 'Z' || p[2] == 'X';
}

TEST(Tpxrun, RanksDieWhenTpxrunIsKilledWithSigkill) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  pid_t tpxrun = ::fork();
  if (tpxrun == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    std::string bin = Runfile("tools/tpxrun"), prog = Runfile(kProg);
    ::execl(bin.c_str(), bin.c_str(), "--nproc", "3", "--", prog.c_str(), "sleep", nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  // Collect the ranks' pids from their "[rank r] pid=N" lines (bounded wait).
  std::vector<pid_t> ranks;
  std::string text;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (ranks.size() < 3 && absl::Now() < give_up) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, n);
    ranks.clear();
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      size_t at = line.find("] pid=");
      int pid = 0;
      if (at != absl::string_view::npos && absl::SimpleAtoi(line.substr(at + 6), &pid)) {
        ranks.push_back(pid);
      }
    }
  }
  ASSERT_EQ(ranks.size(), 3u) << text;
  ::kill(tpxrun, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(tpxrun, &status, 0), tpxrun);
  ::close(out[0]);
  // Each rank must be gone soon (bounded wait; they would otherwise sleep 120 s).
  for (pid_t pid : ranks) {
    for (int i = 0; i < 3000 && !Exited(pid); ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_TRUE(Exited(pid)) << "rank process " << pid << " outlived a SIGKILLed tpxrun";
    if (!Exited(pid)) ::kill(pid, SIGKILL);
  }
}

}  // namespace
