#include "comm_nccl/device_probe.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tpx::nccl {
namespace {

// The child's answer: a device count, or -1 and a reason.
struct ProbeResult {
  int count = -1;
  char why[256] = {};
};

ProbeResult Probe() {
  ProbeResult result;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::snprintf(result.why, sizeof(result.why), "CUDA driver not installed (%s)", ::dlerror());
    return result;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  if (init == nullptr || count == nullptr) {
    std::snprintf(result.why, sizeof(result.why), "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
    return result;
  }
  int rc = init(0);
  if (rc != 0) {
    std::snprintf(result.why, sizeof(result.why), "cuInit failed with CUresult %d", rc);
    return result;
  }
  int n = 0;
  rc = count(&n);
  if (rc != 0) {
    std::snprintf(result.why, sizeof(result.why), "cuDeviceGetCount failed with CUresult %d", rc);
    return result;
  }
  result.count = n;
  if (n == 0) std::snprintf(result.why, sizeof(result.why), "the driver reports 0 devices");
  return result;
}

// One probe in a forked child. It must run before this process initialises
// CUDA: a child forked after that cannot use CUDA, so cuInit fails there.
int ProbeInChild(std::string* why) {
  int fds[2];
  if (::pipe(fds) != 0) {
    *why = "pipe() failed";
    return 0;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    *why = "fork() failed";
    return 0;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ProbeResult result = Probe();
    ssize_t ignored = ::write(fds[1], &result, sizeof(result));
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  ProbeResult result;
  size_t got = 0;
  while (got < sizeof(result)) {
    ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&result) + got, sizeof(result) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != sizeof(result)) {
    *why = "the CUDA probe process died";
    return 0;
  }
  if (result.count <= 0) {
    *why = result.why;
    return 0;
  }
  why->clear();
  return result.count;
}

}  // namespace

int VisibleCudaDevices(std::string* why) {
  // The first answer is kept, so that a test which probes again after it
  // initialised CUDA (by loading the plugin, say) still gets the right count.
  struct Answer {
    int count;
    std::string why;
  };
  static const Answer answer = [] {
    Answer a;
    a.count = ProbeInChild(&a.why);
    return a;
  }();
  *why = answer.why;
  return answer.count;
}

}  // namespace tpx::nccl
