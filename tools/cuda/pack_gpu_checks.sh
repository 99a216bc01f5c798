#!/usr/bin/env bash
# Builds every CUDA-dependent test, the CUDA bench and the GPT example here (-c opt), and packs
# them with their runfiles and the non-system libraries they link into one archive that runs on
# a GPU machine without Bazel, a compiler or tpx's Debian packages:
#
#   tools/cuda/pack_gpu_checks.sh [archive]          # default: gpu_checks.tar.xz
#   # on the GPU machine (CUDA 13 runtime, cuBLAS and NCCL 2.x installed anywhere under
#   # /usr/local, /opt or /usr/lib):
#   mkdir checks && tar -xJf gpu_checks.tar.xz -C checks && checks/run_gpu_checks.sh [results_dir]
#
# run_gpu_checks.sh (tools/cuda/run_gpu_checks.sh) runs the tests, bench:cuda_ops, 200 GPT
# steps in f32 and bf16 on cuda:0 and, where python3 has torch with CUDA, the GPT example beside
# its PyTorch peer (tools/cuda/gpt_vs_pytorch.sh), and prints one line per test binary and the
# figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
archive=$(realpath -m "${1:-gpu_checks.tar.xz}")

tests=$(bazel query 'kind(".*_test", rdeps(//..., //core/cuda:all + //comm_nccl:all))' 2>/dev/null)
binaries="//bench:cuda_ops //examples/gpt:train //examples/gpt:generate"
# shellcheck disable=SC2086
bazel build -c opt $tests $binaries

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
for label in $tests $binaries; do
  path=${label#//}
  path=${path/://}
  mkdir -p "$stage/$(dirname "$path")"
  cp -rL "$bin/$path.runfiles" "$stage/$path.runfiles"
  echo "$path" >>"$stage/targets.txt"
done

# Libraries outside glibc, the compiler's runtime and CUDA (the GPU machine has its own).
mkdir -p "$stage/lib" "$stage/ucx"
find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  { xargs -0 ldd 2>/dev/null || true; } |  # ldd fails on the scripts among them
  awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)[.-]' |
  grep -v -E '/(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]' |
  grep -v -e "$stage" -e '_solib' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# UCX finds its transports through UCX_MODULE_DIR, which run_gpu_checks.sh points here.
ucx_modules=$(dirname "$(ldconfig -p | awk '/libucp.so.0 / {print $NF; exit}')")/ucx
cp -L "$ucx_modules"/libuct_*.so.0 "$stage/ucx/" 2>/dev/null || true

cp tools/cuda/run_gpu_checks.sh tools/cuda/gpt_vs_pytorch.sh "$stage/"
mkdir -p "$stage/peers"
cp bench/peers/gpt_pytorch.py bench/peers/torch_peer.py "$stage/peers/"
tar -C "$stage" -cf - . | xz -T0 -6 >"$archive"
echo "packed $(wc -l <"$stage/targets.txt") targets into $archive ($(du -h "$archive" | cut -f1))"
