// Private to //core/autograd: the state behind a Variable, the leaf
// accumulator, and the engine's access to Function internals.
#ifndef TPX_CORE_AUTOGRAD_INTERNAL_H_
#define TPX_CORE_AUTOGRAD_INTERNAL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/autograd/function.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx::autograd_internal {

class AccumulateGrad;

struct VariableImpl {
  Tensor value;
  Tensor grad;
  Tensor main_grad;
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Function> grad_fn;  // null for leaves
  int output_nr = 0;
  std::string name;
  // Leaves only: hooks live here (non-leaf hooks live on grad_fn). The
  // accumulator is weak: the graph owns it, it owns this leaf.
  struct LeafHook {
    HookId id;
    GradHook hook;
  };
  struct LeafPostHook {
    HookId id;
    PostAccumulateHook hook;
  };
  std::vector<LeafHook> hooks;
  std::vector<LeafPostHook> post_hooks;
  std::weak_ptr<AccumulateGrad> accumulator;

  static Variable MakeHandle(std::shared_ptr<VariableImpl> impl) {
    return Variable(std::move(impl));
  }
};

HookId NextHookId();

// slot += grad, allocating slot (dtype `dtype`, grad's shape) on first use.
// Never aliases grad, which may be shared.
absl::Status AccumulateInto(Tensor& slot, const Tensor& grad, DType dtype);

// Runs hooks in registration order on grad; stops at an undefined result.
// A result of another shape is an error naming `who`.
absl::StatusOr<Tensor> RunGradHooks(const std::vector<GradHook>& hooks, Tensor grad,
                                    const std::string& who);

// The graph node that adds a leaf's gradient into leaf.grad().
class AccumulateGrad final : public Function {
 public:
  explicit AccumulateGrad(std::shared_ptr<VariableImpl> leaf);
  std::string name() const override;
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> inputs) override;
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad_outputs) override;

 private:
  std::shared_ptr<VariableImpl> leaf_;
};

// The engine's and Variable's access to Function's private state.
class GraphAccess {
 public:
  static VariableImpl* Impl(const Variable& v);
  static std::shared_ptr<VariableImpl> SharedImpl(const Variable& v);
  // Where a gradient for v goes: grad_fn for non-leaves, the (created on
  // demand) accumulator for leaves that require grad, else nowhere.
  static Function::Edge GradientEdge(const Variable& v);
  static std::vector<Function::OutputHook>& OutputHooks(Function& fn) { return fn.output_hooks_; }
  static std::vector<std::weak_ptr<VariableImpl>>& RetainedOutputs(Function& fn) {
    return fn.retained_outputs_;
  }
  static bool RunsWithoutGrad(const Function& fn) { return fn.runs_without_grad_; }
  static bool MaterializesGrads(const Function& fn) { return fn.materialize_grads_; }
  static bool SavedReleased(const Function& fn) { return fn.saved_released_ && fn.had_saved_; }
  static void ReleaseSaved(Function& fn);
  static void MarkAccumulator(Function& fn, const Shape& shape, DType dtype, Device device);
};

}  // namespace tpx::autograd_internal

#endif  // TPX_CORE_AUTOGRAD_INTERNAL_H_
