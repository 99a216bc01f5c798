#include "bench/pytorch_peer.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tpx::bench {
namespace {

TEST(ParsePeerThreadsTest, TakesOmpColonBlas) {
  absl::StatusOr<PeerThreads> t = ParsePeerThreads("2:1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->omp, 2);
  EXPECT_EQ(t->blas, 1);
}

TEST(ParsePeerThreadsTest, RejectsMalformedEntriesNamingThem) {
  for (const char* bad : {"", "2", "2:", ":2", "0:1", "1:0", "a:b", "1:2:3", "-1:1"}) {
    absl::StatusOr<PeerThreads> t = ParsePeerThreads(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(absl::StrCat("'", bad, "'")), std::string::npos)
        << t.status();
  }
}

TEST(CheckPeerFlagsTest, AcceptsAutoAndEnvOnly) {
  absl::SetFlag(&FLAGS_pytorch_openblas_core, "auto");
  EXPECT_TRUE(CheckPeerFlags().ok());
  absl::SetFlag(&FLAGS_pytorch_openblas_core, "env");
  EXPECT_TRUE(CheckPeerFlags().ok());
  absl::SetFlag(&FLAGS_pytorch_openblas_core, "Haswell");
  const absl::Status s = CheckPeerFlags();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'Haswell'"), std::string::npos) << s;
  absl::SetFlag(&FLAGS_pytorch_openblas_core, "auto");
}

TEST(JsonNumberTest, ReadsTheFirstLineWithTheKey) {
  const std::string lines =
      "{\"bench\":\"x\",\"skipped\":\"no torch\"}\n"
      "{\"bench\":\"x\",\"step_ms\":12.5,\"tokens_per_s\":3e4}\n"
      "{\"step_ms\":99}\n";
  EXPECT_DOUBLE_EQ(JsonNumber(lines, "step_ms", -1), 12.5);
  EXPECT_DOUBLE_EQ(JsonNumber(lines, "tokens_per_s", -1), 3e4);
  EXPECT_DOUBLE_EQ(JsonNumber(lines, "missing", -1), -1);
  EXPECT_DOUBLE_EQ(JsonNumber("{\"step_ms\":\"text\"}", "step_ms", -2), -2);
  // A key at the very end of a view that is not the end of its string.
  const std::string s = "{\"step_ms\":7}123";
  EXPECT_DOUBLE_EQ(JsonNumber(absl::string_view(s).substr(0, s.size() - 3), "step_ms", -1), 7);
}

// A fake peer: --python is /bin/sh and the "script" a shell script, which
// prints its arguments as one JSON line (or fails as told).
class RunPytorchPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir();
    absl::SetFlag(&FLAGS_python, "/bin/sh");
    absl::SetFlag(&FLAGS_pytorch_openblas_core, "env");
  }
  void TearDown() override {
    absl::SetFlag(&FLAGS_python, "/usr/bin/python3");
    absl::SetFlag(&FLAGS_pytorch_openblas_core, "auto");
  }
  std::string WriteScript(const std::string& name, const std::string& body) {
    const std::string path = absl::StrCat(dir_, "/", name);
    FILE* f = std::fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr);
    std::fputs(body.c_str(), f);
    std::fclose(f);
    return path;
  }
  std::string dir_;
};

TEST_F(RunPytorchPeerTest, PassesArgumentsAndThreadsAndReturnsTheOutput) {
  const std::string script = WriteScript(
      "echo_peer.sh", "printf '{\"args\":\"'; printf '%s|' \"$@\"; echo '\",\"step_ms\":4.25}'\n");
  absl::StatusOr<std::string> out =
      RunPytorchPeer(script, {"--steps=3", "--name=it's"}, PeerThreads{2, 1});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "{\"args\":\"--steps=3|--name=it's|--omp_threads=2|--blas_threads=1|"
            "--openblas_core=env|\",\"step_ms\":4.25}\n");
  EXPECT_DOUBLE_EQ(JsonNumber(*out, "step_ms", -1), 4.25);
}

TEST_F(RunPytorchPeerTest, SaysWhyItCouldNotRun) {
  absl::StatusOr<std::string> out =
      RunPytorchPeer(absl::StrCat(dir_, "/no_such_peer.py"), {}, PeerThreads{});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(out.status().message().find("no_such_peer.py not found"), std::string::npos);

  const std::string failing = WriteScript("failing_peer.sh", "echo '{\"partial\":1}'; exit 3\n");
  out = RunPytorchPeer(failing, {}, PeerThreads{});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("exited with status"), std::string::npos);

  const std::string silent = WriteScript("silent_peer.sh", "exit 0\n");
  out = RunPytorchPeer(silent, {}, PeerThreads{});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);

  absl::SetFlag(&FLAGS_python, absl::StrCat(dir_, "/no_such_python"));
  out = RunPytorchPeer(failing, {}, PeerThreads{});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(out.status().message().find("no python at"), std::string::npos);
}

}  // namespace
}  // namespace tpx::bench
