#!/usr/bin/env bash
# Installs the Debian packages tpx builds against, plus any named as arguments (e.g. gnuplot-nox
# for the main job's loss picture). Idempotent: installs only what is missing.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java bazel-platforms
  g++ libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libdnnl-dev libucx-dev nlohmann-json3-dev
  openmpi-bin  # mpirun for //tools:launchers_test (which skips without it)
  libopenmpi-dev  # mpicc for the Open MPI peer of //bench:collectives (compiled when it runs)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "tools/setup.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
