// TensorMapFunction: a one-input, one-output autograd Function whose Forward
// and Backward are given as tensor -> tensor callables. The mappings and the
// variable-size primitives are all pairs of collectives, so each is written as
// its (forward, backward) pair instead of a class per op.
//
//   auto fn = std::make_shared<TensorMapFunction>("ReduceFromTensorParallelRegion",
//       [&comm](const Tensor& x) { return AllReduceSum(comm, x); },
//       [](const Tensor& g) -> absl::StatusOr<Tensor> { return g; });
//   TPX_ASSIGN_OR_RETURN(Variable y, Apply(fn, {x}));
#ifndef TPX_PARALLEL_TENSOR_MAP_FUNCTION_H_
#define TPX_PARALLEL_TENSOR_MAP_FUNCTION_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/autograd/function.h"
#include "core/status_macros.h"
#include "core/tensor.h"

namespace tpx::parallel {

class TensorMapFunction final : public Function {
 public:
  using Map = std::function<absl::StatusOr<Tensor>(const Tensor&)>;
  TensorMapFunction(std::string name, Map forward, Map backward)
      : name_(std::move(name)), forward_(std::move(forward)), backward_(std::move(backward)) {}
  std::string name() const override { return name_; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(Tensor y, forward_(in[0]));
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad) override {
    if (!needs_input_grad(0)) return std::vector<Tensor>{Tensor()};
    TPX_ASSIGN_OR_RETURN(Tensor g, backward_(grad[0]));
    return std::vector<Tensor>{g};
  }

 private:
  std::string name_;
  Map forward_;
  Map backward_;
};

// Applies a (forward, backward) pair to x.
inline absl::StatusOr<Variable> ApplyTensorMap(std::string name, TensorMapFunction::Map forward,
                                               TensorMapFunction::Map backward,
                                               const Variable& x) {
  return Apply(std::make_shared<TensorMapFunction>(std::move(name), std::move(forward),
                                                   std::move(backward)),
               {x});
}

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_TENSOR_MAP_FUNCTION_H_
