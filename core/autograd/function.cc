#include "core/autograd/function.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/internal.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace tpx {

using autograd_internal::AccumulateGrad;
using autograd_internal::GraphAccess;
using autograd_internal::VariableImpl;

namespace {

uint64_t NextSequenceNr() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

Function::~Function() {
  // Frees the chain of producers iteratively: destroying a deep graph through
  // nested shared_ptr destructors would overflow the stack.
  std::vector<std::shared_ptr<Function>> orphans;
  auto take_edges = [&orphans](std::vector<Edge>& edges) {
    for (Edge& e : edges) {
      if (e.function != nullptr && e.function.use_count() == 1) {
        orphans.push_back(std::move(e.function));
      }
    }
    edges.clear();
  };
  take_edges(next_edges_);
  while (!orphans.empty()) {
    std::shared_ptr<Function> fn = std::move(orphans.back());
    orphans.pop_back();
    take_edges(fn->next_edges_);
  }  // each fn is destroyed here, with no edges left to recurse into
}

bool Function::needs_input_grad(size_t i) const {
  TPX_CHECK(i < needs_input_grad_.size()) << name() << ": input " << i << " of " << num_inputs();
  return needs_input_grad_[i];
}

bool Function::input_defined(size_t i) const {
  TPX_CHECK(i < inputs_.size()) << name() << ": input " << i << " of " << num_inputs();
  return inputs_[i].defined;
}

const Shape& Function::input_shape(size_t i) const {
  TPX_CHECK(i < inputs_.size()) << name() << ": input " << i << " of " << num_inputs();
  return inputs_[i].shape;
}

DType Function::input_dtype(size_t i) const {
  TPX_CHECK(i < inputs_.size()) << name() << ": input " << i << " of " << num_inputs();
  return inputs_[i].dtype;
}

const Shape& Function::output_shape(size_t i) const {
  TPX_CHECK(i < outputs_.size()) << name() << ": output " << i << " of " << num_outputs();
  return outputs_[i].shape;
}

Device Function::output_device(size_t i) const {
  TPX_CHECK(i < outputs_.size()) << name() << ": output " << i << " of " << num_outputs();
  return outputs_[i].device;
}

DType Function::output_dtype(size_t i) const {
  TPX_CHECK(i < outputs_.size()) << name() << ": output " << i << " of " << num_outputs();
  return outputs_[i].dtype;
}

void Function::SaveForBackward(std::vector<Tensor> tensors) {
  saved_ = std::move(tensors);
  had_saved_ = had_saved_ || !saved_.empty();
  saved_released_ = false;
}

const Tensor& Function::saved(size_t i) const {
  TPX_CHECK(i < saved_.size()) << name() << ": saved tensor " << i << " of " << saved_.size();
  return saved_[i];
}

absl::StatusOr<std::vector<Variable>> ApplyMulti(std::shared_ptr<Function> fn,
                                                 absl::Span<const Variable> inputs) {
  if (fn == nullptr) return absl::InvalidArgumentError("Apply: null Function");
  if (fn->applied_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Apply: Function ", fn->name(), " was already applied; make a new one"));
  }
  fn->applied_ = true;
  const bool record =
      GradModeEnabled() && std::any_of(inputs.begin(), inputs.end(),
                                       [](const Variable& v) { return v.requires_grad(); });

  std::vector<Tensor> values;
  values.reserve(inputs.size());
  fn->inputs_.resize(inputs.size());
  fn->needs_input_grad_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& v = inputs[i];
    values.push_back(v.defined() ? v.value() : Tensor());
    if (v.defined()) fn->inputs_[i] = {true, v.shape(), v.dtype(), v.value().device()};
    fn->needs_input_grad_[i] = record && v.requires_grad();
  }

  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    TPX_ASSIGN_OR_RETURN(outs, fn->Forward(values));
  }
  std::vector<Variable> result;
  result.reserve(outs.size());
  if (!record) {
    for (Tensor& t : outs) result.emplace_back(std::move(t));
    GraphAccess::ReleaseSaved(*fn);
    return result;
  }

  fn->sequence_nr_ = NextSequenceNr();
  fn->next_edges_.reserve(inputs.size());
  for (const Variable& v : inputs) fn->next_edges_.push_back(GraphAccess::GradientEdge(v));
  fn->outputs_.resize(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].defined())
      fn->outputs_[i] = {true, outs[i].shape(), outs[i].dtype(), outs[i].device()};
    auto impl = std::make_shared<VariableImpl>();
    impl->value = std::move(outs[i]);
    if (impl->value.defined() && IsFloatingPoint(impl->value.dtype())) {
      impl->requires_grad = true;
      impl->grad_fn = fn;
      impl->output_nr = static_cast<int>(i);
    }
    result.push_back(VariableImpl::MakeHandle(std::move(impl)));
  }
  return result;
}

absl::StatusOr<Variable> Apply(std::shared_ptr<Function> fn, absl::Span<const Variable> inputs) {
  std::string name = fn ? fn->name() : "";
  TPX_ASSIGN_OR_RETURN(std::vector<Variable> outs, ApplyMulti(std::move(fn), inputs));
  if (outs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Apply: ", name, " returned ", outs.size(), " outputs; use ApplyMulti"));
  }
  return std::move(outs[0]);
}

namespace autograd_internal {

Function::Edge GraphAccess::GradientEdge(const Variable& v) {
  if (!v.requires_grad()) return {};
  VariableImpl* impl = v.impl_.get();
  if (impl->grad_fn != nullptr) return {impl->grad_fn, impl->output_nr};
  std::shared_ptr<AccumulateGrad> acc = impl->accumulator.lock();
  if (acc == nullptr) {
    acc = std::make_shared<AccumulateGrad>(v.impl_);
    impl->accumulator = acc;
  }
  return {acc, 0};
}

void GraphAccess::ReleaseSaved(Function& fn) {
  fn.saved_.clear();
  fn.saved_.shrink_to_fit();
  fn.saved_released_ = true;
  fn.ReleaseSavedState();
}

void GraphAccess::MarkAccumulator(Function& fn, const Shape& shape, DType dtype, Device device) {
  fn.applied_ = true;
  fn.runs_without_grad_ = true;
  fn.materialize_grads_ = false;
  fn.sequence_nr_ = std::numeric_limits<uint64_t>::max();
  fn.outputs_ = {{true, shape, dtype, device}};
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<VariableImpl> leaf) : leaf_(std::move(leaf)) {
  GraphAccess::MarkAccumulator(*this, leaf_->value.shape(), leaf_->value.dtype(),
                               leaf_->value.device());
}

std::string AccumulateGrad::name() const {
  return leaf_->name.empty() ? "AccumulateGrad" : absl::StrCat("AccumulateGrad(", leaf_->name, ")");
}

absl::StatusOr<std::vector<Tensor>> AccumulateGrad::Forward(absl::Span<const Tensor>) {
  return absl::InternalError("AccumulateGrad has no forward");
}

absl::StatusOr<std::vector<Tensor>> AccumulateGrad::Backward(
    absl::Span<const Tensor> grad_outputs) {
  Tensor grad = grad_outputs.empty() ? Tensor() : grad_outputs[0];
  Variable leaf = VariableImpl::MakeHandle(leaf_);
  if (grad.defined()) {
    std::vector<GradHook> hooks;
    for (const auto& h : leaf_->hooks) hooks.push_back(h.hook);
    TPX_ASSIGN_OR_RETURN(grad, RunGradHooks(hooks, std::move(grad), leaf.ToString()));
  }
  if (grad.defined()) {
    TPX_RETURN_IF_ERROR(AccumulateInto(leaf_->grad, grad, leaf_->value.dtype()));
  }
  std::vector<PostAccumulateHook> post_hooks;
  for (const auto& h : leaf_->post_hooks) post_hooks.push_back(h.hook);
  for (const PostAccumulateHook& hook : post_hooks) {
    absl::Status s = hook(leaf);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("post-accumulate hook of ", leaf.ToString(), ": ", s.message()));
    }
  }
  return std::vector<Tensor>{};
}

}  // namespace autograd_internal
}  // namespace tpx
