// The CPU row kernels of a GPT block outside its GEMMs, at the GPT example's
// shapes: bias + GeLU forward and backward (the backward with its bias
// gradient from the same pass, beside the composed GeluBackward + SumTo),
// layer norm forward and backward, a bias gradient alone (SumTo [h]), the
// residual-stream gradient sum (Add [rows, h]), bias + residual (DropoutAdd
// without dropout), an f32 -> dtype copy of the MLP activations (To), and
// an AdamW update of --params f32 weights (bf16: bf16 gradients and working
// weights, as mixed precision trains), element-wise math and reductions of
// composed models over the MLP activations (exp, log of exp, tanh, gelu,
// softmax, log-softmax, max and argmax over rows of ffn and over the rows,
// Lt then Where, a transposed copy), and
// the causal scaled softmax of unfused attention forward and backward
// (ScaledSoftmax over the [rows / t * heads, t, t] scores: rows of t).
//
//   bazel run -c opt //bench:nn_kernels -- [--rows=2048] [--h=128] [--ffn=512] [--reps=21]
//       [--input_sets=1] [--heads=4] [--t=128]
//
// One JSON line per op, dtype (f32, bf16) and thread count (1, 2):
//   {"bench":"nn_kernels","op":"bias_gelu_backward","dtype":"bf16","threads":2,
//    "rows":2048,"h":512,"us":...,"ns_per_element":...}
// us: median over --reps calls (after one warm-up) of the op, outputs
// allocated per call as in training.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/status_macros.h"

ABSL_FLAG(int64_t, rows, 2048, "rows (tokens per step)");
ABSL_FLAG(int64_t, h, 128, "hidden size (layer norm, bias gradient)");
ABSL_FLAG(int64_t, ffn, 512, "MLP hidden size (bias + GeLU)");
ABSL_FLAG(int64_t, params, 842496, "AdamW parameters (the GPT example's count)");
ABSL_FLAG(int64_t, heads, 4, "attention heads (scaled softmax over [rows / t * heads, t, t])");
ABSL_FLAG(int64_t, t, 128, "sequence length (scaled softmax)");
ABSL_FLAG(int, reps, 21, "timed calls per configuration");
ABSL_FLAG(int, input_sets, 1,
          "copies of the layer-norm and GeLU inputs, used in turn (many: inputs come from "
          "memory as in a training step, not from the cache the previous call left them in)");

namespace tpx {
namespace {

absl::StatusOr<Tensor> Random(const Shape& shape, DType dtype, uint32_t seed) {
  TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape));
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(gen);
  return t.To(dtype);
}

// Median microseconds of fn over reps calls after one warm-up.
absl::StatusOr<double> MedianUs(int reps, const std::function<absl::Status()>& fn) {
  TPX_RETURN_IF_ERROR(fn());
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    TPX_RETURN_IF_ERROR(fn());
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                           start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

absl::Status Run() {
  const int64_t rows = absl::GetFlag(FLAGS_rows), h = absl::GetFlag(FLAGS_h);
  const int64_t ffn = absl::GetFlag(FLAGS_ffn);
  const int64_t params = absl::GetFlag(FLAGS_params);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    struct Inputs {
      Tensor up, up_grad, x, x_grad;
      ops::LayerNormResult ln;
    };
    std::vector<Inputs> sets(std::max(1, absl::GetFlag(FLAGS_input_sets)));
    TPX_ASSIGN_OR_RETURN(Tensor up_bias, Random({ffn}, dtype, 2));
    TPX_ASSIGN_OR_RETURN(Tensor w, Random({h}, DType::kF32, 6));
    TPX_ASSIGN_OR_RETURN(Tensor b, Random({h}, DType::kF32, 7));
    for (size_t i = 0; i < sets.size(); ++i) {
      const uint32_t seed = 100 * static_cast<uint32_t>(i);
      TPX_ASSIGN_OR_RETURN(sets[i].up, Random({rows, ffn}, dtype, seed + 1));
      TPX_ASSIGN_OR_RETURN(sets[i].up_grad, Random({rows, ffn}, dtype, seed + 3));
      TPX_ASSIGN_OR_RETURN(sets[i].x, Random({rows, h}, dtype, seed + 4));
      TPX_ASSIGN_OR_RETURN(sets[i].x_grad, Random({rows, h}, dtype, seed + 5));
      TPX_ASSIGN_OR_RETURN(sets[i].ln, ops::LayerNorm(sets[i].x, w, b, 1e-5));
    }
    size_t turn = 0;
    // The next input set (every op call takes one).
    auto in = [&]() -> const Inputs& { return sets[turn++ % sets.size()]; };
    const Tensor& x = sets[0].x;
    const Tensor& x_grad = sets[0].x_grad;
    TPX_ASSIGN_OR_RETURN(Tensor x_bias, Random({h}, dtype, 8));
    TPX_ASSIGN_OR_RETURN(Tensor up_f32, Random({rows, ffn}, DType::kF32, 9));
    TPX_ASSIGN_OR_RETURN(Tensor param, Random({params}, DType::kF32, 10));
    TPX_ASSIGN_OR_RETURN(Tensor param_grad, Random({params}, dtype, 11));
    TPX_ASSIGN_OR_RETURN(Tensor exp_avg, Tensor::Zeros({params}));
    TPX_ASSIGN_OR_RETURN(Tensor exp_avg_sq, Tensor::Zeros({params}));
    Tensor working;
    if (dtype == DType::kBF16) {
      TPX_ASSIGN_OR_RETURN(working, param.To(DType::kBF16));
    }
    // Small steps so repeated updates stay finite.
    const AdamWCoefficients adamw = {.decay = 1.0f - 1e-6f, .beta1 = 0.9f, .beta2 = 0.999f,
                                     .step_size = 1e-6f, .inv_sqrt_bias2 = 1.0f, .eps = 1e-8f};
    // Attention scores of the composed (unfused) attention, [b * heads, t, t],
    // and a gradient and an output of their causal softmax.
    const int64_t t = absl::GetFlag(FLAGS_t);
    const int64_t score_rows = rows / t * absl::GetFlag(FLAGS_heads) * t;
    const double score_scale =
        1.0 / std::sqrt(static_cast<double>(h / absl::GetFlag(FLAGS_heads)));
    TPX_ASSIGN_OR_RETURN(Tensor scores, Random({score_rows / t, t, t}, dtype, 12));
    TPX_ASSIGN_OR_RETURN(Tensor scores_grad, Random({score_rows / t, t, t}, dtype, 13));
    TPX_ASSIGN_OR_RETURN(Tensor probs, ops::ScaledSoftmax(scores, score_scale, true));
    struct Op {
      const char* name;
      int64_t width;
      std::function<absl::Status()> fn;
      bool one_row = false;  // width is every element (reported as rows 1)
      int64_t rows = 0;      // rows of width (0: --rows)
    };
    std::vector<Op> all = {
        {"bias_gelu", ffn, [&] { return ops::BiasGelu(in().up, up_bias).status(); }},
        {"bias_gelu_backward", ffn,
         [&] {
           const Inputs& i = in();
           return ops::BiasGeluBackward(i.up_grad, i.up, up_bias).status();
         }},
        {"bias_gelu_backward_composed", ffn,
         [&]() -> absl::Status {
           const Inputs& i = in();
           TPX_ASSIGN_OR_RETURN(Tensor z, ops::Add(i.up, up_bias));
           TPX_ASSIGN_OR_RETURN(Tensor dx, ops::GeluBackward(i.up_grad, z));
           return ops::SumTo(dx, {ffn}).status();
         }},
        {"layer_norm", h, [&] { return ops::LayerNorm(in().x, w, b, 1e-5).status(); }},
        {"layer_norm_backward", h,
         [&] {
           const Inputs& i = in();
           return ops::LayerNormBackward(i.x_grad, i.x, i.ln.mean, i.ln.rstd, w, true, true,
                                         true)
               .status();
         }},
        {"bias_grad_sum", h, [&] { return ops::SumTo(x_grad, {h}).status(); }},
        {"grad_add", h, [&] { return ops::Add(x_grad, x).status(); }},
        {"bias_residual_add", h,
         [&] { return ops::DropoutAdd(x_grad, x_bias, Tensor(), x, 1.0).status(); }},
        {"adamw", params, [&] {
           return ops::AdamWStep(param, param_grad, exp_avg, exp_avg_sq, working, adamw);
         }, /*one_row=*/true},
        // Element-wise math and reductions of composed models, over the MLP
        // activations: rows of ffn.
        {"exp", ffn, [&] { return ops::Exp(in().up).status(); }},
        {"log", ffn, [&] { return ops::Log(*ops::Exp(in().up)).status(); }},
        {"tanh", ffn, [&] { return ops::Tanh(in().up).status(); }},
        {"gelu", ffn, [&] { return ops::Gelu(in().up).status(); }},
        {"softmax", ffn, [&] { return ops::Softmax(in().up, 1).status(); }},
        {"log_softmax", ffn, [&] { return ops::LogSoftmax(in().up, 1).status(); }},
        {"max", ffn, [&] { return ops::Max(in().up, 1).status(); }},
        {"argmax", ffn, [&] { return ops::Argmax(in().up, 1).status(); }},
        {"max_over_rows", ffn, [&] { return ops::Max(in().up, 0).status(); }},
        {"argmax_over_rows", ffn, [&] { return ops::Argmax(in().up, 0).status(); }},
        {"where", ffn,
         [&]() -> absl::Status {
           const Inputs& i = in();
           TPX_ASSIGN_OR_RETURN(Tensor mask, ops::Lt(i.up, i.up_grad));
           return ops::Where(mask, i.up, i.up_grad).status();
         }},
        {"transpose_copy", ffn,
         [&]() -> absl::Status {
           TPX_ASSIGN_OR_RETURN(Tensor tr, in().up.Transpose(0, 1));
           return tr.Contiguous().status();
         }},
        {"causal_softmax", t,
         [&] { return ops::ScaledSoftmax(scores, score_scale, true).status(); }, false,
         score_rows},
        {"softmax_backward", t,
         [&] { return ops::ScaledSoftmaxBackward(scores_grad, probs, score_scale).status(); },
         false, score_rows},
    };
    if (dtype != DType::kF32) {  // f32 -> f32 would copy nothing
      all.push_back({"to_dtype_from_f32", ffn, [&] { return up_f32.To(dtype).status(); }});
    }
    for (int threads : {1, 2}) {
      SetGemmThreads(threads);
      for (const Op& op : all) {
        TPX_ASSIGN_OR_RETURN(double us, MedianUs(reps, op.fn));
        const int64_t op_rows = op.one_row ? 1 : op.rows > 0 ? op.rows : rows;
        std::printf(
            "{\"bench\":\"nn_kernels\",\"op\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,"
            "\"rows\":%lld,\"h\":%lld,\"us\":%.1f,\"ns_per_element\":%.3f}\n",
            op.name, std::string(DTypeName(dtype)).c_str(), threads,
            static_cast<long long>(op_rows), static_cast<long long>(op.width), us,
            us * 1e3 / static_cast<double>(op_rows * op.width));
        std::fflush(stdout);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = tpx::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "nn_kernels: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
