// Variable: a tensor that takes part in automatic differentiation.
//
// A Variable is a shared handle to a node of the autograd graph: its value (a
// Tensor), its accumulated gradient, whether it requires a gradient, and the
// Function that produced it (grad_fn). Leaves (parameters, inputs) have no
// grad_fn; Backward() accumulates into their grad(). Non-leaves are outputs of
// differentiable ops and keep the graph alive through grad_fn.
//
//   Variable w(weight_tensor, /*requires_grad=*/true, "fc1.weight");
//   TPX_ASSIGN_OR_RETURN(Variable y, ag::Linear(x, w));
//   TPX_ASSIGN_OR_RETURN(Variable loss, ag::Mean(y));
//   TPX_RETURN_IF_ERROR(Backward(loss));
//   const Tensor& dw = w.grad();            // same shape and dtype as w.value()
//
// Gradients are allocated lazily, on first accumulation, with the dtype of the
// value; later backward passes add into them (ops::AddInPlace), so gradient
// accumulation over micro-batches needs no extra code. ClearGrad() or
// ZeroGrad() resets them.
//
// Hooks:
//  - RegisterHook: sees the gradient arriving at this Variable (summed over
//    all its uses in the pass) before it is accumulated (leaf) or handed to
//    grad_fn (non-leaf); it may replace it, or drop it by returning an
//    undefined Tensor (e.g. after adding it into an f32 main_grad itself).
//  - RegisterPostAccumulateHook (leaves): runs once per Backward pass after
//    the pass's gradient for this leaf is accumulated; the place to add
//    grad() into main_grad() or to launch a data-parallel all-reduce.
//  A hook must not capture its own Variable (that would keep it and its graph
//  alive forever); the post-accumulate hook receives the leaf as an argument.
//
// Thread-safety: a Variable is not synchronised; one thread at a time may run
// ops or Backward on a graph.
#ifndef TPX_CORE_AUTOGRAD_VARIABLE_H_
#define TPX_CORE_AUTOGRAD_VARIABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx {

class Function;
class Variable;

namespace autograd_internal {
struct VariableImpl;
class GraphAccess;
}  // namespace autograd_internal

// Receives the incoming gradient; returns the gradient to use: the argument
// to keep it, a tensor of the same shape to replace it, or an undefined Tensor
// to drop it. It must not modify its argument in place (it may be shared
// with other gradients). An error aborts the Backward pass.
using GradHook = std::function<absl::StatusOr<Tensor>(const Tensor& grad)>;
// Receives the leaf after its gradient for this pass was accumulated.
// leaf.grad() is undefined when every contribution was dropped by a GradHook
// or went elsewhere (a Function that wrote into main_grad() directly).
using PostAccumulateHook = std::function<absl::Status(Variable& leaf)>;
// Identifies a registered hook for RemoveHook.
using HookId = int64_t;

class Variable {
 public:
  // An undefined Variable (defined() == false), e.g. "no bias".
  Variable() = default;
  // A leaf holding `value` (shared, not copied). requires_grad needs a
  // defined floating value (a programming error otherwise: aborts).
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});

  bool defined() const { return impl_ != nullptr; }
  // The accessors below are programming errors (abort) on an undefined Variable.
  const Tensor& value() const;
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }
  int64_t dim() const { return value().dim(); }
  int64_t numel() const { return value().numel(); }

  bool requires_grad() const;
  // Leaves only: error on a non-leaf, or when enabling it on a non-floating value.
  absl::Status set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  // The Function that produced this Variable (null for leaves) and which of
  // its outputs this is.
  const std::shared_ptr<Function>& grad_fn() const;
  int output_nr() const;

  const std::string& name() const;
  void set_name(std::string name);

  // Accumulated gradient; undefined until a Backward pass reached this
  // Variable (leaves, or non-leaves after RetainGrad()).
  const Tensor& grad() const;
  // Replaces the gradient (undefined clears it). Error on a shape mismatch.
  absl::Status set_grad(Tensor grad);
  void ClearGrad();
  // Fills a defined gradient with zeros (keeps its memory).
  absl::Status ZeroGrad();

  // An optional higher-precision gradient buffer owned by the caller (e.g.
  // f32 for a bf16 parameter). The engine never touches it; Functions and
  // hooks that fuse gradient accumulation write into it.
  const Tensor& main_grad() const;
  void set_main_grad(Tensor main_grad);

  // A new leaf sharing this value, with no grad_fn and requires_grad false.
  Variable Detach() const;
  // Makes a non-leaf keep its gradient in grad() (accumulating across passes,
  // like a leaf). No-op on leaves. Error if it does not require grad.
  absl::Status RetainGrad();
  bool retains_grad() const;

  // See GradHook. Error if the Variable does not require grad.
  absl::StatusOr<HookId> RegisterHook(GradHook hook);
  // See PostAccumulateHook. Error unless a leaf that requires grad.
  absl::StatusOr<HookId> RegisterPostAccumulateHook(PostAccumulateHook hook);
  // Returns false if no hook of this Variable has this id.
  bool RemoveHook(HookId id);

  // True when both handles refer to the same Variable.
  bool SameAs(const Variable& other) const { return impl_ == other.impl_; }
  // "Variable(fc1.weight, f32[4, 3], requires_grad, grad_fn=Mul)" for messages.
  std::string ToString() const;

 private:
  friend struct autograd_internal::VariableImpl;
  friend class autograd_internal::GraphAccess;
  explicit Variable(std::shared_ptr<autograd_internal::VariableImpl> impl)
      : impl_(std::move(impl)) {}

  std::shared_ptr<autograd_internal::VariableImpl> impl_;
};

}  // namespace tpx

#endif  // TPX_CORE_AUTOGRAD_VARIABLE_H_
