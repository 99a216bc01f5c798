#include "comm/init.h"

#include <cstdlib>
#include <map>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/launch_env.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

InitOptions Options(std::string backend, std::optional<LaunchEnv> launch = std::nullopt) {
  InitOptions options;
  options.backend = std::move(backend);
  options.launch = std::move(launch);
  return options;
}

EnvLookup MapLookup(const std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

absl::StatusOr<LaunchEnv> FromMap(const std::map<std::string, std::string>& vars) {
  return ReadLaunchEnv(MapLookup(vars));
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  auto env = FromMap({});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->launcher, "none");
}

TEST(LaunchEnv, Tpx) {
  auto env = FromMap({{"TPX_RANK", "2"}, {"TPX_WORLD_SIZE", "4"}, {"TPX_LOCAL_RANK", "0"},
                      {"TPX_LOCAL_WORLD_SIZE", "2"}, {"TPX_STORE_ADDR", "127.0.0.1"},
                      {"TPX_STORE_PORT", "29400"}, {"TPX_STORE_HOSTED", "1"},
                      // tpx variables win over torchrun-style ones.
                      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "tpx");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->store_port, 29400);
  EXPECT_TRUE(env->store_hosted_by_launcher);
}

TEST(LaunchEnv, Torchrun) {
  auto env = FromMap({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                      {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->store_host, "localhost");
  EXPECT_EQ(env->store_port, 29501);  // MASTER_PORT itself belongs to torchrun's store
  EXPECT_FALSE(env->store_hosted_by_launcher);
}

TEST(LaunchEnv, OpenMpiAndSlurm) {
  auto mpi = FromMap({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                      {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->launcher, "openmpi");
  EXPECT_EQ(mpi->rank, 5);
  EXPECT_EQ(mpi->local_world_size, 4);
  EXPECT_EQ(mpi->store_port, 1235);
  auto slurm = FromMap({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                        {"SLURM_NTASKS_PER_NODE", "2(x2)"}, {"TPX_STORE_PORT", "999"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->launcher, "slurm");
  EXPECT_EQ(slurm->rank, 3);
  EXPECT_EQ(slurm->local_rank, 1);
  EXPECT_EQ(slurm->local_world_size, 2);
  EXPECT_EQ(slurm->store_port, 999);
}

TEST(LaunchEnv, SlurmRendezvousFromNodeListAndJobId) {
  auto slurm = FromMap({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                        {"SLURM_JOB_NODELIST", "gpu[03-05,9]x,cpu1"}, {"SLURM_JOB_ID", "123456"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->store_host, "gpu03x");
  EXPECT_EQ(slurm->store_port, 10000 + 123456 % 20000);
  auto step = FromMap({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "7"},
                       {"SLURM_STEP_NODELIST", "a1,b2"}, {"SLURM_JOB_NODELIST", "c[1-4]"}});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->store_host, "a1");
  EXPECT_EQ(step->store_port, 10007);
  // Explicit settings win.
  auto given = FromMap({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "7"},
                        {"SLURM_JOB_NODELIST", "c[1-4]"}, {"MASTER_ADDR", "m"},
                        {"MASTER_PORT", "500"}});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->store_host, "m");
  EXPECT_EQ(given->store_port, 501);
}

TEST(LaunchEnv, ErrorsNameTheVariable) {
  auto bad_rank = FromMap({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_rank.status().message().find("RANK='4'"), std::string::npos) << bad_rank.status();
  auto no_size = FromMap({{"TPX_RANK", "0"}});
  EXPECT_NE(no_size.status().message().find("TPX_WORLD_SIZE"), std::string::npos);
  auto no_port = FromMap({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(no_port.status().message().find("MASTER_PORT"), std::string::npos);
  auto junk = FromMap({{"RANK", "0"}, {"WORLD_SIZE", "two"}});
  EXPECT_NE(junk.status().message().find("WORLD_SIZE='two'"), std::string::npos);
}

// What a launcher writes is what a rank reads back, also for torchrun readers.
TEST(LaunchEnv, VariablesReadBack) {
  LaunchEnv written;
  written.rank = 5;
  written.world_size = 8;
  written.local_rank = 1;
  written.local_world_size = 4;
  written.store_host = "10.0.0.1";
  written.store_port = 29500;
  written.store_hosted_by_launcher = true;
  written.store_secret = "s3cret";
  std::map<std::string, std::string> vars;
  for (const auto& [name, value] : LaunchEnvVariables(written)) vars[name] = value;
  auto read = FromMap(vars);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->launcher, "tpx");
  EXPECT_EQ(read->rank, 5);
  EXPECT_EQ(read->world_size, 8);
  EXPECT_EQ(read->local_rank, 1);
  EXPECT_EQ(read->local_world_size, 4);
  EXPECT_EQ(read->store_host, "10.0.0.1");
  EXPECT_EQ(read->store_port, 29500);
  EXPECT_TRUE(read->store_hosted_by_launcher);
  EXPECT_EQ(read->store_secret, "s3cret");
  EXPECT_EQ(vars["RANK"], "5");
  EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "4");
  written.store_hosted_by_launcher = false;
  written.store_secret = "";
  vars.clear();
  for (const auto& [name, value] : LaunchEnvVariables(written)) vars[name] = value;
  EXPECT_EQ(vars.count("TPX_STORE_SECRET"), 0u);
  EXPECT_FALSE(FromMap(vars)->store_hosted_by_launcher);
}

TEST(LaunchEnv, StartedByLauncherSeesEveryLaunchersRank) {
  auto started = [](const std::map<std::string, std::string>& vars) {
    return StartedByLauncher(MapLookup(vars));
  };
  EXPECT_FALSE(started({}));
  EXPECT_FALSE(started({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}));
  for (const char* rank : {"TPX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    EXPECT_TRUE(started({{rank, "0"}})) << rank;
  }
}

TEST(Init, BackendAndTimeoutResolution) {
  unsetenv("TPX_COMM_BACKEND");
  unsetenv("TPX_COMM_TIMEOUT_MS");
  EXPECT_EQ(ResolveBackend(), "ucx");
  absl::SetFlag(&FLAGS_tpx_comm_backend, "nccl");
  EXPECT_EQ(ResolveBackend(), "nccl");
  setenv("TPX_COMM_BACKEND", "fake", 1);
  EXPECT_EQ(ResolveBackend(), "fake");
  EXPECT_EQ(ResolveBackend(Options("explicit")), "explicit");
  absl::SetFlag(&FLAGS_tpx_comm_backend, "ucx");
  unsetenv("TPX_COMM_BACKEND");

  EXPECT_EQ(*ResolveTimeout(), absl::Minutes(5));
  setenv("TPX_COMM_TIMEOUT_MS", "1500", 1);
  EXPECT_EQ(*ResolveTimeout(), absl::Milliseconds(1500));
  setenv("TPX_COMM_TIMEOUT_MS", "soon", 1);
  EXPECT_EQ(ResolveTimeout().status().code(), absl::StatusCode::kInvalidArgument);
  unsetenv("TPX_COMM_TIMEOUT_MS");
}

TEST(Init, SingleProcessWorldWithFakeBackend) {
  setenv("TPX_COMM_PLUGIN_PATH",
         (std::string(std::getenv("TEST_SRCDIR")) + "/tpx/comm/test_plugins").c_str(), 1);
  auto world = Init(Options("fake", LaunchEnv{}));
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ((*world)->size(), 1);
  EXPECT_EQ((*world)->name(), "world");
  float x[2] = {1, 2}, y[2] = {};
  EXPECT_TRUE((*world)->AllReduce(x, y, 2, DType::kF32, ReduceOp::kSum).Wait().ok());
  EXPECT_EQ(y[1], 2.0f);
}

TEST(Init, BackendThatNeverFinishesTimesOutAtTwiceTheTimeout) {
  setenv("TPX_COMM_PLUGIN_PATH",
         (std::string(std::getenv("TEST_SRCDIR")) + "/tpx/comm/test_plugins").c_str(), 1);
  InitOptions options = Options("fakestuck", LaunchEnv{});
  options.timeout = absl::Milliseconds(200);
  auto world = Init(options);
  ASSERT_TRUE(world.ok()) << world.status();
  float x[2] = {1, 2};
  const absl::Time start = absl::Now();
  const absl::Status s = (*world)->AllReduce(x, 2, DType::kF32, ReduceOp::kSum).Wait();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("within 2x the communicator timeout"), std::string::npos) << s;
  EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s;
  // Two of the backend's waits, not one and not forever.
  EXPECT_GE(took, absl::Milliseconds(400));
  EXPECT_LT(took, absl::Seconds(10));
}

TEST(Init, MissingBackendSaysWhatToDo) {
  auto world = Init(Options("nosuchbackend", LaunchEnv{}));
  EXPECT_EQ(world.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(world.status().message().find("TPX_COMM_PLUGIN_PATH"), std::string::npos);
}

}  // namespace
}  // namespace tpx::comm
