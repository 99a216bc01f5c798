#include "core/autograd/variable.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/function.h"
#include "core/autograd/internal.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx {

using autograd_internal::GraphAccess;
using autograd_internal::VariableImpl;

namespace autograd_internal {

HookId NextHookId() {
  static std::atomic<HookId> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::Status AccumulateInto(Tensor& slot, const Tensor& grad, DType dtype) {
  if (!slot.defined()) {
    TPX_ASSIGN_OR_RETURN(Tensor fresh, Tensor::Empty(grad.shape(), dtype, grad.device()));
    TPX_RETURN_IF_ERROR(fresh.CopyFrom(grad));
    slot = std::move(fresh);
    return absl::OkStatus();
  }
  return ops::AddInPlace(slot, grad);
}

absl::StatusOr<Tensor> RunGradHooks(const std::vector<GradHook>& hooks, Tensor grad,
                                    const std::string& who) {
  for (const GradHook& hook : hooks) {
    if (!grad.defined()) break;
    Shape shape = grad.shape();
    absl::StatusOr<Tensor> replaced = hook(grad);
    if (!replaced.ok()) {
      return absl::Status(replaced.status().code(), absl::StrCat("gradient hook of ", who, ": ",
                                                                 replaced.status().message()));
    }
    if (replaced->defined() && replaced->shape() != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient hook of ", who, " returned ", replaced->ToString(),
                       " for a gradient of shape ", ShapeString(shape)));
    }
    grad = *std::move(replaced);
  }
  return grad;
}

VariableImpl* GraphAccess::Impl(const Variable& v) { return v.impl_.get(); }
std::shared_ptr<VariableImpl> GraphAccess::SharedImpl(const Variable& v) { return v.impl_; }

}  // namespace autograd_internal

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : impl_(std::make_shared<VariableImpl>()) {
  TPX_CHECK(!requires_grad || (value.defined() && IsFloatingPoint(value.dtype())))
      << "Variable " << name << ": requires_grad needs a defined floating tensor, got "
      << (value.defined() ? value.ToString() : "an undefined tensor");
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

const Tensor& Variable::value() const {
  TPX_CHECK(impl_ != nullptr) << "value() of an undefined Variable";
  return impl_->value;
}

bool Variable::requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }

absl::Status Variable::set_requires_grad(bool requires_grad) {
  if (impl_ == nullptr) return absl::InvalidArgumentError("set_requires_grad: undefined Variable");
  if (!is_leaf()) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_requires_grad: ", ToString(),
                     " is not a leaf; use Detach() to cut it from the graph"));
  }
  if (requires_grad && !IsFloatingPoint(impl_->value.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_requires_grad: ", ToString(), " has a non-floating dtype"));
  }
  impl_->requires_grad = requires_grad;
  return absl::OkStatus();
}

bool Variable::is_leaf() const { return impl_ == nullptr || impl_->grad_fn == nullptr; }

const std::shared_ptr<Function>& Variable::grad_fn() const {
  static const std::shared_ptr<Function> kNone;
  return impl_ ? impl_->grad_fn : kNone;
}

int Variable::output_nr() const { return impl_ ? impl_->output_nr : 0; }

const std::string& Variable::name() const {
  TPX_CHECK(impl_ != nullptr) << "name() of an undefined Variable";
  return impl_->name;
}

void Variable::set_name(std::string name) {
  TPX_CHECK(impl_ != nullptr) << "set_name() on an undefined Variable";
  impl_->name = std::move(name);
}

const Tensor& Variable::grad() const {
  TPX_CHECK(impl_ != nullptr) << "grad() of an undefined Variable";
  return impl_->grad;
}

absl::Status Variable::set_grad(Tensor grad) {
  if (impl_ == nullptr) return absl::InvalidArgumentError("set_grad: undefined Variable");
  if (grad.defined() && grad.shape() != impl_->value.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_grad: gradient ", grad.ToString(), " does not match ", ToString()));
  }
  impl_->grad = std::move(grad);
  return absl::OkStatus();
}

void Variable::ClearGrad() {
  if (impl_ != nullptr) impl_->grad = Tensor();
}

absl::Status Variable::ZeroGrad() {
  if (impl_ == nullptr || !impl_->grad.defined()) return absl::OkStatus();
  return ops::Fill(impl_->grad, 0.0);
}

const Tensor& Variable::main_grad() const {
  TPX_CHECK(impl_ != nullptr) << "main_grad() of an undefined Variable";
  return impl_->main_grad;
}

void Variable::set_main_grad(Tensor main_grad) {
  TPX_CHECK(impl_ != nullptr) << "set_main_grad() on an undefined Variable";
  impl_->main_grad = std::move(main_grad);
}

Variable Variable::Detach() const {
  if (impl_ == nullptr) return Variable();
  return Variable(impl_->value, /*requires_grad=*/false, impl_->name);
}

absl::Status Variable::RetainGrad() {
  if (!requires_grad()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RetainGrad: ", defined() ? ToString() : "undefined Variable", " does not require grad"));
  }
  if (is_leaf() || impl_->retains_grad) return absl::OkStatus();
  impl_->retains_grad = true;
  auto& retained = GraphAccess::RetainedOutputs(*impl_->grad_fn);
  if (retained.size() <= static_cast<size_t>(impl_->output_nr)) {
    retained.resize(impl_->output_nr + 1);
  }
  retained[impl_->output_nr] = impl_;
  return absl::OkStatus();
}

bool Variable::retains_grad() const { return impl_ != nullptr && impl_->retains_grad; }

absl::StatusOr<HookId> Variable::RegisterHook(GradHook hook) {
  if (!requires_grad()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterHook: ", defined() ? ToString() : "undefined Variable", " does not require grad"));
  }
  HookId id = autograd_internal::NextHookId();
  if (is_leaf()) {
    impl_->hooks.push_back({id, std::move(hook)});
  } else {
    GraphAccess::OutputHooks(*impl_->grad_fn).push_back({id, impl_->output_nr, std::move(hook)});
  }
  return id;
}

absl::StatusOr<HookId> Variable::RegisterPostAccumulateHook(PostAccumulateHook hook) {
  if (!requires_grad() || !is_leaf()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterPostAccumulateHook: ", defined() ? ToString() : "undefined Variable",
                     " is not a leaf that requires grad"));
  }
  HookId id = autograd_internal::NextHookId();
  impl_->post_hooks.push_back({id, std::move(hook)});
  return id;
}

bool Variable::RemoveHook(HookId id) {
  if (impl_ == nullptr) return false;
  auto erase_id = [id](auto& list) {
    auto it = std::find_if(list.begin(), list.end(), [id](const auto& h) { return h.id == id; });
    if (it == list.end()) return false;
    list.erase(it);
    return true;
  };
  if (erase_id(impl_->hooks) || erase_id(impl_->post_hooks)) return true;
  if (impl_->grad_fn != nullptr) return erase_id(GraphAccess::OutputHooks(*impl_->grad_fn));
  return false;
}

std::string Variable::ToString() const {
  if (impl_ == nullptr) return "Variable(undefined)";
  std::string s = "Variable(";
  if (!impl_->name.empty()) absl::StrAppend(&s, impl_->name, ", ");
  absl::StrAppend(&s, impl_->value.ToString());
  if (impl_->requires_grad) absl::StrAppend(&s, ", requires_grad");
  if (impl_->grad_fn != nullptr) absl::StrAppend(&s, ", grad_fn=", impl_->grad_fn->name());
  absl::StrAppend(&s, ")");
  return s;
}

}  // namespace tpx
