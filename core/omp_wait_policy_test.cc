#include "core/omp_wait_policy.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpx {
namespace {

TEST(OmpWaitPolicyTest, ContendedHostSleepsAtOnceQuietHostSpinsBriefly) {
  // 2 CPUs, a team of 2 (threads 0: one per CPU).
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 0, .cpus = 2}), "GOMP_SPINCOUNT=10000");
  // One busy task beside the team: a thread waits for a core.
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 1, .cpus = 2}), "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 5, .cpus = 2}), "OMP_WAIT_POLICY=PASSIVE");
  // A high load average alone (e.g. this program's previous run) is no
  // contention now.
  EXPECT_STREQ(OmpWaitSettingFor({.load_1min = 7.0, .runnable = 0, .cpus = 2}),
               "GOMP_SPINCOUNT=10000");
  // Fewer threads than CPUs leave room for other tasks.
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 1, .cpus = 2, .threads = 1}),
               "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 2, .cpus = 2, .threads = 1}),
               "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 3, .cpus = 16, .threads = 8}),
               "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 3, .cpus = 16}), "OMP_WAIT_POLICY=PASSIVE");
  // More threads than CPUs count as one per CPU; a nonsensical CPU count as
  // one CPU.
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 0, .cpus = 2, .threads = 8}),
               "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 0, .cpus = 0}), "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(OmpWaitSettingFor({.runnable = 1, .cpus = 0}), "OMP_WAIT_POLICY=PASSIVE");
}

constexpr HostLoad kQuiet{.load_1min = 0.2, .runnable = 0, .cpus = 2};
constexpr HostLoad kBusy{.load_1min = 3.0, .runnable = 3, .cpus = 2};
constexpr HostLoad kOneBusyTask{.runnable = 1, .cpus = 4};

// The load the fake reader reports (nullptr: it fails) and how often it
// was asked.
const HostLoad* fake_load = nullptr;
int load_reads = 0;
bool ReadFakeLoad(HostLoad* load) {
  ++load_reads;
  if (fake_load == nullptr) return false;
  *load = *fake_load;
  return true;
}

const char* Apply(std::vector<const char*> env, long pid, const HostLoad* load) {
  env.push_back(nullptr);
  fake_load = load;
  return OmpWaitSettingToApply(env.data(), pid, &ReadFakeLoad);
}

TEST(OmpWaitPolicyTest, NoSettingGetsTheLoadsChoice) {
  EXPECT_STREQ(Apply({"PATH=/bin"}, 7, &kQuiet), "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(Apply({"PATH=/bin"}, 7, &kBusy), "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(Apply({}, 7, nullptr), "GOMP_SPINCOUNT=10000");
  // A marker alone (its setting was removed) does not count as a setting.
  EXPECT_STREQ(Apply({"TPX_OMP_WAIT_AUTO=5:GOMP_SPINCOUNT=10000"}, 7, &kBusy),
               "OMP_WAIT_POLICY=PASSIVE");
}

TEST(OmpWaitPolicyTest, ThreadsComeFromTpxNumThreads) {
  // 4 CPUs, one busy task: a team of 4 meets it, a team of 2 does not.
  EXPECT_STREQ(Apply({}, 7, &kOneBusyTask), "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(Apply({"TPX_NUM_THREADS=2"}, 7, &kOneBusyTask), "GOMP_SPINCOUNT=10000");
  EXPECT_STREQ(Apply({"TPX_NUM_THREADS=4"}, 7, &kOneBusyTask), "OMP_WAIT_POLICY=PASSIVE");
  // Malformed counts are ignored (one thread per CPU).
  for (const char* bad : {"TPX_NUM_THREADS=", "TPX_NUM_THREADS=2x", "TPX_NUM_THREADS=0",
                          "TPX_NUM_THREADS=-2"}) {
    EXPECT_STREQ(Apply({bad}, 7, &kOneBusyTask), "OMP_WAIT_POLICY=PASSIVE") << bad;
  }
  // The load's own thread count wins.
  HostLoad two = kOneBusyTask;
  two.threads = 2;
  EXPECT_STREQ(Apply({"TPX_NUM_THREADS=4"}, 7, &two), "GOMP_SPINCOUNT=10000");
}

TEST(OmpWaitPolicyTest, UsersSettingStands) {
  load_reads = 0;
  for (const char* user : {"OMP_WAIT_POLICY=ACTIVE", "OMP_WAIT_POLICY=PASSIVE",
                           "GOMP_SPINCOUNT=300000", "GOMP_SPINCOUNT=10000"}) {
    EXPECT_EQ(Apply({user}, 7, &kBusy), nullptr) << user;
    EXPECT_EQ(Apply({user}, 7, &kQuiet), nullptr) << user;
    // A marker naming another setting: the user replaced the inherited choice.
    EXPECT_EQ(Apply({user, "TPX_OMP_WAIT_AUTO=5:GOMP_SPINCOUNT=1"}, 7, &kBusy), nullptr) << user;
  }
  // A user's entry beside an inherited automatic one.
  EXPECT_EQ(Apply({"GOMP_SPINCOUNT=10000", "OMP_WAIT_POLICY=ACTIVE",
                   "TPX_OMP_WAIT_AUTO=5:GOMP_SPINCOUNT=10000"},
                  7, &kBusy),
            nullptr);
  // A malformed marker proves nothing: the setting stands.
  EXPECT_EQ(Apply({"GOMP_SPINCOUNT=10000", "TPX_OMP_WAIT_AUTO=GOMP_SPINCOUNT=10000"}, 7, &kBusy),
            nullptr);
  EXPECT_EQ(Apply({"GOMP_SPINCOUNT=10000", "TPX_OMP_WAIT_AUTO=x5:GOMP_SPINCOUNT=10000"}, 7,
                  &kBusy),
            nullptr);
  // Nothing to choose, so the load (~10 ms of sampling) was never read.
  EXPECT_EQ(load_reads, 0);
}

TEST(OmpWaitPolicyTest, InheritedAutomaticChoiceIsMadeAgain) {
  // Chosen by process 5 on a quiet host; process 7 starts on a busy one.
  EXPECT_STREQ(Apply({"GOMP_SPINCOUNT=10000", "TPX_OMP_WAIT_AUTO=5:GOMP_SPINCOUNT=10000"}, 7,
                     &kBusy),
               "OMP_WAIT_POLICY=PASSIVE");
  EXPECT_STREQ(Apply({"OMP_WAIT_POLICY=PASSIVE", "TPX_OMP_WAIT_AUTO=5:OMP_WAIT_POLICY=PASSIVE"},
                     7, &kQuiet),
               "GOMP_SPINCOUNT=10000");
  // The same choice again: nothing to change.
  EXPECT_EQ(Apply({"GOMP_SPINCOUNT=10000", "TPX_OMP_WAIT_AUTO=5:GOMP_SPINCOUNT=10000"}, 7,
                  &kQuiet),
            nullptr);
  // This process's own choice, made before it re-executed itself, stands
  // whatever the load is now (no second re-exec, no second load reading).
  load_reads = 0;
  EXPECT_EQ(Apply({"GOMP_SPINCOUNT=10000", "TPX_OMP_WAIT_AUTO=7:GOMP_SPINCOUNT=10000"}, 7,
                  &kBusy),
            nullptr);
  EXPECT_EQ(load_reads, 0);
  // An unreadable load: the quiet host's setting.
  EXPECT_STREQ(Apply({"OMP_WAIT_POLICY=PASSIVE", "TPX_OMP_WAIT_AUTO=5:OMP_WAIT_POLICY=PASSIVE"},
                     7, nullptr),
               "GOMP_SPINCOUNT=10000");
}

TEST(OmpWaitPolicyTest, ReadsThisHostsLoad) {
  HostLoad load;
  ASSERT_TRUE(ReadHostLoad(&load));
  EXPECT_GE(load.load_1min, 0.0);
  EXPECT_GE(load.runnable, 0);
  EXPECT_GE(load.cpus, 1);
  EXPECT_EQ(load.threads, 0);
}

// The test binary links //core:omp_wait_policy, so unless the environment
// chose a policy, exactly one of the two settings was added before main,
// with the marker naming this process and that setting.
TEST(OmpWaitPolicyTest, SettingIsChosenBeforeMain) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* marker = std::getenv(kOmpWaitAutoVariable);
  const std::string p = policy ? policy : "", s = spin ? spin : "";
  if (marker == nullptr) {
    GTEST_SKIP() << "the environment chose OMP_WAIT_POLICY=" << p << " GOMP_SPINCOUNT=" << s;
  }
  ASSERT_TRUE((p == "PASSIVE" && spin == nullptr) || (s == "10000" && policy == nullptr))
      << "OMP_WAIT_POLICY=" << p << " GOMP_SPINCOUNT=" << s;
  const std::string setting = policy ? "OMP_WAIT_POLICY=PASSIVE" : "GOMP_SPINCOUNT=10000";
  EXPECT_EQ(std::string(marker), std::to_string(getpid()) + ":" + setting);
}

// Runs this test binary again with `env` as its whole environment, only the
// ReportEnvironment test selected, and returns what that child saw
// ("OMP_WAIT_POLICY=... GOMP_SPINCOUNT=... marker=..." or "" on failure).
std::string ChildSees(std::vector<std::string> env) {
  const std::string report =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/omp_wait_child_" + std::to_string(getpid()) + ".txt";
  std::remove(report.c_str());
  env.push_back("OMP_WAIT_TEST_REPORT=" + report);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=OmpWaitPolicyTest.ReportEnvironment";
  char* argv[] = {filter.data(), filter.data(), nullptr};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  argv[0] = exe;
  const pid_t child = fork();
  if (child == 0) {
    const int quiet = open("/dev/null", O_WRONLY);
    if (quiet >= 0) dup2(quiet, STDOUT_FILENO);
    execve(exe, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return "";
  }
  std::ifstream in(report);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The child side of ChildSees (skipped when run on its own).
TEST(OmpWaitPolicyTest, ReportEnvironment) {
  const char* report = std::getenv("OMP_WAIT_TEST_REPORT");
  if (report == nullptr) GTEST_SKIP() << "runs as ChildSees's child";
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "-");
  };
  std::ofstream out(report);
  out << "OMP_WAIT_POLICY=" << get("OMP_WAIT_POLICY") << " GOMP_SPINCOUNT="
      << get("GOMP_SPINCOUNT") << " marker=" << get(kOmpWaitAutoVariable);
  ASSERT_TRUE(out.good());
}

// Real processes: an explicit setting reaches the program untouched, and a
// setting inherited from another process's automatic choice is made again
// (with a marker naming the child itself).
TEST(OmpWaitPolicyTest, ExplicitSettingsReachTheProgram) {
  EXPECT_EQ(ChildSees({"OMP_WAIT_POLICY=ACTIVE"}),
            "OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=- marker=-");
  EXPECT_EQ(ChildSees({"GOMP_SPINCOUNT=300000"}),
            "OMP_WAIT_POLICY=- GOMP_SPINCOUNT=300000 marker=-");
  EXPECT_EQ(ChildSees({"OMP_WAIT_POLICY=PASSIVE", "TPX_OMP_WAIT_AUTO=1:GOMP_SPINCOUNT=10000"}),
            "OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=- marker=1:GOMP_SPINCOUNT=10000");
  const std::string fresh = ChildSees({});
  EXPECT_TRUE(fresh.rfind("OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=- marker=", 0) == 0 ||
              fresh.rfind("OMP_WAIT_POLICY=- GOMP_SPINCOUNT=10000 marker=", 0) == 0)
      << fresh;
  // Inherited from process 1: chosen again here, so the marker names the
  // child (not 1) and the setting it names.
  const std::string inherited =
      ChildSees({"OMP_WAIT_POLICY=PASSIVE", "TPX_OMP_WAIT_AUTO=1:OMP_WAIT_POLICY=PASSIVE"});
  const bool passive = inherited.rfind("OMP_WAIT_POLICY=PASSIVE ", 0) == 0;
  const bool spin = inherited.rfind("OMP_WAIT_POLICY=- GOMP_SPINCOUNT=10000 ", 0) == 0;
  ASSERT_TRUE(passive || spin) << inherited;
  // Kept as is when the load still says PASSIVE (marker of process 1), else
  // re-chosen by the child.
  if (spin) {
    EXPECT_EQ(inherited.find("marker=1:"), std::string::npos) << inherited;
    EXPECT_NE(inherited.find(":GOMP_SPINCOUNT=10000"), std::string::npos) << inherited;
  } else {
    EXPECT_NE(inherited.find("marker=1:OMP_WAIT_POLICY=PASSIVE"), std::string::npos) << inherited;
  }
}

}  // namespace
}  // namespace tpx
