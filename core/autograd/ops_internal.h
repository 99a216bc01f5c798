// Private to //core/autograd:ops: a Function made of two closures, so each
// differentiable op is its forward and backward formula and nothing else.
#ifndef TPX_CORE_AUTOGRAD_OPS_INTERNAL_H_
#define TPX_CORE_AUTOGRAD_OPS_INTERNAL_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tpx::ag::internal {

class LambdaOp;
using Tensors = std::vector<Tensor>;
// Closures get the Function to save tensors and read metadata.
using ForwardFn = std::function<absl::StatusOr<Tensors>(LambdaOp& op, absl::Span<const Tensor> in)>;
using BackwardFn = std::function<absl::StatusOr<Tensors>(LambdaOp& op, absl::Span<const Tensor> g)>;

class LambdaOp final : public Function {
 public:
  LambdaOp(std::string name, ForwardFn forward, BackwardFn backward)
      : name_(std::move(name)), forward_(std::move(forward)), backward_(std::move(backward)) {}
  std::string name() const override { return name_; }
  absl::StatusOr<Tensors> Forward(absl::Span<const Tensor> in) override {
    return forward_(*this, in);
  }
  absl::StatusOr<Tensors> Backward(absl::Span<const Tensor> g) override {
    return backward_(*this, g);
  }
  void Save(Tensors tensors) { SaveForBackward(std::move(tensors)); }
  const Tensor& Saved(size_t i) const { return saved(i); }
  void MaterializeGrads(bool on) { set_materialize_grads(on); }

 protected:
  // The forward closure may capture tensors (masks, indices); Backward reads
  // them through Save/Saved, so the closure can go with the saved tensors.
  void ReleaseSavedState() override { forward_ = nullptr; }

 private:
  std::string name_;
  ForwardFn forward_;
  BackwardFn backward_;
};

inline absl::StatusOr<Variable> ApplyOp(std::string name, ForwardFn forward, BackwardFn backward,
                                        absl::Span<const Variable> inputs) {
  return Apply(std::make_shared<LambdaOp>(std::move(name), std::move(forward), std::move(backward)),
               inputs);
}

inline absl::StatusOr<std::vector<Variable>> ApplyMultiOp(std::string name, ForwardFn forward,
                                                          BackwardFn backward,
                                                          absl::Span<const Variable> inputs) {
  return ApplyMulti(
      std::make_shared<LambdaOp>(std::move(name), std::move(forward), std::move(backward)), inputs);
}

// The gradient of an operand broadcast to g's shape: g summed back to `shape`.
inline absl::StatusOr<Tensor> ReduceTo(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  return ops::SumTo(g, shape);
}

// A 0-d zero of g's dtype on g's device, for Where-based masking.
inline absl::StatusOr<Tensor> ZeroLike0d(const Tensor& g) {
  return Tensor::Zeros({}, g.dtype(), g.device());
}

}  // namespace tpx::ag::internal

#endif  // TPX_CORE_AUTOGRAD_OPS_INTERNAL_H_
