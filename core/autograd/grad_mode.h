// Grad mode: whether differentiable ops record a graph on this thread.
//
//   {
//     NoGradGuard no_grad;                      // e.g. evaluation, optimizer steps
//     TPX_ASSIGN_OR_RETURN(Variable y, ag::Mul(x, w));   // y.requires_grad() == false
//   }
//
// Grad mode is thread-local and on by default. The guards restore the previous
// mode when they go out of scope, so they nest. The engine turns grad mode off
// while it runs Backward functions; activation recomputation turns it back on
// with EnableGradGuard.
#ifndef TPX_CORE_AUTOGRAD_GRAD_MODE_H_
#define TPX_CORE_AUTOGRAD_GRAD_MODE_H_

namespace tpx {

bool GradModeEnabled();
void SetGradModeEnabled(bool enabled);

// Disables recording in its scope.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradModeEnabled()) { SetGradModeEnabled(false); }
  ~NoGradGuard() { SetGradModeEnabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Enables recording in its scope (inside a NoGradGuard or a Backward function).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradModeEnabled()) { SetGradModeEnabled(true); }
  ~EnableGradGuard() { SetGradModeEnabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tpx

#endif  // TPX_CORE_AUTOGRAD_GRAD_MODE_H_
