#!/usr/bin/env bash
# The main job: installs what is missing, builds everything, then runs the GEMM benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build -c opt //...
exec bazel run -c opt //bench:gemm -- "$@"
