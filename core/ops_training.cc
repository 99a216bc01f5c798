// The fused training ops (core/ops.h, "Fused training kernels"): argument
// checks and output allocation; the loops are the device's
// DeviceKernels::CrossEntropyStats / CrossEntropyBackward / SumOfSquares /
// AdamWStep / DropoutAdd.
#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckFloating;
using internal::CheckInput;
using internal::CheckSameDType;

// logits as [rows, v], and target as i64 [rows].
absl::Status CheckCrossEntropyArgs(const Tensor& logits, const Tensor& target, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(logits, op, "logits"));
  TPX_RETURN_IF_ERROR(CheckFloating(logits, op, "logits"));
  TPX_RETURN_IF_ERROR(CheckInput(target, op, "target"));
  if (logits.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": logits must be [rows, v], got ", logits.ToString()));
  }
  if (target.dtype() != DType::kI64 || target.shape() != Shape{logits.size(0)}) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": target must be i64 [",
                                                   logits.size(0), "], got ",
                                                   target.ToString()));
  }
  return absl::OkStatus();
}

// t is an f32 tensor of n elements (what == its name in the error).
absl::Status CheckF32Rows(const Tensor& t, int64_t n, const char* op, const char* what) {
  TPX_RETURN_IF_ERROR(CheckInput(t, op, what));
  if (t.dtype() != DType::kF32 || t.numel() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " must be f32 with ", n, " elements, got ", t.ToString()));
  }
  return absl::OkStatus();
}

// An in-place operand must already be contiguous: a copy would not be written back.
absl::Status CheckContiguousF32(const Tensor& t, const Shape& shape, const char* op,
                                const char* what) {
  TPX_RETURN_IF_ERROR(CheckInput(t, op, what));
  if (t.dtype() != DType::kF32 || t.shape() != shape || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be contiguous f32 ",
                                                   ShapeString(shape), ", got ",
                                                   t.ToString()));
  }
  return absl::OkStatus();
}

// One AdamWStep entry checked, with its gradient made contiguous.
absl::StatusOr<AdamWOperands> CheckAdamWOperands(const AdamWOperands& u, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(u.param, op, "param"));
  const Shape& shape = u.param.shape();
  TPX_RETURN_IF_ERROR(CheckContiguousF32(u.param, shape, op, "param"));
  TPX_RETURN_IF_ERROR(CheckContiguousF32(u.exp_avg, shape, op, "exp_avg"));
  TPX_RETURN_IF_ERROR(CheckContiguousF32(u.exp_avg_sq, shape, op, "exp_avg_sq"));
  TPX_RETURN_IF_ERROR(CheckInput(u.grad, op, "grad"));
  if ((u.grad.dtype() != DType::kF32 && u.grad.dtype() != DType::kBF16) ||
      u.grad.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": grad must be f32 or bf16 ",
                                                   ShapeString(shape), ", got ",
                                                   u.grad.ToString()));
  }
  if (u.working.defined() && (u.working.dtype() != DType::kBF16 || u.working.shape() != shape ||
                              !u.working.is_contiguous())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": working must be contiguous bf16 ",
                                                   ShapeString(shape), ", got ",
                                                   u.working.ToString()));
  }
  AdamWOperands out = u;
  TPX_ASSIGN_OR_RETURN(out.grad, u.grad.Contiguous());
  return out;
}

}  // namespace

absl::StatusOr<Tensor> CrossEntropyStats(const Tensor& logits, const Tensor& target) {
  constexpr const char* kOp = "CrossEntropyStats";
  TPX_RETURN_IF_ERROR(CheckCrossEntropyArgs(logits, target, kOp));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&logits, &target}));
  const int64_t rows = logits.size(0), v = logits.size(1);
  TPX_ASSIGN_OR_RETURN(Tensor xc, logits.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor tc, target.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor stats, Tensor::Empty({rows, 4}, DType::kF32, logits.device()));
  if (rows > 0) TPX_RETURN_IF_ERROR(k->CrossEntropyStats(stats, xc, tc, rows, v));
  return stats;
}

absl::StatusOr<Tensor> CrossEntropyBackward(const Tensor& logits, const Tensor& lse,
                                            const Tensor& grad, const Tensor& target,
                                            double smooth_over_k, double target_coeff,
                                            bool in_place) {
  constexpr const char* kOp = "CrossEntropyBackward";
  TPX_RETURN_IF_ERROR(CheckCrossEntropyArgs(logits, target, kOp));
  const int64_t rows = logits.size(0), v = logits.size(1);
  TPX_RETURN_IF_ERROR(CheckF32Rows(lse, rows, kOp, "lse"));
  TPX_RETURN_IF_ERROR(CheckF32Rows(grad, rows, kOp, "grad"));
  if (in_place && !logits.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": in_place needs contiguous logits, got strides ", ShapeString(logits.strides())));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k,
                       internal::KernelsOf(kOp, {&logits, &lse, &grad, &target}));
  TPX_ASSIGN_OR_RETURN(Tensor xc, logits.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor lc, lse.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor gc, grad.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor tc, target.Contiguous());
  Tensor dx = xc;
  if (!in_place) {
    TPX_ASSIGN_OR_RETURN(dx, Tensor::Empty(logits.shape(), logits.dtype(), logits.device()));
  }
  if (rows > 0) {
    TPX_RETURN_IF_ERROR(k->CrossEntropyBackward(dx, xc, lc, gc, tc, rows, v,
                                                static_cast<float>(smooth_over_k),
                                                static_cast<float>(target_coeff)));
  }
  return dx;
}

absl::StatusOr<double> SumOfSquares(const Tensor& t) {
  TPX_ASSIGN_OR_RETURN(std::vector<double> sums,
                       SumsOfSquares(absl::Span<const Tensor>(&t, 1)));
  return sums[0];
}

absl::StatusOr<std::vector<double>> SumsOfSquares(absl::Span<const Tensor> ts) {
  constexpr const char* kOp = "SumOfSquares";
  std::vector<double> sums(ts.size(), 0.0);
  if (ts.empty()) return sums;
  std::vector<Tensor> contiguous;
  std::vector<const Tensor*> all;
  for (const Tensor& t : ts) {
    TPX_RETURN_IF_ERROR(CheckInput(t, kOp));
    TPX_RETURN_IF_ERROR(CheckFloating(t, kOp));
    TPX_ASSIGN_OR_RETURN(Tensor tc, t.Contiguous());
    contiguous.push_back(std::move(tc));
    all.push_back(&t);
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, all));
  TPX_RETURN_IF_ERROR(k->SumsOfSquares(contiguous, sums.data()));
  return sums;
}

absl::Status AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                       const Tensor& exp_avg_sq, const Tensor& working,
                       const AdamWCoefficients& coefficients) {
  const AdamWOperands update{param, grad, exp_avg, exp_avg_sq, working, coefficients};
  return AdamWSteps(absl::Span<const AdamWOperands>(&update, 1));
}

absl::Status AdamWSteps(absl::Span<const AdamWOperands> updates) {
  constexpr const char* kOp = "AdamWStep";
  std::vector<AdamWOperands> checked;
  std::vector<const Tensor*> all;
  for (size_t i = 0; i < updates.size(); ++i) {
    const AdamWOperands& u = updates[i];
    absl::StatusOr<AdamWOperands> ok = CheckAdamWOperands(u, kOp);
    if (!ok.ok()) {
      if (updates.size() == 1) return ok.status();
      return absl::Status(ok.status().code(),
                          absl::StrCat("entry ", i, " of ", updates.size(), ": ",
                                       ok.status().message()));
    }
    for (const Tensor* t : {&u.param, &u.grad, &u.exp_avg, &u.exp_avg_sq, &u.working}) {
      all.push_back(t);
    }
    if (u.param.numel() > 0) checked.push_back(*std::move(ok));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, all));
  if (checked.empty()) return absl::OkStatus();
  return k->AdamWSteps(checked);
}

absl::StatusOr<Tensor> DropoutAdd(const Tensor& x, const Tensor& bias, const Tensor& keep,
                                  const Tensor& residual, double scale) {
  constexpr const char* kOp = "DropoutAdd";
  TPX_RETURN_IF_ERROR(CheckInput(x, kOp));
  TPX_RETURN_IF_ERROR(CheckFloating(x, kOp));
  if (bias.defined()) {
    TPX_RETURN_IF_ERROR(CheckSameDType(x, bias, kOp));
    TPX_RETURN_IF_ERROR(internal::CheckFeatureShape(x, bias, kOp, "bias"));
  }
  if (residual.defined()) {
    TPX_RETURN_IF_ERROR(CheckSameDType(x, residual, kOp));
    if (residual.shape() != x.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": residual ", residual.ToString(),
                                                     " does not match ", x.ToString()));
    }
  }
  if (keep.defined() && (keep.dtype() != DType::kBool || keep.shape() != x.shape())) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": keep must be bool ",
                                                   ShapeString(x.shape()), ", got ",
                                                   keep.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k,
                       internal::KernelsOf(kOp, {&x, &bias, &keep, &residual}));
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  // Undefined operands stay undefined.
  auto contiguous = [](const Tensor& t) -> absl::StatusOr<Tensor> {
    return t.defined() ? t.Contiguous() : absl::StatusOr<Tensor>(Tensor());
  };
  TPX_ASSIGN_OR_RETURN(Tensor bc, contiguous(bias));
  TPX_ASSIGN_OR_RETURN(Tensor kc, contiguous(keep));
  TPX_ASSIGN_OR_RETURN(Tensor rc, contiguous(residual));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  if (x.numel() > 0) {
    TPX_RETURN_IF_ERROR(k->DropoutAdd(out, xc, bc, kc, rc, x.numel(),
                                      bias.defined() ? bias.numel() : 0,
                                      static_cast<float>(scale)));
  }
  return out;
}

}  // namespace tpx::ops
