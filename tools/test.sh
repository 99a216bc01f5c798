#!/usr/bin/env bash
# Runs every tpx test on this machine: installs what is missing, then `bazel test //...`.
# Ends with one summary line "bazel: N passed, N failed" over the Bazel test targets.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
config=()
[[ "${CI:-}" == "true" ]] && config=(--config=ci)
log=$(mktemp)
bazel test "${config[@]}" //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|INCOMPLETE|NO STATUS)' "$log")
rm -f "$log"
echo "bazel: $passed passed, $failed failed"
exit "$rc"
