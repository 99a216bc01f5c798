#!/usr/bin/env bash
# Runs the checks packed by tools/cuda/pack_gpu_checks.sh on a GPU machine: every packed test
# binary (the NCCL conformance cases only, at the world sizes the visible GPUs allow),
# bench:cuda_ops, the GPT example for 200 steps in f32 and bf16 on cuda:0 and, where python3 has
# torch with CUDA, the example's throughput beside its PyTorch peer's (gpt_vs_pytorch.sh).
#
#   run_gpu_checks.sh [results_dir]     # default: ./gpu_check_results
#
# Writes tests.log, cuda_ops.jsonl, gpt_<dtype>.log, gpt_<dtype>.csv and gpt_vs_pytorch.jsonl
# (its runs' logs in gpt_vs_pytorch/) into results_dir and prints a line per test binary (exit
# status, passed / failed / skipped counts), the failures' names, the bench lines and the GPT
# runs' last lines. Exits 1 when a test binary failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=$(realpath -m "${1:-gpu_check_results}")
mkdir -p "$results"

# The CUDA runtime, cuBLAS and NCCL come from the machine, wherever its toolkit or Python
# wheels put them.
lib_dirs=""
for name in libcudart.so.13 libcublas.so.13 libnccl.so.2; do
  found=$(find /usr/local /opt /usr/lib -name "$name*" 2>/dev/null | head -1)
  [[ -z "$found" ]] && { echo "missing on this machine: $name"; exit 2; }
  lib_dirs="$lib_dirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$here/lib$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$here/ucx" UCX_WARN_UNUSED_ENV_VARS=n
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

log="$results/tests.log"
: >"$log"
failed=0
while read -r target; do
  [[ "$target" == *_test ]] || continue
  args=()
  [[ "$target" == testing/comm_conformance_test ]] && args=(--gtest_filter='Nccl/*')
  runfiles="$here/$target.runfiles"
  echo "===== $target" >>"$log"
  out=$(cd "$runfiles/tpx" && TEST_SRCDIR="$runfiles" RUNFILES_DIR="$runfiles" \
    TEST_WORKSPACE=tpx TEST_TMPDIR="$(mktemp -d)" timeout 600 "./$target" "${args[@]}" 2>&1)
  rc=$?
  echo "$out" >>"$log"
  count() {
    local n
    n=$(echo "$out" | sed -n "s/^\[  $1 *\] \([0-9]*\) tests\?.*/\1/p" | tail -1)
    echo "${n:-0}"
  }
  printf '%-45s rc=%d passed=%s failed=%s skipped=%s\n' "$target" "$rc" "$(count PASSED)" \
    "$(count FAILED)" "$(count SKIPPED)"
  echo "$out" | grep -E '^\[  FAILED  \] [^0-9]' | sort -u
  [[ $rc -ne 0 ]] && failed=1
done <"$here/targets.txt"

runfiles="$here/bench/cuda_ops.runfiles"
(cd "$runfiles/tpx" && RUNFILES_DIR="$runfiles" timeout 300 ./bench/cuda_ops) \
  >"$results/cuda_ops.jsonl" 2>&1
cat "$results/cuda_ops.jsonl"

runfiles="$here/examples/gpt/train.runfiles"
for dtype in f32 bf16; do
  (cd "$runfiles/tpx" && RUNFILES_DIR="$runfiles" timeout 600 ./examples/gpt/train --nproc=1 \
    --tp=1 --backend=nccl --device=cuda --steps=200 --dtype="$dtype" --sample_tokens=100 \
    --csv="$results/gpt_$dtype.csv") >"$results/gpt_$dtype.log" 2>&1
  echo "gpt $dtype rc=$?: $(grep '^done' "$results/gpt_$dtype.log")"
done

if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  "$here/gpt_vs_pytorch.sh" "$here" "$results" | tee "$results/gpt_vs_pytorch.jsonl"
else
  echo "gpt vs pytorch: skipped (python3 has no torch with CUDA here)"
fi
exit "$failed"
