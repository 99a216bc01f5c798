#!/usr/bin/env python3
"""The Megatron MLP block of bench:tp_mlp in eager PyTorch, for it to compare with.

Forward and backward of Linear h->4h (with bias), exact GeLU, Linear 4h->h
(with bias) on [tokens, h] inputs that require a gradient, with a given
output gradient; the same shapes and step structure as tpx's bench (2
warm-up steps, then the median of --steps timed steps, the slowest rank's).
Weight gradients are left to autograd (set to None before each step, so the
GEMM writes them directly: PyTorch's fastest form). Prints one JSON line:

  {"bench":"tp_mlp","impl":"pytorch","tp":1,"dtype":"f32","threads":2,
   "omp_threads":1,"blas_threads":2,"step_ms":...}

or a "skipped" line when torch cannot be imported.

--tp=2 runs Megatron-style tensor parallelism over gloo in 2 processes (this
script spawns them; a file store in a fresh temporary directory, no ports):
fc1 split by output rows (column parallel, each rank its slice of the bias),
fc2 by input columns (row parallel, full bias added after the reduction),
the all_reduce of fc2's output in forward and of the input gradient in
backward. --dtype=bf16 runs forward under CPU bf16 autocast (f32 weights, as
torch.autocast does); gloo in PyTorch 1.13 reduces no bf16, so bf16 tensors
are all-reduced through f32 copies.

Thread settings (per process): --omp_threads (torch.set_num_threads) and
--blas_threads (OpenBLAS's own pool, set through the environment before
torch loads).
"""
import argparse
import sys
import time

import torch_peer


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=1024)
    return torch_peer.add_common_args(p).parse_args()


def first_keys(args):
    return torch_peer.base_line("tp_mlp", args, sequence_parallel=False)


def invalid(args):
    if args.steps < 1 or args.tokens < 1 or args.hidden < 1 or (4 * args.hidden) % args.tp:
        return "--steps, --tokens and --hidden must be >= 1"
    return None


def run(rank, args, store_dir):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    tpr = torch_peer.setup_rank(rank, args, store_dir, seed=1234)
    tp = args.tp

    T, h = args.tokens, args.hidden
    f = 4 * h
    fl = f // tp
    # Every rank draws the full weights from the same seed and keeps its shard.
    w1_full = torch.randn(f, h) * 0.02
    w2_full = torch.randn(h, f) * 0.02
    w1 = torch.nn.Parameter(w1_full[rank * fl:(rank + 1) * fl].contiguous())
    b1 = torch.nn.Parameter(torch.zeros(fl))
    w2 = torch.nn.Parameter(w2_full[:, rank * fl:(rank + 1) * fl].contiguous())
    b2 = torch.nn.Parameter(torch.zeros(h))
    gen = torch.Generator().manual_seed(1 + rank)
    x_value = torch.rand(T, h, generator=gen) - 0.5
    dy = torch.rand(T, h, generator=gen) - 0.5
    autocast = args.dtype == "bf16"
    dy_as = {dy.dtype: dy}  # the output gradient in the output's dtype

    def step():
        for p in (w1, b1, w2, b2):
            p.grad = None
        x = x_value.detach().requires_grad_()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            a = F.gelu(F.linear(tpr.copy_to(x), w1, b1))
            y = tpr.reduce_from(F.linear(a, w2)) + b2
        if y.dtype not in dy_as:
            dy_as[y.dtype] = dy.to(y.dtype)
        y.backward(dy_as[y.dtype])

    times = []
    for s in range(args.steps + 2):
        tpr.barrier()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        if s >= 2:
            times.append(1000.0 * (t1 - t0))
    times.sort()
    median = torch.tensor([times[len(times) // 2]])
    tpr.all_reduce(median, dist.ReduceOp.MAX)
    if rank == 0:
        line = first_keys(args)
        line.update({"step_ms": round(float(median[0]), 2), "tokens": T, "hidden": h,
                     "steps": args.steps, "torch": torch.__version__})
        torch_peer.emit(line)
    tpr.finish()


if __name__ == "__main__":
    sys.exit(torch_peer.main(parse_args(), "tp_mlp_pytorch", first_keys, run, invalid))
