// Trains a small GPT on a public-domain text with tensor parallelism.
//
//   bazel run -c opt //examples/gpt:train -- --nproc=2 --tp=2
//
// Starts its own ranks (--nproc, forked on this machine) unless a launcher
// (tools/tpxrun, torchrun, mpirun) already did. Prints a progress line per
// --log_interval steps, the validation loss every --eval_interval steps, a
// sampled text at the end (--temperature, --top_k, --top_p), and writes the
// loss curve as CSV (and as a PNG when gnuplot is installed). --save_dir /
// --save_every save sharded checkpoints, --resume continues from the latest,
// --load starts from one saved at any TP size.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/init.h"
#include "core/status_macros.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/flag_checks.h"
#include "examples/gpt/model_flags.h"
#include "examples/gpt/program.h"
#include "examples/gpt/sampling_flags.h"
#include "examples/gpt/trainer.h"

ABSL_FLAG(int, nproc, 2, "Ranks to start on this machine (ignored under a launcher).");
ABSL_FLAG(int, tp, 2, "Tensor-parallel size (divides the world size; the rest is data-parallel).");
ABSL_FLAG(std::string, backend, "", "Communication backend plugin (default: --tpx_comm_backend).");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda: every rank trains on the GPU of its communicator (needs a device "
          "backend, --backend=nccl, and one GPU per local rank).");
ABSL_FLAG(int64_t, steps, 500, "Optimizer steps.");
ABSL_FLAG(double, lr, 6e-3, "Peak learning rate.");
ABSL_FLAG(double, min_lr, 3e-4, "Final learning rate of the cosine decay.");
ABSL_FLAG(int64_t, warmup, 50, "Linear warm-up steps.");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay (matrices only).");
ABSL_FLAG(double, clip, 1.0, "Clip gradients to this global norm.");
ABSL_FLAG(std::string, grad_reduce_dtype, "f32",
          "With --dtype=bf16: reduce gradients across ranks in f32 or bf16.");
ABSL_FLAG(int64_t, log_interval, 10, "Steps between progress lines.");
ABSL_FLAG(int64_t, eval_interval, 100, "Steps between validation losses.");
ABSL_FLAG(int64_t, eval_batches, 4, "Validation batches per evaluation.");
ABSL_FLAG(int64_t, sample_tokens, 300, "Length of the text sampled after training.");
ABSL_FLAG(std::string, prompt, "And the LORD said unto Moses,", "Prompt of the sample.");
ABSL_FLAG(std::string, data, "", "Training text (default: the bundled KJV Genesis + Exodus).");
ABSL_FLAG(std::string, save_dir, "",
          "Save sharded checkpoints (safetensors) under this directory: every --save_every "
          "steps and after the last step.");
ABSL_FLAG(int64_t, save_every, 0, "Steps between checkpoints (0: only after the last step).");
ABSL_FLAG(bool, async_save, false,
          "Write checkpoints on a background thread while training goes on.");
ABSL_FLAG(bool, resume, false,
          "Continue from the latest checkpoint in --save_dir (at any --tp), if there is one.");
ABSL_FLAG(std::string, load, "",
          "Start from the weights of this checkpoint (a --save_dir or one of its step "
          "directories, saved at any TP size); with --steps=0 only evaluates and samples.");
ABSL_FLAG(std::string, csv, "gpt_loss.csv",
          "Loss curve CSV (relative paths are taken from where `bazel run` was started).");

namespace tpx::gpt {
namespace {

constexpr char kBundledText[] = "examples/gpt/data/kjv_genesis_exodus.txt";

std::string FindData() {
  std::string flag = absl::GetFlag(FLAGS_data);
  if (!flag.empty()) return flag;
  std::vector<std::string> candidates = {kBundledText};
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(env)) candidates.push_back(absl::StrCat(dir, "/tpx/", kBundledText));
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) candidates.push_back(absl::StrCat(std::string(exe, n), ".runfiles/tpx/", kBundledText));
  for (const std::string& c : candidates) {
    if (std::ifstream(c).good()) return c;
  }
  return kBundledText;
}

std::string Clock(double s) {
  const int64_t t = static_cast<int64_t>(std::llround(s));
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

void WriteCurve(const TrainResult& r, const std::string& csv) {
  std::ofstream out(csv);
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", csv.c_str());
    return;
  }
  out << "step,loss,val_loss\n";
  size_t next = 0;
  for (size_t i = 0; i < r.losses.size(); ++i) {
    const int64_t step = r.first_step + static_cast<int64_t>(i) + 1;
    while (next < r.log.size() && r.log[next].step < step) ++next;
    const bool has_val = next < r.log.size() && r.log[next].step == step && r.log[next].val_loss >= 0;
    out << step << "," << absl::StrFormat("%.5f", r.losses[i]) << ",";
    if (has_val) out << absl::StrFormat("%.5f", r.log[next].val_loss);
    out << "\n";
  }
  out.close();
  std::printf("loss curve: %s\n", csv.c_str());
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const std::string png = csv.substr(0, csv.rfind('.')) + ".png";
    const std::string cmd = absl::StrCat(
        "gnuplot -e \"set terminal png noenhanced size 800,500; set output '", png,
        "'; set datafile separator ','; set key autotitle columnhead; set xlabel 'step';"
        " set ylabel 'loss (nats/byte)'; plot '", csv, "' using 1:2 with lines, '", csv,
        "' using 1:3 with linespoints\"");
    if (std::system(cmd.c_str()) == 0) std::printf("loss plot: %s\n", png.c_str());
  }
}

absl::Status RankMain() {
  comm::InitOptions init;
  init.backend = absl::GetFlag(FLAGS_backend);
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::Init(init));
  const bool leader = world->rank() == 0;
  const std::string path = FindData();
  TPX_ASSIGN_OR_RETURN(ByteDataset data, ByteDataset::Load(path, /*val_fraction=*/0.1));

  TrainOptions o;
  TPX_ASSIGN_OR_RETURN(o.model, GptConfigFromFlags());
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
    if (!world->device_memory() || world->device() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device=cuda needs a backend that works on GPU memory (--backend=nccl); ",
          world->backend(), " is a host-memory backend"));
    }
    o.model.device = Device::CUDA(world->device());
  } else if (device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
  }
  o.tp = absl::GetFlag(FLAGS_tp);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.warmup_steps = std::min(absl::GetFlag(FLAGS_warmup), o.steps);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.clip_norm = absl::GetFlag(FLAGS_clip);
  TPX_ASSIGN_OR_RETURN(o.grad_reduce_dtype,
                       F32OrBf16("grad_reduce_dtype", absl::GetFlag(FLAGS_grad_reduce_dtype)));
  o.log_interval = absl::GetFlag(FLAGS_log_interval);
  o.eval_interval = absl::GetFlag(FLAGS_eval_interval);
  o.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  o.sample_tokens = absl::GetFlag(FLAGS_sample_tokens);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  TPX_ASSIGN_OR_RETURN(o.sampling, SamplingOptionsFromFlags());
  o.save_dir = UserPath(absl::GetFlag(FLAGS_save_dir));
  o.save_every = absl::GetFlag(FLAGS_save_every);
  o.async_save = absl::GetFlag(FLAGS_async_save);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.load = UserPath(absl::GetFlag(FLAGS_load));
  if (o.save_every < 0 || (o.resume && o.save_dir.empty())) {
    return absl::InvalidArgumentError(
        "--save_every must be >= 0, and --resume needs --save_dir");
  }

  if (leader) {
    std::printf("data: %s (%zu train / %zu validation bytes); unigram entropy %.3f nats/byte\n",
                path.c_str(), data.train().size(), data.validation().size(),
                data.UnigramEntropyNats());
    std::printf("world %d = tp %d x dp %d, backend %s, device %s; model: %lld layers, d_model %lld, %lld "
                "heads, d_ff %lld, seq_len %lld, dropout %.2f%s%s\n",
                world->size(), o.tp, world->size() / std::max(o.tp, 1), world->backend().c_str(),
                o.model.device.ToString().c_str(),
                static_cast<long long>(o.model.n_layers), static_cast<long long>(o.model.d_model),
                static_cast<long long>(o.model.n_heads), static_cast<long long>(o.model.d_ff),
                static_cast<long long>(o.model.seq_len), o.model.dropout,
                o.model.sequence_parallel ? ", sequence parallel" : "",
                o.model.activation_checkpointing ? ", activation checkpointing" : "");
    std::fflush(stdout);
  }
  auto print = [&](const StepRecord& r) {
    if (!leader) return;
    std::string val = r.val_loss >= 0 ? absl::StrFormat(" | val %.4f", r.val_loss) : "";
    std::printf("step %5lld/%lld | loss %.4f%s | lr %.2e | grad norm %.3f | %.0f tok/s | "
                "elapsed %s | ETA %s\n",
                static_cast<long long>(r.step), static_cast<long long>(o.steps), r.loss,
                val.c_str(), r.lr, r.grad_norm, r.tokens_per_s, Clock(r.elapsed_s).c_str(),
                Clock(r.eta_s).c_str());
    std::fflush(stdout);
  };
  TPX_ASSIGN_OR_RETURN(TrainResult result, Train(*world, data, o, print));
  if (leader) {
    std::printf("done: %lld parameters, %.0f tokens/s, final validation loss %.4f nats/byte "
                "(unigram entropy %.4f)\n",
                static_cast<long long>(result.num_parameters), result.tokens_per_s,
                result.final_val_loss, data.UnigramEntropyNats());
    if (result.first_step > 0) {
      std::printf("resumed from the checkpoint of step %lld\n",
                  static_cast<long long>(result.first_step));
    }
    if (!result.checkpoint.empty()) std::printf("checkpoint: %s\n", result.checkpoint.c_str());
    if (!result.sample.empty()) {
      std::printf("--- sample ---\n%s\n--------------\n", result.sample.c_str());
    }
    WriteCurve(result, UserPath(absl::GetFlag(FLAGS_csv)));
  }
  return absl::OkStatus();
}

// Every flag's range, checked once before any rank starts.
absl::Status CheckTrainFlags() {
  TPX_RETURN_IF_ERROR(CheckModelFlags());
  TPX_RETURN_IF_ERROR(CheckAtLeast("nproc", absl::GetFlag(FLAGS_nproc), 1));
  if (absl::GetFlag(FLAGS_nproc) > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nproc must be at most 1024 (got ", absl::GetFlag(FLAGS_nproc), ")"));
  }
  TPX_RETURN_IF_ERROR(CheckAtLeast("tp", absl::GetFlag(FLAGS_tp), 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("steps", absl::GetFlag(FLAGS_steps), 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("warmup", absl::GetFlag(FLAGS_warmup), 0));
  TPX_RETURN_IF_ERROR(CheckAtLeast("log_interval", absl::GetFlag(FLAGS_log_interval), 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("eval_interval", absl::GetFlag(FLAGS_eval_interval), 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("eval_batches", absl::GetFlag(FLAGS_eval_batches), 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("sample_tokens", absl::GetFlag(FLAGS_sample_tokens), 0));
  TPX_RETURN_IF_ERROR(CheckReal("lr", absl::GetFlag(FLAGS_lr), 0, /*min_inclusive=*/false));
  TPX_RETURN_IF_ERROR(CheckReal("min_lr", absl::GetFlag(FLAGS_min_lr), 0, /*min_inclusive=*/true));
  TPX_RETURN_IF_ERROR(
      CheckReal("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, /*min_inclusive=*/true));
  TPX_RETURN_IF_ERROR(CheckReal("clip", absl::GetFlag(FLAGS_clip), 0, /*min_inclusive=*/false));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = tpx::gpt::CheckTrainFlags(); !s.ok()) {
    std::fprintf(stderr, "train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return tpx::gpt::RunProgram("train", absl::GetFlag(FLAGS_nproc), tpx::gpt::RankMain);
}
