#include "rng/dropout.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "rng/philox.h"
#include "rng/tracker.h"

namespace tpx::rng {
namespace {

// Devices without the fused kernel: the same arithmetic (x * scale in f32,
// one rounding) through core ops; keep is on x's device.
absl::StatusOr<Tensor> ApplyMaskWithOps(const Tensor& x, const Tensor& keep, float scale) {
  TPX_ASSIGN_OR_RETURN(Tensor drop, ops::LogicalNot(keep));
  TPX_ASSIGN_OR_RETURN(Tensor scaled, ops::Scale(x, scale));
  return ops::MaskedFill(scaled, drop, 0.0);
}

// x * keep * scale with the host-drawn mask copied to x's device: the
// device's fused kernel (ops::DropoutAdd), else core ops.
absl::StatusOr<Tensor> ApplyMask(const Tensor& x, const Tensor& keep, float scale) {
  TPX_ASSIGN_OR_RETURN(Tensor keep_here, keep.To(x.device()));
  absl::StatusOr<Tensor> fused = ops::DropoutAdd(x, Tensor(), keep_here, Tensor(), scale);
  if (!absl::IsUnimplemented(fused.status())) return fused;
  return ApplyMaskWithOps(x, keep_here, scale);
}

class DropoutFn final : public Function {
 public:
  DropoutFn(double p, const ShardSpec* shard) : p_(p), shard_(shard) {}
  std::string name() const override { return "Dropout"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(keep_, DropoutMask(in[0].shape(), p_, ActiveGenerator(), shard_));
    TPX_ASSIGN_OR_RETURN(Tensor y, ApplyMask(in[0], keep_, Scale()));
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(Tensor dx, ApplyMask(g[0], keep_, Scale()));
    return std::vector<Tensor>{dx};
  }

 protected:
  void ReleaseSavedState() override { keep_ = Tensor(); }

 private:
  float Scale() const { return static_cast<float>(1.0 / (1.0 - p_)); }
  double p_;
  const ShardSpec* shard_;  // only used during Forward
  Tensor keep_;
};

// y = residual + Dropout(x + bias) (Megatron's bias-dropout-add). Inputs:
// x, residual[, bias].
class BiasDropoutAddFn final : public Function {
 public:
  BiasDropoutAddFn(double p, bool training, const ShardSpec* shard)
      : p_(p), training_(training), shard_(shard) {}
  std::string name() const override { return "BiasDropoutAdd"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    const Tensor& x = in[0];
    const Tensor& residual = in[1];
    const Tensor bias = in.size() > 2 ? in[2] : Tensor();
    bias_shape_ = bias.defined() ? bias.shape() : Shape();
    if (Dropping()) {
      TPX_ASSIGN_OR_RETURN(Tensor keep, DropoutMask(x.shape(), p_, ActiveGenerator(), shard_));
      TPX_ASSIGN_OR_RETURN(keep_, keep.To(x.device()));
    }
    absl::StatusOr<Tensor> y = ops::DropoutAdd(x, bias, keep_, residual, Scale());
    if (!absl::IsUnimplemented(y.status())) {
      TPX_RETURN_IF_ERROR(y.status());
      return std::vector<Tensor>{*std::move(y)};
    }
    Tensor h = x;
    if (bias.defined()) {
      TPX_ASSIGN_OR_RETURN(h, ops::Add(x, bias));
    }
    if (Dropping()) {
      TPX_ASSIGN_OR_RETURN(h, ApplyMaskWithOps(h, keep_, Scale()));
    }
    TPX_ASSIGN_OR_RETURN(Tensor out, ops::Add(h, residual));
    return std::vector<Tensor>{out};
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    Tensor dx = g[0];
    if (Dropping()) {
      TPX_ASSIGN_OR_RETURN(dx, ApplyMask(g[0], keep_, Scale()));
    }
    std::vector<Tensor> out{dx, g[0]};
    if (num_inputs() > 2) {
      TPX_ASSIGN_OR_RETURN(Tensor db, ops::SumTo(dx, bias_shape_));
      out.push_back(db);
    }
    return out;
  }

 protected:
  void ReleaseSavedState() override { keep_ = Tensor(); }

 private:
  bool Dropping() const { return training_ && p_ > 0.0; }
  float Scale() const { return Dropping() ? static_cast<float>(1.0 / (1.0 - p_)) : 1.0f; }
  double p_;
  bool training_;
  const ShardSpec* shard_;  // only used during Forward
  Shape bias_shape_;
  Tensor keep_;  // on x's device; undefined when nothing is dropped
};

}  // namespace

absl::StatusOr<Tensor> DropoutMask(const Shape& shape, double p, Generator& gen,
                                   const ShardSpec* shard) {
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout: p must be in [0, 1), got ", p));
  }
  TPX_ASSIGN_OR_RETURN(Tensor keep, Tensor::Empty(shape, DType::kBool));
  bool* k = keep.data<bool>();
  const uint64_t seed = gen.seed();
  const uint64_t stream = gen.NextStream();
  // Comparing the exact 24-bit uniform with p in f32 is the same on every device.
  const float pf = static_cast<float>(p);
  TPX_RETURN_IF_ERROR(ForEachGlobalRun(
      shape, shard, "Dropout", [&](int64_t local, int64_t global, int64_t n) {
        ForEachElementBlock(seed, stream, static_cast<uint64_t>(global), n,
                            [&](uint64_t i, const Philox4x32& b, int lane) {
                              k[local + static_cast<int64_t>(i) - global] =
                                  WordToUniform(b.v[lane]) >= pf;
                            });
      }));
  return keep;
}

absl::StatusOr<Variable> Dropout(const Variable& x, double p, bool training,
                                 const ShardSpec* shard) {
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout: p must be in [0, 1), got ", p));
  }
  if (!training || p == 0.0) return x;
  if (!IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Dropout: needs a floating tensor, got ", x.value().ToString()));
  }
  return Apply(std::make_shared<DropoutFn>(p, shard), {x});
}

absl::StatusOr<Variable> BiasDropoutAdd(const Variable& x, const Variable& bias,
                                        const Variable& residual, double p, bool training,
                                        const ShardSpec* shard) {
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BiasDropoutAdd: p must be in [0, 1), got ", p));
  }
  if (!x.defined() || !residual.defined() || !IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(
        "BiasDropoutAdd: x and residual must be defined floating Variables");
  }
  auto fn = std::make_shared<BiasDropoutAddFn>(p, training, shard);
  if (bias.defined()) return Apply(fn, {x, residual, bias});
  return Apply(fn, {x, residual});
}

}  // namespace tpx::rng
