#include "comm_ucx/tunables.h"

#include <algorithm>
#include <cstdlib>

#include "comm/plugin_log.h"

namespace tpx::ucx {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(v, &end, 10);
  if (end != v && parsed >= 0) return parsed;
  TPX_PLUGIN_LOG(WARNING) << "ucx: " << name << "='" << v
                          << "' is not a non-negative integer; using " << fallback;
  return fallback;
}

// `value` of knob `name`, raised to `minimum`.
int64_t AtLeast(const char* name, int64_t value, int64_t minimum) {
  if (value >= minimum) return value;
  TPX_PLUGIN_LOG(WARNING) << "ucx: " << name << "=" << value << " is below " << minimum
                          << "; using " << minimum;
  return minimum;
}

}  // namespace

const Tunables& GetTunables() {
  static const Tunables tunables = [] {
    Tunables t;
    t.chunk_bytes = static_cast<size_t>(
        AtLeast("TPX_UCX_CHUNK_BYTES", EnvInt("TPX_UCX_CHUNK_BYTES", 1 << 20), 4096));
    t.small_bytes = static_cast<size_t>(EnvInt("TPX_UCX_SMALL_BYTES", 64 << 10));
    t.spin_us = EnvInt("TPX_UCX_SPIN_US", 50);
    t.yield_us = EnvInt("TPX_UCX_YIELD_US", 2000);
    t.tick_us = AtLeast("TPX_UCX_TICK_US", EnvInt("TPX_UCX_TICK_US", 200), 10);
    t.busy_tick_us = std::max(t.tick_us, EnvInt("TPX_UCX_BUSY_TICK_US", 20000));
    t.check_lengths = EnvInt("TPX_UCX_CHECK_LENGTHS", 1) != 0;
    t.shm = EnvInt("TPX_UCX_SHM", 1) != 0;
    t.shm_bytes = static_cast<size_t>(EnvInt("TPX_UCX_SHM_BYTES", 64 << 10));
    t.cma = EnvInt("TPX_UCX_CMA", 1) != 0;
    t.cma_chunk_bytes = static_cast<size_t>(
        AtLeast("TPX_UCX_CMA_CHUNK_BYTES", EnvInt("TPX_UCX_CMA_CHUNK_BYTES", 1 << 20), 64));
    t.shm_mid_allgather = EnvInt("TPX_UCX_SHM_MID_ALLGATHER", 0);
    if (t.shm_mid_allgather > 2) {
      TPX_PLUGIN_LOG(WARNING) << "ucx: TPX_UCX_SHM_MID_ALLGATHER=" << t.shm_mid_allgather
                              << " is not 0, 1 or 2; using 0";
      t.shm_mid_allgather = 0;
    }
    return t;
  }();
  return tunables;
}

}  // namespace tpx::ucx
