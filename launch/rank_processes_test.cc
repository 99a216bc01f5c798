#include "launch/rank_processes.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tpx::launch {
namespace {

// Guards every test against a supervisor that would never stop a rank.
SuperviseOptions Guarded() {
  SuperviseOptions options;
  options.deadline = absl::Seconds(60);
  return options;
}

// A rank that waits until a signal ends it.
int WaitForSignal(int) {
  while (true) ::pause();
}

TEST(RankProcesses, ForkedRanksReportAndExit) {
  RankProcesses ranks;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ranks
                    .Fork(r,
                          [r](int report) {
                            const std::string text = absl::StrCat("from ", r);
                            EXPECT_EQ(::write(report, text.data(), text.size()),
                                      static_cast<ssize_t>(text.size()));
                            return r;
                          })
                    .ok());
  }
  SuperviseOptions options = Guarded();
  options.stop_on_failure = false;
  JobResult result = ranks.Supervise(options);
  ASSERT_EQ(result.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(result.ranks[r].rank, r);
    EXPECT_EQ(result.ranks[r].exit_code, r);
    EXPECT_EQ(result.ranks[r].signal, 0);
    EXPECT_EQ(result.ranks[r].report, absl::StrCat("from ", r));
  }
  // Without stop_on_failure every rank runs to its end; the first failure
  // is one of the two that failed.
  ASSERT_TRUE(result.failure.has_value());
  EXPECT_TRUE(result.exit_code() == 1 || result.exit_code() == 2) << result.exit_code();
}

TEST(RankProcesses, FirstFailureStopsTheOthers) {
  RankProcesses ranks;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ranks.Fork(r, r == 1 ? +[](int) { return 3; } : WaitForSignal).ok());
  }
  JobStop told;
  SuperviseOptions options = Guarded();
  options.on_stop = [&](const JobStop& why) { told = why; };
  JobResult result = ranks.Supervise(options);
  EXPECT_EQ(result.exit_code(), 3);
  EXPECT_EQ(result.failure->reason, "rank 1 exited with code 3");
  EXPECT_EQ(told.reason, "rank 1 exited with code 3");
  for (int r : {0, 2}) {
    EXPECT_EQ(result.ranks[r].signal, SIGTERM) << r;
    EXPECT_FALSE(result.ranks[r].timed_out) << r;
  }
}

TEST(RankProcesses, KilledRankIsDescribed) {
  RankProcesses ranks;
  ASSERT_TRUE(ranks.Fork(7, [](int) { return ::raise(SIGKILL); }).ok());
  JobResult result = ranks.Supervise(Guarded());
  EXPECT_EQ(result.exit_code(), 128 + SIGKILL);
  EXPECT_EQ(result.failure->reason, "rank 7 was killed by signal 9 (Killed)");
  EXPECT_EQ(result.ranks[0].Describe(), "rank 7 was killed by signal 9 (Killed)");
}

TEST(RankProcesses, ShouldStopStopsEveryRank) {
  RankProcesses ranks;
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks.Fork(r, WaitForSignal).ok());
  bool on_stop_called = false;
  SuperviseOptions options = Guarded();
  options.should_stop = [] { return std::optional<JobStop>(JobStop{7, "another node failed"}); };
  options.on_stop = [&](const JobStop&) { on_stop_called = true; };
  JobResult result = ranks.Supervise(options);
  EXPECT_EQ(result.exit_code(), 7);
  EXPECT_EQ(result.failure->reason, "another node failed");
  EXPECT_FALSE(on_stop_called) << "on_stop is for this process's own reasons";
  for (const RankExit& r : result.ranks) EXPECT_EQ(r.signal, SIGTERM);
}

TEST(RankProcesses, DeadlineKillsWhatStillRuns) {
  RankProcesses ranks;
  ASSERT_TRUE(ranks.Fork(0, [](int) { return 0; }).ok());
  ASSERT_TRUE(ranks.Fork(1, [](int) {
    ::signal(SIGTERM, SIG_IGN);  // only SIGKILL ends it
    while (true) ::pause();
    return 0;
  }).ok());
  SuperviseOptions options;
  options.stop_on_failure = false;
  options.deadline = absl::Milliseconds(300);
  JobResult result = ranks.Supervise(options);
  EXPECT_FALSE(result.ranks[0].timed_out);
  EXPECT_EQ(result.ranks[0].exit_code, 0);
  EXPECT_TRUE(result.ranks[1].timed_out);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
  EXPECT_EQ(result.exit_code(), 124);
}

std::string ReadFile(FILE* f) {
  std::string out;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

TEST(RankProcesses, ExecGetsItsPlaceAndPrefixedOutput) {
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ASSERT_NE(err, nullptr);
  ::setenv("TPX_LAUNCH_TEST_MINE", "mine", 1);
  ::setenv("TPX_RANK", "99", 1);  // replaced by the rank's own
  {
    RankProcesses ranks({.prefix_output = true, .out = out, .err = err});
    for (int r = 0; r < 2; ++r) {
      comm::LaunchEnv place;
      place.rank = place.local_rank = r;
      place.world_size = place.local_world_size = 2;
      place.store_port = 1234;
      RankEnv env = RankEnv::For(place);
      env.defaults = {{"TPX_LAUNCH_TEST_MINE", "theirs"}, {"TPX_LAUNCH_TEST_UNSET", "default"}};
      ASSERT_TRUE(ranks
                      .Exec(r,
                            {"/bin/sh", "-c",
                             "echo $TPX_RANK/$WORLD_SIZE $TPX_STORE_PORT $TPX_LAUNCH_TEST_MINE "
                             "$TPX_LAUNCH_TEST_UNSET; printf 'no newline' >&2"},
                            env)
                      .ok());
    }
    EXPECT_EQ(ranks.Supervise(Guarded()).exit_code(), 0);
  }
  ::unsetenv("TPX_RANK");
  const std::string stdout_text = ReadFile(out), stderr_text = ReadFile(err);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(stdout_text.find(absl::StrCat("[rank ", r, "] ", r, "/2 1234 mine default\n")),
              std::string::npos)
        << stdout_text;
    EXPECT_NE(stderr_text.find(absl::StrCat("[rank ", r, "] no newline\n")), std::string::npos)
        << stderr_text;
  }
  std::fclose(out);
  std::fclose(err);
}

TEST(RankProcesses, MissingProgramExits127) {
  RankProcesses ranks({.prefix_output = true, .out = stdout, .err = stdout});
  ASSERT_TRUE(ranks.Exec(0, {"/nonexistent/tpx_program"}).ok());
  JobResult result = ranks.Supervise(Guarded());
  EXPECT_EQ(result.exit_code(), 127);
  EXPECT_EQ(result.failure->reason, "rank 0 exited with code 127");
  EXPECT_FALSE(ranks.Exec(1, {}).ok());
}

}  // namespace
}  // namespace tpx::launch
