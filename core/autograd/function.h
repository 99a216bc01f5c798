// Function: one differentiable operation of the autograd graph, with its
// Forward and Backward on plain Tensors.
//
// Every differentiable op (ag::Mul, ag::Linear, ...) is a Function; layers
// define their own the same way, e.g. a linear layer whose Backward starts an
// asynchronous all-reduce of the input gradient and overlaps it with the
// weight-gradient GEMM:
//
//   class ScaleBy final : public Function {
//    public:
//     explicit ScaleBy(double s) : s_(s) {}
//     std::string name() const override { return "ScaleBy"; }
//     absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
//       TPX_ASSIGN_OR_RETURN(Tensor y, ops::Scale(in[0], s_));
//       return std::vector<Tensor>{y};
//     }
//     absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
//       TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Scale(g[0], s_));
//       return std::vector<Tensor>{dx};
//     }
//    private:
//     double s_;
//   };
//   TPX_ASSIGN_OR_RETURN(Variable y, Apply(std::make_shared<ScaleBy>(2.0), {x}));
//
// Contract:
//  - A Function object is applied once. Non-tensor arguments go to its
//    constructor; Variables go through Apply (an undefined Variable arrives as
//    an undefined Tensor, e.g. "no bias").
//  - Forward runs with grad mode off. It keeps what Backward needs with
//    SaveForBackward (freed after Backward unless retain_graph) and may
//    consult needs_input_grad(i) to save less.
//  - Backward gets one gradient per output (zeros for outputs that received
//    none, unless set_materialize_grads(false), then undefined) and returns
//    one per input: an undefined Tensor means "no gradient". A returned
//    gradient must have the input's shape; a different dtype is converted to
//    the input's. It is not called when no output received a gradient.
//  - Errors returned by Forward come out of Apply; errors returned by Backward
//    come out of Backward(), prefixed with "Backward of <name>: ".
//  - Backward runs with grad mode off and may call Backward() itself on
//    another graph (the engine is reentrant), as recomputation does.
//  - To fuse gradient accumulation, Backward may add a weight's gradient into
//    its main_grad() itself (the weight Variable passed to the constructor)
//    and return no gradient for it; the weight's post-accumulate hooks (e.g. a
//    data-parallel all-reduce) still run.
#ifndef TPX_CORE_AUTOGRAD_FUNCTION_H_
#define TPX_CORE_AUTOGRAD_FUNCTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx {

namespace autograd_internal {
class GraphAccess;
}  // namespace autograd_internal

class Function {
 public:
  // Where a gradient flows: output `output_nr` of `function` (its Backward
  // receives the gradient in slot output_nr). A null function: nowhere.
  struct Edge {
    std::shared_ptr<Function> function;
    int output_nr = 0;
  };

  virtual ~Function();
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;

  // Used in error messages ("Mul", "ColumnParallelLinear").
  virtual std::string name() const = 0;
  virtual absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> inputs) = 0;
  virtual absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad_outputs) = 0;

  // Metadata recorded by Apply; valid in Forward (inputs) and Backward.
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // True when input i requires a gradient (and grad mode was on).
  bool needs_input_grad(size_t i) const;
  bool input_defined(size_t i) const;
  const Shape& input_shape(size_t i) const;
  DType input_dtype(size_t i) const;
  const Shape& output_shape(size_t i) const;
  DType output_dtype(size_t i) const;
  Device output_device(size_t i) const;

  // Order of creation; later Functions run earlier in Backward when several
  // are ready.
  uint64_t sequence_nr() const { return sequence_nr_; }
  // One edge per input.
  const std::vector<Edge>& next_edges() const { return next_edges_; }

 protected:
  Function() = default;

  // Keeps tensors for Backward; replaces anything saved before.
  void SaveForBackward(std::vector<Tensor> tensors);
  const std::vector<Tensor>& saved_tensors() const { return saved_; }
  // Programming error if i is out of range.
  const Tensor& saved(size_t i) const;
  // With false, Backward sees undefined Tensors for outputs without a gradient.
  void set_materialize_grads(bool materialize) { materialize_grads_ = materialize; }
  // Called when the graph is freed after Backward; override to drop tensors
  // kept in members rather than through SaveForBackward.
  virtual void ReleaseSavedState() {}

 private:
  friend class autograd_internal::GraphAccess;
  friend absl::StatusOr<std::vector<Variable>> ApplyMulti(std::shared_ptr<Function> fn,
                                                          absl::Span<const Variable> inputs);

  struct TensorMeta {
    bool defined = false;
    Shape shape;
    DType dtype = DType::kF32;
    Device device;
  };
  // Hooks registered on the non-leaf Variables this Function produced.
  struct OutputHook {
    HookId id;
    int output_nr;
    GradHook hook;
  };

  std::vector<TensorMeta> inputs_;
  std::vector<TensorMeta> outputs_;
  std::vector<bool> needs_input_grad_;
  std::vector<Edge> next_edges_;
  std::vector<Tensor> saved_;
  std::vector<OutputHook> output_hooks_;
  // Non-leaf outputs whose gradient is retained (RetainGrad), by output_nr.
  std::vector<std::weak_ptr<autograd_internal::VariableImpl>> retained_outputs_;
  uint64_t sequence_nr_ = 0;
  bool applied_ = false;
  bool saved_released_ = false;
  bool had_saved_ = false;
  bool materialize_grads_ = true;
  // Runs even when no gradient arrived (leaf accumulators, for their hooks).
  bool runs_without_grad_ = false;
};

// Runs fn->Forward on the inputs' values and, when grad mode is on and some
// input requires grad, records fn in the graph: the outputs get grad_fn = fn
// and require grad (floating outputs only). Errors: Forward's errors; fn was
// already applied.
absl::StatusOr<std::vector<Variable>> ApplyMulti(std::shared_ptr<Function> fn,
                                                 absl::Span<const Variable> inputs);
// ApplyMulti for a Function with exactly one output (error otherwise).
absl::StatusOr<Variable> Apply(std::shared_ptr<Function> fn, absl::Span<const Variable> inputs);

}  // namespace tpx

#endif  // TPX_CORE_AUTOGRAD_FUNCTION_H_
