#include "checkpoint/checkpoint.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "rng/tracker.h"

namespace tpx::checkpoint {
namespace {

// How the distributed first input travels: the full tensor of the first run,
// and the full gradient computed by the recomputed block.
struct DistributedInput {
  comm::Communicator* tp = nullptr;
  Shape shape;
  Tensor full_for_first_run;  // dropped after the first run of the block
  Tensor full_grad;           // set by GatherPieceFn::Backward
};

// This rank's piece of a flattened tensor (and the piece sizes).
std::vector<int64_t> PieceSizes(int64_t numel, const comm::Communicator& tp) {
  return ops::SplitSizes(numel, tp.size());
}
int64_t PieceStart(const std::vector<int64_t>& sizes, int rank) {
  int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += sizes[r];
  return start;
}

// x -> a copy of this rank's 1-D piece. Backward hands on the full gradient
// left by the recomputed block (the piece's own gradient is a slice of it).
class KeepPieceFn final : public Function {
 public:
  explicit KeepPieceFn(std::shared_ptr<DistributedInput> d) : d_(std::move(d)) {}
  std::string name() const override { return "CheckpointKeepPiece"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(Tensor flat, in[0].Reshape({in[0].numel()}));
    const std::vector<int64_t> sizes = PieceSizes(flat.numel(), *d_->tp);
    TPX_ASSIGN_OR_RETURN(Tensor piece,
                         flat.Narrow(0, PieceStart(sizes, d_->tp->rank()), sizes[d_->tp->rank()]));
    TPX_ASSIGN_OR_RETURN(Tensor copy, piece.Clone());
    return std::vector<Tensor>{copy};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor>) override {
    Tensor g = std::move(d_->full_grad);
    d_->full_grad = Tensor();
    return std::vector<Tensor>{g};
  }

 private:
  std::shared_ptr<DistributedInput> d_;
};

// piece -> the all-gathered full tensor; Backward stores the full gradient
// for KeepPieceFn and returns the piece's slice of it.
class GatherPieceFn final : public Function {
 public:
  explicit GatherPieceFn(std::shared_ptr<DistributedInput> d) : d_(std::move(d)) {}
  std::string name() const override { return "CheckpointGatherPiece"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    const int64_t numel = NumElements(d_->shape);
    const std::vector<int64_t> sizes = PieceSizes(numel, *d_->tp);
    TPX_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({numel}, in[0].dtype(), in[0].device()));
    TPX_ASSIGN_OR_RETURN(Tensor piece, in[0].Contiguous());
    TPX_ASSIGN_OR_RETURN(piece, piece.View({piece.numel()}));
    TPX_RETURN_IF_ERROR(d_->tp->AllGatherV(piece, full, sizes).Wait());
    TPX_ASSIGN_OR_RETURN(full, full.View(d_->shape));
    return std::vector<Tensor>{full};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    d_->full_grad = g[0];
    TPX_ASSIGN_OR_RETURN(Tensor flat, g[0].Reshape({g[0].numel()}));
    const std::vector<int64_t> sizes = PieceSizes(flat.numel(), *d_->tp);
    TPX_ASSIGN_OR_RETURN(Tensor piece,
                         flat.Narrow(0, PieceStart(sizes, d_->tp->rank()), sizes[d_->tp->rank()]));
    return std::vector<Tensor>{piece};
  }

 private:
  std::shared_ptr<DistributedInput> d_;
};

}  // namespace

absl::StatusOr<std::vector<Variable>> Checkpoint(ag::RecomputeFn fn,
                                                 bool distribute_saved_activations,
                                                 absl::Span<const Variable> inputs,
                                                 comm::Communicator* tp) {
  auto forward_states = std::make_shared<rng::AllRngStates>(rng::GetAllRngStates());
  auto outer_states = std::make_shared<rng::AllRngStates>();
  ag::RecomputeOptions options;
  options.before_recompute = [forward_states, outer_states]() {
    *outer_states = rng::GetAllRngStates();
    rng::SetAllRngStates(*forward_states);
    return absl::OkStatus();
  };
  options.after_recompute = [outer_states]() {
    rng::SetAllRngStates(*outer_states);
    return absl::OkStatus();
  };

  const bool distribute = distribute_saved_activations && tp != nullptr && tp->size() > 1;
  if (distribute_saved_activations && tp == nullptr) {
    return absl::InvalidArgumentError(
        "Checkpoint: distribute_saved_activations needs a tensor-parallel communicator");
  }
  if (!distribute) return ag::Recompute(std::move(fn), inputs, std::move(options));

  if (inputs.empty() || !inputs[0].defined()) {
    return absl::InvalidArgumentError(
        "Checkpoint: distribute_saved_activations needs a defined first input");
  }
  auto d = std::make_shared<DistributedInput>();
  d->tp = tp;
  d->shape = inputs[0].shape();
  d->full_for_first_run = inputs[0].value();
  std::vector<Variable> block_inputs(inputs.begin(), inputs.end());
  TPX_ASSIGN_OR_RETURN(block_inputs[0], Apply(std::make_shared<KeepPieceFn>(d), {inputs[0]}));
  // The first run uses the caller's full tensor (no gather); recomputation
  // gathers the pieces back.
  ag::RecomputeFn wrapped = [fn = std::move(fn), d](absl::Span<const Variable> in)
      -> absl::StatusOr<std::vector<Variable>> {
    std::vector<Variable> args(in.begin(), in.end());
    if (d->full_for_first_run.defined()) {
      args[0] = Variable(std::move(d->full_for_first_run));
      d->full_for_first_run = Tensor();
    } else {
      TPX_ASSIGN_OR_RETURN(args[0], Apply(std::make_shared<GatherPieceFn>(d), {in[0]}));
    }
    return fn(args);
  };
  return ag::Recompute(std::move(wrapped), block_inputs, std::move(options));
}

}  // namespace tpx::checkpoint
