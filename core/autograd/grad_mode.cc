#include "core/autograd/grad_mode.h"

namespace tpx {
namespace {
thread_local bool grad_mode_enabled = true;
}  // namespace

bool GradModeEnabled() { return grad_mode_enabled; }
void SetGradModeEnabled(bool enabled) { grad_mode_enabled = enabled; }

}  // namespace tpx
