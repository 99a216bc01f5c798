#!/usr/bin/env bash
# Trains the example GPT on 2 ranks with tensor parallelism 2 and sequence parallelism (a few
# minutes on 2 cores; sequence parallelism splits the layer norms, dropouts and residual adds
# that plain tensor parallelism repeats on every rank, about 5% more tokens/s here): installs
# what is missing, then runs //examples/gpt:train. Extra arguments are passed on and win
# (e.g. --steps=100, --tp=1 --nproc=1, --nosequence_parallel, --recompute, --dropout=0.1).
# Writes gpt_loss.csv and gpt_loss.png (drawn by gnuplot, installed here) in the current directory and
# saves a sharded checkpoint of the last step under gpt_checkpoint/ (see README: resume, --load).
# Without extra arguments it then loads that TP=2 checkpoint into one TP=1 rank and streams a
# sampled text from it (//examples/gpt:generate).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh gnuplot-nox
bazel build -c opt //examples/gpt:train //examples/gpt:generate
bazel run -c opt //examples/gpt:train -- --nproc=2 --tp=2 --sequence_parallel --save_dir=gpt_checkpoint "$@"
if [[ $# -eq 0 ]]; then
  echo "--- generating at TP=1 from the TP=2 checkpoint in gpt_checkpoint/ ---"
  bazel run -c opt //examples/gpt:generate -- --nproc=1 --tp=1 --load=gpt_checkpoint \
    --max_new_tokens=300 --temperature=0.7 --top_p=0.9
fi
