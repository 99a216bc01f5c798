#include "checkpoint/checkpoint_without_output.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/engine.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/status_macros.h"
#include "rng/tracker.h"

namespace tpx::checkpoint {

struct CheckpointWithoutOutput::State {
  ag::RecomputeFn fn;
  rng::AllRngStates forward_rng;
  std::vector<Tensor> inputs;   // saved block inputs
  std::vector<Tensor> outputs;  // the outputs handed to the caller
  std::vector<Variable> leaves, recomputed;
  bool checkpointed = false, discarded = false;

  // Reruns fn with grad mode on and the forward's RNG states, then writes
  // the recomputed values into the caller's output memory.
  absl::Status Recompute(const std::vector<bool>& needs_grad) {
    if (!recomputed.empty()) return absl::OkStatus();
    leaves.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      leaves.push_back(inputs[i].defined() ? Variable(inputs[i], needs_grad[i]) : Variable());
    }
    const rng::AllRngStates outer = rng::GetAllRngStates();
    rng::SetAllRngStates(forward_rng);
    absl::StatusOr<std::vector<Variable>> out;
    {
      EnableGradGuard grad;
      out = fn(leaves);
    }
    rng::SetAllRngStates(outer);
    if (!out.ok()) return out.status();
    if (out->size() != outputs.size()) {
      return absl::InternalError(absl::StrCat("CheckpointWithoutOutput: the recomputed block gave ",
                                              out->size(), " outputs, the first run ",
                                              outputs.size()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined()) TPX_RETURN_IF_ERROR(outputs[i].CopyFrom((*out)[i].value()));
    }
    recomputed = std::move(*out);
    return absl::OkStatus();
  }
};

namespace {

class CheckpointWithoutOutputFn final : public Function {
 public:
  explicit CheckpointWithoutOutputFn(std::shared_ptr<CheckpointWithoutOutput::State> state)
      : state_(std::move(state)) {
    set_materialize_grads(false);
  }
  std::string name() const override { return "CheckpointWithoutOutput"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    std::vector<Variable> args;
    for (const Tensor& t : in) args.push_back(t.defined() ? Variable(t) : Variable());
    TPX_ASSIGN_OR_RETURN(std::vector<Variable> out, state_->fn(args));  // grad mode off
    std::vector<Tensor> values;
    for (const Variable& v : out) {
      if (v.defined() && !v.value().is_contiguous()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CheckpointWithoutOutput: block outputs must be contiguous, got ",
            v.value().ToString()));
      }
      // Discarding releases the outputs' host pages.
      if (v.defined()) TPX_RETURN_IF_ERROR(RequireCpu(v.value(), "CheckpointWithoutOutput"));
      values.push_back(v.defined() ? v.value() : Tensor());
    }
    state_->inputs.assign(in.begin(), in.end());
    state_->outputs = values;
    return values;
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grads) override {
    std::vector<bool> needs(num_inputs());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_input_grad(i);
    // Normally the hook has recomputed already; without a discard, do it now.
    TPX_RETURN_IF_ERROR(state_->Recompute(needs));
    std::vector<Variable> roots;
    std::vector<Tensor> root_grads;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined() && state_->recomputed[i].requires_grad()) {
        roots.push_back(state_->recomputed[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) TPX_RETURN_IF_ERROR(tpx::Backward(roots, root_grads));
    std::vector<Tensor> input_grads(num_inputs());
    for (size_t i = 0; i < state_->leaves.size(); ++i) {
      if (state_->leaves[i].defined() && needs_input_grad(i)) {
        input_grads[i] = state_->leaves[i].grad();
      }
    }
    return input_grads;
  }

 protected:
  void ReleaseSavedState() override { state_.reset(); }

 private:
  std::shared_ptr<CheckpointWithoutOutput::State> state_;
};

}  // namespace

size_t ReleasePages(void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end <= begin) return 0;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
}

CheckpointWithoutOutput::CheckpointWithoutOutput() : state_(std::make_shared<State>()) {}

absl::StatusOr<std::vector<Variable>> CheckpointWithoutOutput::Checkpoint(
    ag::RecomputeFn fn, absl::Span<const Variable> inputs) {
  if (state_->checkpointed) {
    return absl::FailedPreconditionError(
        "CheckpointWithoutOutput::Checkpoint: this object already checkpointed a block");
  }
  state_->checkpointed = true;
  state_->fn = std::move(fn);
  state_->forward_rng = rng::GetAllRngStates();
  return ApplyMulti(std::make_shared<CheckpointWithoutOutputFn>(state_), inputs);
}

absl::Status CheckpointWithoutOutput::DiscardOutputAndRegisterRecompute(
    const Variable& hook_tensor) {
  if (!state_->checkpointed || state_->discarded) {
    return absl::FailedPreconditionError(
        "CheckpointWithoutOutput::DiscardOutputAndRegisterRecompute: needs exactly one "
        "Checkpoint before it and may be called once");
  }
  state_->discarded = true;
  for (const Tensor& t : state_->outputs) {
    if (t.defined()) ReleasePages(t.raw_data(), t.nbytes());
  }
  if (!hook_tensor.requires_grad()) return absl::OkStatus();
  std::weak_ptr<State> weak = state_;
  // The hook cannot see which inputs need a gradient: it records the graph
  // for every floating input; the Function's Backward returns only the wanted.
  std::vector<bool> needs;
  for (const Tensor& t : state_->inputs) needs.push_back(t.defined() && IsFloatingPoint(t.dtype()));
  Variable hooked = hook_tensor;
  absl::StatusOr<HookId> id =
      hooked.RegisterHook([weak, needs](const Tensor& g) -> absl::StatusOr<Tensor> {
        if (auto s = weak.lock()) TPX_RETURN_IF_ERROR(s->Recompute(needs));
        return g;
      });
  return id.status();
}

}  // namespace tpx::checkpoint
