#include "layers/linear_function.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "parallel/shard_comm.h"

namespace tpx::layers {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Collapses [..., k] to [rows, k].
absl::StatusOr<Tensor> As2D(const Tensor& t) {
  TPX_ASSIGN_OR_RETURN(Tensor c, t.Contiguous());
  return c.View({t.numel() / t.size(-1), t.size(-1)});
}

class LinearAsyncFunction final : public Function {
 public:
  LinearAsyncFunction(Variable weight, LinearCommOptions options)
      : weight_(std::move(weight)), options_(std::move(options)) {}
  std::string name() const override { return "LinearWithAsyncCommunication"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    const Tensor& x = in[0];
    const Tensor& w = in[1];
    const Tensor b = in.size() > 2 ? in[2] : Tensor();
    Tensor total = x;
    if (options_.mode == TpMode::kReduceScatter) {
      TPX_ASSIGN_OR_RETURN(sizes_, parallel::ResolveSplitSizes(name().c_str(), *options_.tp,
                                                               x.size(0),
                                                               options_.sequence_split_sizes,
                                                               /*local=*/true));
      TPX_ASSIGN_OR_RETURN(total, parallel::AllGatherAlongDim(*options_.tp, x, 0, sizes_));
    }
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Linear(total, w, b));
    const bool need_w = needs_input_grad(1);
    Tensor saved_input;
    if (need_w) {
      saved_input = (options_.mode == TpMode::kReduceScatter &&
                     options_.regather_input_in_backward)
                        ? x
                        : total;
    }
    total_input_shape_ = total.shape();
    SaveForBackward({saved_input, needs_input_grad(0) ? w : Tensor()});
    return std::vector<Tensor>{y};
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grad) override {
    const bool need_x = needs_input_grad(0);
    const bool need_w = needs_input_grad(1);
    const bool need_b = num_inputs() > 2 && needs_input_grad(2);
    TPX_ASSIGN_OR_RETURN(Tensor dy, As2D(grad[0]));
    LinearBackwardTimeline* tl = options_.timeline;

    // 1. Re-gather the input while the dgrad GEMM runs.
    std::optional<parallel::PendingTensor> gather;
    Tensor total_input = saved(0);
    if (need_w && options_.mode == TpMode::kReduceScatter &&
        options_.regather_input_in_backward) {
      gather = parallel::StartAllGatherAlongDim(*options_.tp, saved(0), 0, sizes_);
    }
    // 2-3. dgrad and its collective.
    std::optional<parallel::PendingTensor> dgrad_comm;
    Tensor dx;
    if (need_x) {
      TPX_ASSIGN_OR_RETURN(dx, ops::Matmul(dy, saved(1)));
      Shape x_total = total_input_shape_;
      TPX_ASSIGN_OR_RETURN(dx, dx.View(x_total));
    }
    if (gather) {
      TPX_ASSIGN_OR_RETURN(total_input, gather->Wait());
    }
    if (need_x && options_.mode != TpMode::kNone) {
      if (tl) tl->dgrad_comm_posted_ns = NowNs();
      if (options_.mode == TpMode::kAllReduce) {
        dgrad_comm = parallel::StartAllReduce(*options_.tp, dx, /*in_place=*/true);
      } else {
        dgrad_comm = parallel::StartReduceScatterAlongDim(*options_.tp, dx, 0, sizes_);
      }
    }
    // 4. wgrad (and bias) while the collective is in flight.
    Tensor dw, db;
    if (need_w) {
      if (tl) tl->wgrad_gemm_start_ns = NowNs();
      TPX_ASSIGN_OR_RETURN(Tensor x2, As2D(total_input));
      if (options_.gradient_accumulation_fusion) {
        TPX_RETURN_IF_ERROR(ops::MatmulInto(weight_.main_grad(), dy, x2, /*trans_a=*/true,
                                            /*trans_b=*/false, 1.0f, /*beta=*/1.0f));
      } else {
        TPX_ASSIGN_OR_RETURN(dw, ops::Matmul(dy, x2, /*trans_a=*/true, /*trans_b=*/false));
      }
      if (tl) tl->wgrad_gemm_end_ns = NowNs();
    }
    if (need_b) {
      TPX_ASSIGN_OR_RETURN(db, ops::Sum(dy, 0));
    }
    // 5. Only now wait for the dgrad collective.
    if (dgrad_comm) {
      if (tl && need_w) tl->dgrad_comm_done_at_wgrad_end = dgrad_comm->IsCompleted();
      TPX_ASSIGN_OR_RETURN(dx, dgrad_comm->Wait());
      if (tl) tl->dgrad_comm_waited_ns = NowNs();
    }
    std::vector<Tensor> out{dx, dw};
    if (num_inputs() > 2) out.push_back(db);
    return out;
  }

 private:
  Variable weight_;
  LinearCommOptions options_;
  std::vector<int64_t> sizes_;
  Shape total_input_shape_;
};

}  // namespace

absl::StatusOr<Variable> LinearWithAsyncCommunication(const Variable& x, const Variable& weight,
                                                      const Variable& bias,
                                                      const LinearCommOptions& options) {
  const char* op = "LinearWithAsyncCommunication";
  if (!x.defined() || !weight.defined() || x.dim() < 1 || weight.dim() != 2 ||
      x.shape().back() != weight.shape()[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input ", x.defined() ? x.value().ToString() : "undefined", " and weight ",
        weight.defined() ? weight.value().ToString() : "undefined",
        " do not match (input [..., in], weight [out, in])"));
  }
  if (options.mode != TpMode::kNone && options.tp == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": a communicator is required"));
  }
  if (options.gradient_accumulation_fusion && weight.requires_grad()) {
    const Tensor& mg = weight.main_grad();
    if (!mg.defined() || mg.dtype() != DType::kF32 || mg.shape() != weight.shape()) {
      return absl::FailedPreconditionError(absl::StrCat(
          op, ": gradient_accumulation_fusion needs weight.main_grad() as f32",
          ShapeString(weight.shape()), ", got ", mg.defined() ? mg.ToString() : "none"));
    }
  }
  auto fn = std::make_shared<LinearAsyncFunction>(weight, options);
  if (bias.defined()) return Apply(fn, {x, weight, bias});
  return Apply(fn, {x, weight});
}

}  // namespace tpx::layers
