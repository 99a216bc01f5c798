#include "core/autograd/recompute.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/engine.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/status_macros.h"

namespace tpx::ag {
namespace {

class RecomputeFunction final : public Function {
 public:
  RecomputeFunction(RecomputeFn fn, RecomputeOptions options, size_t num_block_inputs)
      : fn_(std::move(fn)), options_(std::move(options)), num_block_inputs_(num_block_inputs) {
    set_materialize_grads(false);  // outputs without a gradient are not roots
  }

  std::string name() const override { return "Recompute"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> all_inputs) override {
    absl::Span<const Tensor> inputs = all_inputs.subspan(0, num_block_inputs_);
    std::vector<Variable> in;
    for (const Tensor& t : inputs) in.push_back(t.defined() ? Variable(t) : Variable());
    TPX_ASSIGN_OR_RETURN(std::vector<Variable> out, fn_(in));  // grad mode is off here
    std::vector<Tensor> values;
    for (const Variable& v : out) values.push_back(v.defined() ? v.value() : Tensor());
    SaveForBackward(std::vector<Tensor>(inputs.begin(), inputs.end()));
    return values;
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad_outputs) override {
    if (options_.before_recompute) TPX_RETURN_IF_ERROR(options_.before_recompute());
    std::vector<Variable> leaves;
    for (size_t i = 0; i < saved_tensors().size(); ++i) {
      const Tensor& t = saved(i);
      leaves.push_back(t.defined() ? Variable(t, needs_input_grad(i)) : Variable());
    }
    std::vector<Variable> out;
    {
      EnableGradGuard grad;
      TPX_ASSIGN_OR_RETURN(out, fn_(leaves));
    }
    if (out.size() != grad_outputs.size()) {
      return absl::InternalError(absl::StrCat("the recomputed block returned ", out.size(),
                                              " outputs, the first run ", grad_outputs.size()));
    }
    std::vector<Variable> roots;
    std::vector<Tensor> grads;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(out[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) TPX_RETURN_IF_ERROR(tpx::Backward(roots, grads));
    if (options_.after_recompute) TPX_RETURN_IF_ERROR(options_.after_recompute());
    std::vector<Tensor> input_grads(num_inputs());  // the anchor gets none
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].defined()) input_grads[i] = leaves[i].grad();
    }
    return input_grads;
  }

 protected:
  void ReleaseSavedState() override { fn_ = nullptr; }

 private:
  RecomputeFn fn_;
  RecomputeOptions options_;
  size_t num_block_inputs_;
};

}  // namespace

absl::StatusOr<std::vector<Variable>> Recompute(RecomputeFn fn, absl::Span<const Variable> inputs,
                                                RecomputeOptions options) {
  // The block may need gradients for Variables it captures (weights) even
  // when no input requires grad (the first block of a model): an anchor
  // input that requires grad makes sure the block is always recorded.
  std::vector<Variable> all_inputs(inputs.begin(), inputs.end());
  if (GradModeEnabled()) {
    TPX_ASSIGN_OR_RETURN(Tensor anchor, Tensor::Zeros({}));
    all_inputs.emplace_back(std::move(anchor), /*requires_grad=*/true);
  }
  return ApplyMulti(
      std::make_shared<RecomputeFunction>(std::move(fn), std::move(options), inputs.size()),
      all_inputs);
}

}  // namespace tpx::ag
