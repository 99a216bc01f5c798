#!/usr/bin/env bash
# The GPT example on cuda:0 beside its PyTorch peer (bench/peers/gpt_pytorch.py, eager, on the
# same GPU) in f32 and bf16, at the example's size and at 101M parameters: one JSON line each
# with the steady tokens/s (the steps after the 5th). Part of the checks packed by
# tools/cuda/pack_gpu_checks.sh; run_gpu_checks.sh calls it where python3 has torch with CUDA:
#
#   gpt_vs_pytorch.sh CHECKS_DIR RESULTS_DIR     # CHECKS_DIR: the unpacked archive
#
# Environment: STEPS (default 30), CONFIGS (default "small large"), DEVICE (default cuda; cpu
# runs both on this machine's CPU, over UCX, to try the script). The runs' logs go to
# RESULTS_DIR/gpt_vs_pytorch/. The environment for the packed binaries (LD_LIBRARY_PATH,
# UCX_MODULE_DIR) is the caller's. Both sides warm up for 1 step and follow a cosine schedule,
# so their losses compare only roughly; this measures speed.
set -uo pipefail
here=$1
logs=$2/gpt_vs_pytorch
mkdir -p "$logs"
runfiles=$here/examples/gpt/train.runfiles
# Model flags per configuration.
# shellcheck disable=SC2034  # read through the name reference below
small=(--d_model=128 --n_heads=4 --n_layers=4 --d_ff=512 --seq_len=128 --batch=16)
# shellcheck disable=SC2034
large=(--d_model=1024 --n_heads=16 --n_layers=8 --d_ff=4096 --seq_len=512 --batch=16)
steps=${STEPS:-30}
device=${DEVICE:-cuda}
backend=nccl
[[ "$device" == cpu ]] && backend=ucx

# Steady tokens/s of a training log: its progress lines give the cumulative tokens/s at steps
# 5 and `steps`; the time between them is what the steady steps took.
steady() {
  awk -v T="$1" '/^step/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") rate = $(i - 1);
    split($2, s, "/"); step = s[1] + 0; if (step == 5) t5 = 5 * T / rate; last = step;
    t_last = step * T / rate }
    END { if (t_last > t5 && t5 > 0) printf "%.0f", (last - 5) * T / (t_last - t5);
          else printf "-1" }' "$2"
}

# The value of flag --$1 in the configuration that `flags` names.
flag() { printf '%s\n' "${flags[@]}" | sed -n "s/^--$1=//p"; }

for config in ${CONFIGS:-small large}; do
  if [[ "$config" != small && "$config" != large ]]; then
    echo "gpt_vs_pytorch.sh: unknown configuration '$config' in CONFIGS (small, large)" >&2
    exit 2
  fi
  declare -n flags=$config
  tokens=$(($(flag seq_len) * $(flag batch)))  # a step's
  for dtype in f32 bf16; do
    log=$logs/tpx_${config}_$dtype.log
    (cd "$runfiles/tpx" && RUNFILES_DIR="$runfiles" timeout 150 ./examples/gpt/train --nproc=1 \
      --tp=1 --backend=$backend --device="$device" --steps="$steps" --warmup=1 --log_interval=5 \
      --eval_interval=100000 --eval_batches=1 --sample_tokens=0 --dtype="$dtype" "${flags[@]}") \
      >"$log" 2>&1
    rc=$?
    echo "{\"bench\":\"gpt_device\",\"impl\":\"tpx\",\"config\":\"$config\",\"dtype\":\"$dtype\",\"device\":\"$device\",\"rc\":$rc,\"steady_tokens_per_s\":$(steady "$tokens" "$log")}"
    [[ $rc -ne 0 ]] && tail -3 "$log"
    (cd "$here/peers" && timeout 200 python3 gpt_pytorch.py --device="$device" --dtype="$dtype" \
      --steps="$steps" "${flags[@]}") >"$logs/pytorch_${config}_$dtype.log" 2>&1
    # The peer's JSON line, tagged like tpx's.
    grep '^{' "$logs/pytorch_${config}_$dtype.log" | tail -1 |
      sed "s/^{/{\"bench\":\"gpt_device\",\"config\":\"$config\",/; s/\"bench\":\"gpt\",//"
  done
done
