// Backward(): runs the autograd graph in reverse and accumulates gradients.
//
//   TPX_ASSIGN_OR_RETURN(Variable loss, ag::Mean(y));
//   TPX_RETURN_IF_ERROR(Backward(loss));                       // d loss / d leaves
//   TPX_RETURN_IF_ERROR(Backward(y, dy, {.retain_graph = true}));  // vector-Jacobian product
//
// Each Function of the graph reachable from the roots runs once, after every
// Function that consumes its outputs has run (dependency counting); gradients
// of a Variable used several times are summed before they reach it. Among
// ready Functions, leaf accumulators go first (so post-accumulate hooks such
// as a data-parallel all-reduce start as early as possible), then the most
// recently created Function.
//
// The engine keeps its state on the stack: a Backward function may call
// Backward() on another graph (activation recomputation does).
// Errors: a root that is undefined or does not require grad; a missing or
// mis-shaped grad_output; the first error of any Backward or hook, prefixed
// with the Function's name. Gradients accumulated before the error stay.
// Thread-safety: run one Backward at a time over graphs that share Variables.
// Not supported: gradients of gradients (create_graph), and detecting
// in-place writes to tensors a Function saved.
#ifndef TPX_CORE_AUTOGRAD_ENGINE_H_
#define TPX_CORE_AUTOGRAD_ENGINE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx {

struct BackwardOptions {
  // Keep saved tensors so the graph can run Backward again. When false, each
  // Function's saved tensors are freed right after its Backward.
  bool retain_graph = false;
};

// grad_output defaults to ones for a root with one element (a loss); it is
// required otherwise and must have the root's shape (its dtype is converted).
absl::Status Backward(const Variable& root, const Tensor& grad_output = Tensor(),
                      BackwardOptions options = {});
// Several roots in one pass; grad_outputs is empty (all roots scalar) or has
// one entry per root (undefined entries default as above).
absl::Status Backward(absl::Span<const Variable> roots, absl::Span<const Tensor> grad_outputs,
                      BackwardOptions options = {});

// The gradients of the roots with respect to `inputs`, returned instead of
// accumulated: no grad() changes and no leaf hooks or post-accumulate hooks
// run (hooks on non-leaf Variables do). One Tensor per input, undefined when
// the input does not influence the roots. Errors: as Backward, and an input
// that does not require grad.
absl::StatusOr<std::vector<Tensor>> Grad(absl::Span<const Variable> roots,
                                         absl::Span<const Tensor> grad_outputs,
                                         absl::Span<const Variable> inputs,
                                         BackwardOptions options = {});

}  // namespace tpx

#endif  // TPX_CORE_AUTOGRAD_ENGINE_H_
