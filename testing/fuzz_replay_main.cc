// A main() for libFuzzer targets when they are built without libFuzzer (gcc,
// the default toolchain): runs LLVMFuzzerTestOneInput on every file of the
// seed corpus, then on a bounded number of deterministic mutations of those
// seeds, so every build of the suite exercises the target a little.
// `--config=fuzz` (clang) links libFuzzer's own main instead.
//
//   store_request_fuzzer --mutations=20000 comm/fuzz/corpus/store_request/*
//
// Dies (the target's own abort or trap) on the first failing input, after
// writing it to $TEST_UNDECLARED_OUTPUTS_DIR/crash_input (or ./crash_input).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run; written out by the crash handler for replay.
const std::string* g_current = nullptr;
char g_crash_path[4096];

void OnCrash(int sig) {
  int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0 && g_current != nullptr) {
    (void)!::write(fd, g_current->data(), g_current->size());
    ::close(fd);
  }
  const char msg[] = "fuzz replay: crashing input written to ";
  (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)!::write(STDERR_FILENO, g_crash_path, std::strlen(g_crash_path));
  (void)!::write(STDERR_FILENO, "\n", 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void InstallCrashHandler() {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash_input", dir ? dir : ".");
  for (int sig : {SIGABRT, SIGSEGV, SIGFPE, SIGILL, SIGBUS, SIGTRAP}) ::signal(sig, OnCrash);
}

void RunOne(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

std::string Mutate(const std::string& seed, const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  std::string s = seed;
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[pos % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!s.empty()) s[pos % s.size()] = static_cast<char>(rng());
        break;
      case 2:  // insert bytes
        s.insert(pos, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // erase bytes
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 8);
        break;
      case 4: {  // an interesting 32-bit value (sizes, counts)
        static constexpr uint32_t kValues[] = {0, 1, 2, 0x7fffffff, 0xffffffff, 0x80000000,
                                               4096, 65536, 1u << 24};
        uint32_t v = kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
        s.insert(pos, reinterpret_cast<const char*>(&v), 4);
        break;
      }
      case 5: {  // splice in part of another seed
        const std::string& other = seeds[rng() % seeds.size()];
        if (!other.empty()) {
          size_t from = rng() % other.size();
          s.insert(pos, other.substr(from, 1 + rng() % (other.size() - from)));
        }
        break;
      }
    }
  }
  if (s.size() > 1 << 16) s.resize(1 << 16);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 0;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--mutations=", 12) == 0) {
      mutations = std::strtol(arg + 12, nullptr, 10);
      continue;
    }
    std::ifstream in(arg, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", arg);
      return 2;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    seeds.push_back(buf.str());
  }
  InstallCrashHandler();
  if (seeds.empty()) {
    std::fprintf(stderr, "fuzz replay: no seed files given\n");
    return 2;
  }
  for (const std::string& s : seeds) RunOne(s);
  std::mt19937_64 rng(20260101);  // fixed: every run checks the same inputs
  for (long m = 0; m < mutations; ++m) RunOne(Mutate(seeds[m % seeds.size()], seeds, rng));
  std::printf("fuzz replay: %zu seeds and %ld mutations passed\n", seeds.size(), mutations);
  return 0;
}
