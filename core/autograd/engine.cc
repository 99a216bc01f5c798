#include "core/autograd/engine.h"

#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/internal.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx {

using autograd_internal::GraphAccess;
using autograd_internal::VariableImpl;

namespace {

absl::Status WithContext(const absl::Status& s, const Function& fn) {
  return absl::Status(s.code(), absl::StrCat("Backward of ", fn.name(), ": ", s.message()));
}

// Per-Function state of one Backward pass.
struct NodeTask {
  int dependencies = 0;
  std::vector<Tensor> grads;  // one slot per output, summed over consumers
};

// Adds grad into slot without modifying either tensor in place: gradients
// are often shared (Add passes one tensor to both inputs).
absl::Status AddToSlot(Tensor& slot, const Tensor& grad) {
  if (!grad.defined()) return absl::OkStatus();
  if (!slot.defined()) {
    slot = grad;
    return absl::OkStatus();
  }
  TPX_ASSIGN_OR_RETURN(slot, ops::Add(slot, grad));
  return absl::OkStatus();
}

// Where Grad() wants gradients: (output_nr of the Function, index into the result).
using CaptureSlots = std::vector<std::pair<int, size_t>>;
struct Captures {
  std::unordered_map<Function*, CaptureSlots> slots;
  std::vector<std::shared_ptr<Function>> functions;  // keeps the keys alive
  std::vector<Tensor> grads;
};

// Grad(): copies the gradients wanted from fn's output slots.
void Capture(Captures* captures, Function& fn, const std::vector<Tensor>& grads) {
  if (captures == nullptr) return;
  auto it = captures->slots.find(&fn);
  if (it == captures->slots.end()) return;
  for (const auto& [slot, index] : it->second) captures->grads[index] = grads[slot];
}

// Hooks and retained gradients of fn's outputs, then fn->Backward. With
// captures (Grad()), records the wanted gradients and changes no grad().
absl::StatusOr<std::vector<Tensor>> RunFunction(Function& fn, std::vector<Tensor> grads,
                                                bool retain_graph, Captures* captures) {
  grads.resize(fn.num_outputs());
  if (captures != nullptr && GraphAccess::RunsWithoutGrad(fn)) {  // a leaf accumulator
    Capture(captures, fn, grads);
    return std::vector<Tensor>(fn.num_inputs());
  }
  auto& output_hooks = GraphAccess::OutputHooks(fn);
  auto& retained = GraphAccess::RetainedOutputs(fn);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    std::vector<GradHook> hooks;
    for (const auto& h : output_hooks) {
      if (h.output_nr == static_cast<int>(i)) hooks.push_back(h.hook);
    }
    if (!hooks.empty()) {
      TPX_ASSIGN_OR_RETURN(
          grads[i], autograd_internal::RunGradHooks(hooks, std::move(grads[i]),
                                                    absl::StrCat("output ", i, " of ", fn.name())));
    }
    if (captures == nullptr && i < retained.size() && grads[i].defined()) {
      if (std::shared_ptr<VariableImpl> impl = retained[i].lock()) {
        TPX_RETURN_IF_ERROR(
            autograd_internal::AccumulateInto(impl->grad, grads[i], impl->value.dtype()));
      }
    }
  }
  Capture(captures, fn, grads);

  bool any_grad = false;
  for (const Tensor& g : grads) any_grad = any_grad || g.defined();
  std::vector<Tensor> input_grads;
  if (!any_grad && !GraphAccess::RunsWithoutGrad(fn)) {
    input_grads.resize(fn.num_inputs());
  } else {
    if (GraphAccess::SavedReleased(fn)) {
      return absl::FailedPreconditionError(
          absl::StrCat("Backward of ", fn.name(),
                       ": its saved tensors were already freed by an earlier Backward; pass "
                       "retain_graph = true to run Backward through a graph more than once"));
    }
    if (GraphAccess::MaterializesGrads(fn)) {
      for (size_t i = 0; i < grads.size(); ++i) {
        if (grads[i].defined()) continue;
        TPX_ASSIGN_OR_RETURN(grads[i], Tensor::Zeros(fn.output_shape(i), fn.output_dtype(i),
                                                               fn.output_device(i)));
      }
    }
    absl::StatusOr<std::vector<Tensor>> result = fn.Backward(grads);
    if (!result.ok()) return WithContext(result.status(), fn);
    input_grads = *std::move(result);
    if (input_grads.size() != fn.num_inputs()) {
      return absl::InternalError(absl::StrCat("Backward of ", fn.name(), " returned ",
                                              input_grads.size(), " gradients for ",
                                              fn.num_inputs(), " inputs"));
    }
    for (size_t i = 0; i < input_grads.size(); ++i) {
      Tensor& g = input_grads[i];
      if (!g.defined()) continue;
      if (!fn.needs_input_grad(i)) {
        g = Tensor();
        continue;
      }
      if (g.shape() != fn.input_shape(i)) {
        return absl::InternalError(absl::StrCat(
            "Backward of ", fn.name(), " returned ", g.ToString(), " as the gradient of input ", i,
            ", which has shape ", ShapeString(fn.input_shape(i))));
      }
      if (g.dtype() != fn.input_dtype(i)) {
        TPX_ASSIGN_OR_RETURN(g, g.To(fn.input_dtype(i)));
      }
    }
  }
  if (!retain_graph) GraphAccess::ReleaseSaved(fn);
  return input_grads;
}

struct LaterFirst {
  bool operator()(const Function* a, const Function* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

absl::Status RunBackward(absl::Span<const Variable> roots, absl::Span<const Tensor> grad_outputs,
                         BackwardOptions options, Captures* captures) {
  if (!grad_outputs.empty() && grad_outputs.size() != roots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Backward: ", roots.size(), " roots but ",
                                                   grad_outputs.size(), " grad_outputs"));
  }
  // Backward functions compute on Tensors; only recomputation records again.
  NoGradGuard no_grad;

  std::vector<std::pair<Function::Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    if (!root.defined())
      return absl::InvalidArgumentError(absl::StrCat("Backward: root ", i, " is undefined"));
    if (!root.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Backward: root ", i, " ", root.ToString(),
          " does not require grad (no input requires grad, or it was made under NoGradGuard)"));
    }
    Tensor grad = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!grad.defined()) {
      if (root.numel() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("Backward: root ", i, " ", root.ToString(),
                         " is not a single element; pass its grad_output"));
      }
      TPX_ASSIGN_OR_RETURN(grad, Tensor::Ones(root.shape(), root.dtype(), root.value().device()));
    } else if (grad.shape() != root.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("Backward: grad_output ", grad.ToString(),
                                                     " does not match root ", i, " ",
                                                     root.ToString()));
    } else if (grad.dtype() != root.dtype()) {
      TPX_ASSIGN_OR_RETURN(grad, grad.To(root.dtype()));
    }
    seeds.emplace_back(GraphAccess::GradientEdge(root), std::move(grad));
  }

  // Count, for every reachable Function, the edges that point at it.
  std::unordered_map<Function*, NodeTask> tasks;
  std::vector<Function*> stack;
  for (const auto& [edge, grad] : seeds) {
    if (tasks.try_emplace(edge.function.get()).second) stack.push_back(edge.function.get());
  }
  while (!stack.empty()) {
    Function* fn = stack.back();
    stack.pop_back();
    for (const Function::Edge& e : fn->next_edges()) {
      if (e.function == nullptr) continue;
      auto [it, inserted] = tasks.try_emplace(e.function.get());
      ++it->second.dependencies;
      if (inserted) stack.push_back(e.function.get());
    }
  }

  std::priority_queue<Function*, std::vector<Function*>, LaterFirst> ready;
  for (const auto& [edge, grad] : seeds) {
    NodeTask& task = tasks[edge.function.get()];
    if (task.grads.size() <= static_cast<size_t>(edge.output_nr)) {
      task.grads.resize(edge.function->num_outputs());
    }
    TPX_RETURN_IF_ERROR(AddToSlot(task.grads[edge.output_nr], grad));
  }
  for (const auto& [edge, grad] : seeds) {
    NodeTask& task = tasks[edge.function.get()];
    if (task.dependencies == 0) {
      task.dependencies = -1;  // queued once even if it is several roots' grad_fn
      ready.push(edge.function.get());
    }
  }

  while (!ready.empty()) {
    Function* fn = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(tasks[fn].grads);
    TPX_ASSIGN_OR_RETURN(std::vector<Tensor> input_grads,
                         RunFunction(*fn, std::move(grads), options.retain_graph, captures));
    const auto& edges = fn->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Function::Edge& e = edges[i];
      if (e.function == nullptr) continue;
      NodeTask& next = tasks[e.function.get()];
      if (next.grads.size() < e.function->num_outputs()) {
        next.grads.resize(e.function->num_outputs());
      }
      if (i < input_grads.size()) {
        TPX_RETURN_IF_ERROR(AddToSlot(next.grads[e.output_nr], input_grads[i]));
      }
      if (--next.dependencies == 0) ready.push(e.function.get());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Backward(const Variable& root, const Tensor& grad_output, BackwardOptions options) {
  return RunBackward(absl::Span<const Variable>(&root, 1),
                     absl::Span<const Tensor>(&grad_output, 1), options, nullptr);
}

absl::Status Backward(absl::Span<const Variable> roots, absl::Span<const Tensor> grad_outputs,
                      BackwardOptions options) {
  return RunBackward(roots, grad_outputs, options, nullptr);
}

absl::StatusOr<std::vector<Tensor>> Grad(absl::Span<const Variable> roots,
                                         absl::Span<const Tensor> grad_outputs,
                                         absl::Span<const Variable> inputs,
                                         BackwardOptions options) {
  Captures captures;
  captures.grads.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Grad: input ", i, " ", inputs[i].ToString(), " does not require grad"));
    }
    Function::Edge edge = GraphAccess::GradientEdge(inputs[i]);
    captures.slots[edge.function.get()].emplace_back(edge.output_nr, i);
    captures.functions.push_back(std::move(edge.function));
  }
  TPX_RETURN_IF_ERROR(RunBackward(roots, grad_outputs, options, &captures));
  return std::move(captures.grads);
}

}  // namespace tpx
