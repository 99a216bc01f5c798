#!/usr/bin/env python3
"""The GPT example (examples/gpt) in eager PyTorch, for bench:gpt to compare with.

Same model (byte vocabulary 256, learned positions, pre-LN blocks with fused
QKV, exact GeLU MLP, final LayerNorm, output projection tied to the
embedding), init (normal 0.02, residual projections 0.02 / sqrt(2 layers),
zero biases, unit LayerNorm weights), batch, AdamW (betas 0.9/0.95, eps 1e-8,
weight decay on weights, embedding and positions only), gradient clipping at
1.0 and warmup-cosine learning rate. Throughput counts every step's tokens,
the first step included, as bench:gpt does for tpx. Prints one JSON line:

  {"bench":"gpt","impl":"pytorch","tp":1,"dtype":"f32","threads":2,
   "omp_threads":1,"blas_threads":2,"tokens_per_s":...}

or a "skipped" line when torch cannot be imported. Thread settings:
--omp_threads (torch.set_num_threads) and --blas_threads (OpenBLAS's own
pool, set through the environment before torch loads).
"""
import argparse
import json
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--d_model", type=int, default=128)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--n_layers", type=int, default=4)
    p.add_argument("--d_ff", type=int, default=512)
    p.add_argument("--omp_threads", type=int, default=1)
    p.add_argument("--blas_threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def main():
    args = parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    line = {"bench": "gpt", "impl": "pytorch", "tp": 1, "dtype": "f32",
            "threads": max(args.omp_threads, args.blas_threads),
            "omp_threads": args.omp_threads, "blas_threads": args.blas_threads}
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        line.update({"skipped": "torch not importable: %s" % e})
        print(json.dumps(line, separators=(",", ":")), flush=True)
        return 0
    torch.set_num_threads(args.omp_threads)
    torch.manual_seed(args.seed)
    vocab, d, h, t, b = 256, args.d_model, args.n_heads, args.seq_len, args.batch
    std = 0.02
    out_std = std / math.sqrt(2.0 * args.n_layers)

    def normal(*shape, s=std):
        return torch.nn.Parameter(torch.randn(*shape) * s)

    def zeros(*shape):
        return torch.nn.Parameter(torch.zeros(*shape))

    def ones(*shape):
        return torch.nn.Parameter(torch.ones(*shape))

    emb = normal(vocab, d)
    pos = normal(t, d)
    blocks = []
    for _ in range(args.n_layers):
        blocks.append({
            "ln1_w": ones(d), "ln1_b": zeros(d),
            "qkv_w": normal(3 * d, d), "qkv_b": zeros(3 * d),
            "out_w": normal(d, d, s=out_std), "out_b": zeros(d),
            "ln2_w": ones(d), "ln2_b": zeros(d),
            "fc1_w": normal(args.d_ff, d), "fc1_b": zeros(args.d_ff),
            "fc2_w": normal(d, args.d_ff, s=out_std), "fc2_b": zeros(d),
        })
    lnf_w, lnf_b = ones(d), zeros(d)
    decay = [emb, pos] + [blk[k] for blk in blocks for k in ("qkv_w", "out_w", "fc1_w", "fc2_w")]
    no_decay = [lnf_w, lnf_b] + [blk[k] for blk in blocks
                                 for k in ("ln1_w", "ln1_b", "qkv_b", "out_b", "ln2_w", "ln2_b",
                                           "fc1_b", "fc2_b")]
    n_params = sum(p.numel() for p in decay + no_decay)
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    hd = d // h

    def loss_fn(tokens, targets):  # [B, T]
        x = F.embedding(tokens, emb) + pos
        for blk in blocks:
            a = F.layer_norm(x, (d,), blk["ln1_w"], blk["ln1_b"], 1e-5)
            qkv = F.linear(a, blk["qkv_w"], blk["qkv_b"])
            q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in qkv.split(d, dim=-1))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(b, t, d)
            x = x + F.linear(ctx, blk["out_w"], blk["out_b"])
            m = F.layer_norm(x, (d,), blk["ln2_w"], blk["ln2_b"], 1e-5)
            x = x + F.linear(F.gelu(F.linear(m, blk["fc1_w"], blk["fc1_b"])), blk["fc2_w"],
                             blk["fc2_b"])
        x = F.layer_norm(x, (d,), lnf_w, lnf_b, 1e-5)
        logits = x @ emb.t()
        return F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))

    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-3, betas=(0.9, 0.95), eps=1e-8)
    text = b""
    while len(text) < 200000:
        text += b"In the beginning God created the heaven and the earth.\n"
    data = torch.tensor(list(text[:int(len(text) * 0.9)]), dtype=torch.long)
    warmup, max_lr, min_lr = 1, 6e-3, 3e-4
    start = time.perf_counter()
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - t - 1, (b,))
        window = torch.stack([data[s:s + t + 1] for s in starts.tolist()])
        if step < warmup:
            lr = max_lr * (step + 1) / warmup
        else:
            progress = (step - warmup) / max(1, args.steps - warmup)
            lr = min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = loss_fn(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decay + no_decay, 1.0)
        opt.step()
        loss.item()
    elapsed = time.perf_counter() - start
    line.update({"tokens_per_s": round(b * t * args.steps / elapsed, 1),
                 "step_ms": round(1000.0 * elapsed / args.steps, 2), "params": n_params,
                 "steps": args.steps, "batch": b, "seq_len": t, "d_model": d,
                 "n_layers": args.n_layers, "torch": torch.__version__})
    print(json.dumps(line, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
