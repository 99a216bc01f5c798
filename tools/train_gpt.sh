#!/usr/bin/env bash
# Trains the example GPT on 2 ranks with tensor parallelism 2 (a few minutes on 2 cores):
# installs what is missing, then runs //examples/gpt:train. Extra arguments are passed on
# (e.g. --steps=100, --tp=1 --nproc=1, --sequence_parallel, --recompute, --dropout=0.1).
# Writes gpt_loss.csv (and gpt_loss.png when gnuplot is installed) in the current directory and
# saves a sharded checkpoint of the last step under gpt_checkpoint/ (see README: resume, --load).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec bazel run -c opt //examples/gpt:train -- --nproc=2 --tp=2 --save_dir=gpt_checkpoint "$@"
