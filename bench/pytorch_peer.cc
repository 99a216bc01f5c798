#include "bench/pytorch_peer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "Interpreter for the PyTorch peer (Debian's python3-torch is under /usr/bin).");
ABSL_FLAG(std::string, pytorch_openblas_core, "auto",
          "OpenBLAS kernels of the PyTorch peer: auto (OpenBLAS's choice for this CPU; the "
          "machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are dropped for the peer; where "
          "OpenBLAS does not know the CPU model and falls back to SSE kernels, the newest kernel "
          "set the CPU's features allow, the peer's lines naming both) or env (as the "
          "environment says).");

namespace tpx::bench {
namespace {

// `s` as one word for the shell.
std::string ShellQuoted(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

}  // namespace

absl::StatusOr<PeerThreads> ParsePeerThreads(absl::string_view setting) {
  std::vector<std::string> parts = absl::StrSplit(setting, ':');
  PeerThreads t;
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &t.omp) &&
      absl::SimpleAtoi(parts[1], &t.blas) && t.omp >= 1 && t.blas >= 1) {
    return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad --pytorch_threads entry '", setting, "' (want omp:blas, both >= 1)"));
}

absl::Status CheckPeerFlags() {
  const std::string core = absl::GetFlag(FLAGS_pytorch_openblas_core);
  if (core == "auto" || core == "env") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--pytorch_openblas_core must be auto or env, not '", core, "'"));
}

absl::StatusOr<std::string> RunPytorchPeer(absl::string_view script,
                                           const std::vector<std::string>& args,
                                           PeerThreads threads) {
  const std::string script_path(script);
  if (access(script_path.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(script, " not found"));
  }
  const std::string python = absl::GetFlag(FLAGS_python);
  if (access(python.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no python at ", python));
  }
  std::string cmd = absl::StrCat(ShellQuoted(python), " ", ShellQuoted(script));
  for (const std::string& arg : args) absl::StrAppend(&cmd, " ", ShellQuoted(arg));
  absl::StrAppend(&cmd, " --omp_threads=", threads.omp, " --blas_threads=", threads.blas,
                  " --openblas_core=", ShellQuoted(absl::GetFlag(FLAGS_pytorch_openblas_core)));
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("could not start python");
  std::string output;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) {
    std::fputs(buf, stdout);
    output += buf;
  }
  const int rc = pclose(pipe);
  std::fflush(stdout);
  if (output.empty() || rc != 0) {
    return absl::InternalError(absl::StrCat("peer exited with status ", rc));
  }
  return output;
}

double JsonNumber(absl::string_view json_lines, absl::string_view key, double fallback) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = json_lines.find(quoted);
  if (at == absl::string_view::npos) return fallback;
  const std::string number(json_lines.substr(at + quoted.size(), 32));
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  return end == number.c_str() ? fallback : v;
}

}  // namespace tpx::bench
