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

or a "skipped" line when torch cannot be imported.

--tp=2 runs Megatron-style tensor parallelism over gloo in 2 processes (this
script spawns them; a file store in a fresh temporary directory, no ports):
vocabulary-parallel embedding and cross entropy with the tied output
projection, column-parallel QKV (each rank its heads' q, k and v rows) and
fc1, row-parallel attention output and fc2, with the all_reduce in forward
after each row-parallel layer and in backward before each column-parallel
one; the global gradient norm sums the shards' squares across ranks. Every
rank draws the full weights from the same seed and keeps its shard, so TP=1
and TP=2 train the same model. --dtype=bf16 runs forward under bf16 autocast
(f32 weights and optimizer, as torch.autocast does). --device=cuda (TP=1
only) trains on cuda:0 from the same initial weights, for comparison with the
example's --device=cuda; f32 matrix products then stay f32 (no TF32), as
tpx's do.

Thread settings (per process): --omp_threads (torch.set_num_threads) and
--blas_threads (OpenBLAS's own pool, set through the environment before
torch loads).
"""
import argparse
import math
import sys
import time

import torch_peer


# Steps left out of steady_tokens_per_s (bench/gpt_bench.cc's kSteadyAfter).
STEADY_AFTER = 5

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--d_model", type=int, default=128)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--n_layers", type=int, default=4)
    p.add_argument("--d_ff", type=int, default=512)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    return torch_peer.add_common_args(p).parse_args()


def first_keys(args):
    line = torch_peer.base_line("gpt", args)
    if args.device != "cpu":
        line["device"] = args.device
    return line


def invalid(args):
    if args.n_heads % args.tp or args.d_ff % args.tp or args.d_model % args.n_heads:
        return "n_heads and d_ff must divide by --tp, d_model by n_heads"
    if args.device == "cuda" and args.tp != 1:
        return "--device=cuda runs at --tp=1 only"
    return None


def train(rank, args, store_dir):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    tpr = torch_peer.setup_rank(rank, args, store_dir, args.seed)
    tp, all_reduce = args.tp, tpr.all_reduce

    class VocabParallelCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, first):  # logits [N, V/tp] in f32
            logits = logits.float()
            local_max = logits.max(dim=-1)[0]
            all_reduce(local_max, dist.ReduceOp.MAX)
            shifted = logits - local_max.unsqueeze(-1)
            rel = target - first
            mine = (rel >= 0) & (rel < logits.size(-1))
            rel = rel.clamp(0, logits.size(-1) - 1)
            picked = shifted.gather(-1, rel.unsqueeze(-1)).squeeze(-1) * mine
            all_reduce(picked)
            exp = shifted.exp()
            sum_exp = all_reduce(exp.sum(dim=-1))
            probs = exp / sum_exp.unsqueeze(-1)
            ctx.save_for_backward(probs, rel, mine)
            return (sum_exp.log() - picked).mean()

        @staticmethod
        def backward(ctx, g):
            probs, rel, mine = ctx.saved_tensors
            grad = probs.clone()
            rows = torch.arange(grad.size(0))
            grad[rows, rel] -= mine.float()
            return grad * (g / grad.size(0)), None, None

    vocab, d, h, t, b = 256, args.d_model, args.n_heads, args.seq_len, args.batch
    hl, ffl, vl, dl = h // tp, args.d_ff // tp, vocab // tp, d // tp
    std = 0.02
    out_std = std / math.sqrt(2.0 * args.n_layers)

    def normal(*shape, s=std):
        return torch.randn(*shape) * s

    # Weights are drawn on the CPU (the same values for every device), then moved.
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False

    def param(x):
        return torch.nn.Parameter(x.contiguous().to(dev))

    def rows(x, n):  # this rank's block of n rows
        return x[rank * n:(rank + 1) * n]

    emb = param(rows(normal(vocab, d), vl))
    pos = param(normal(t, d))
    blocks = []
    for _ in range(args.n_layers):
        qkv_w = normal(3 * d, d)
        blocks.append({
            "ln1_w": param(torch.ones(d)), "ln1_b": param(torch.zeros(d)),
            # [q | k | v], head-major: this rank's heads' rows of each.
            "qkv_w": param(torch.cat([rows(z, dl) for z in qkv_w.split(d)])),
            "qkv_b": param(torch.zeros(3 * dl)),
            "out_w": param(rows(normal(d, d, s=out_std).t(), dl).t()),
            "out_b": param(torch.zeros(d)),
            "ln2_w": param(torch.ones(d)), "ln2_b": param(torch.zeros(d)),
            "fc1_w": param(rows(normal(args.d_ff, d), ffl)), "fc1_b": param(torch.zeros(ffl)),
            "fc2_w": param(rows(normal(d, args.d_ff, s=out_std).t(), ffl).t()),
            "fc2_b": param(torch.zeros(d)),
        })
    lnf_w, lnf_b = param(torch.ones(d)), param(torch.zeros(d))
    sharded = [emb] + [blk[k] for blk in blocks
                       for k in ("qkv_w", "qkv_b", "out_w", "fc1_w", "fc1_b", "fc2_w")]
    decay = [emb, pos] + [blk[k] for blk in blocks for k in ("qkv_w", "out_w", "fc1_w", "fc2_w")]
    no_decay = [lnf_w, lnf_b] + [blk[k] for blk in blocks
                                 for k in ("ln1_w", "ln1_b", "qkv_b", "out_b", "ln2_w", "ln2_b",
                                           "fc1_b", "fc2_b")]
    params = decay + no_decay
    sharded_ids = {id(p) for p in sharded}
    n_params = sum(p.numel() * (tp if id(p) in sharded_ids else 1) for p in params)
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1).to(dev)
    hd = d // h
    first_vocab = rank * vl

    def loss_fn(tokens, targets):  # [B, T]
        if tp == 1:  # PyTorch's own path: no masking, F.cross_entropy below
            x = F.embedding(tokens, emb) + pos
        else:
            inside = (tokens >= first_vocab) & (tokens < first_vocab + vl)
            local = ((tokens - first_vocab) * inside).clamp(0, vl - 1)
            x = tpr.reduce_from(F.embedding(local, emb) * inside.unsqueeze(-1)) + pos
        for blk in blocks:
            a = F.layer_norm(x, (d,), blk["ln1_w"], blk["ln1_b"], 1e-5)
            qkv = F.linear(tpr.copy_to(a), blk["qkv_w"], blk["qkv_b"])
            q, k, v = (z.reshape(b, t, hl, hd).transpose(1, 2) for z in qkv.split(dl, dim=-1))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(b, t, dl)
            x = x + tpr.reduce_from(F.linear(ctx, blk["out_w"])) + blk["out_b"]
            m = F.layer_norm(x, (d,), blk["ln2_w"], blk["ln2_b"], 1e-5)
            up = F.gelu(F.linear(tpr.copy_to(m), blk["fc1_w"], blk["fc1_b"]))
            x = x + tpr.reduce_from(F.linear(up, blk["fc2_w"])) + blk["fc2_b"]
        x = F.layer_norm(x, (d,), lnf_w, lnf_b, 1e-5)
        logits = tpr.copy_to(x) @ emb.t()
        if tp == 1:
            return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        return VocabParallelCrossEntropy.apply(logits.reshape(-1, vl), targets.reshape(-1),
                                               first_vocab)

    def clip_grad_norm(max_norm):
        sq_sharded = sum(p.grad.float().pow(2).sum() for p in params if id(p) in sharded_ids)
        sq_replicated = sum(p.grad.float().pow(2).sum() for p in params
                            if id(p) not in sharded_ids)
        total = all_reduce(torch.as_tensor(sq_sharded).clone()) + sq_replicated
        scale = max_norm / (total.sqrt() + 1e-6)
        if scale < 1:
            for p in params:
                p.grad.mul_(scale)

    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-3, betas=(0.9, 0.95), eps=1e-8)
    text = b""
    while len(text) < 200000:
        text += b"In the beginning God created the heaven and the earth.\n"
    data = torch.tensor(list(text[:int(len(text) * 0.9)]), dtype=torch.long)
    warmup, max_lr, min_lr = 1, 6e-3, 3e-4
    autocast = args.dtype == "bf16"
    tpr.barrier()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss_value = float("nan")
    # As bench:gpt does for tpx: the first step's time, and the steps after
    # the first STEADY_AFTER on their own (with more than twice as many).
    first_step_s, steady_start = None, None
    for step in range(args.steps):
        # Same generator state on every rank: same batch.
        starts = torch.randint(0, len(data) - t - 1, (b,))
        window = torch.stack([data[s:s + t + 1] for s in starts.tolist()]).to(dev)
        if step < warmup:
            lr = max_lr * (step + 1) / warmup
        else:
            progress = (step - warmup) / max(1, args.steps - warmup)
            lr = min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(1.0)
        opt.step()
        loss_value = loss.item()  # waits for the step on a GPU too
        if step == 0:
            first_step_s = time.perf_counter() - start
        if step + 1 == STEADY_AFTER:
            steady_start = time.perf_counter()
    end = time.perf_counter()
    elapsed = end - start
    steady = args.steps > 2 * STEADY_AFTER and steady_start is not None
    if rank == 0:
        line = first_keys(args)
        steady_tps = b * t * (args.steps - STEADY_AFTER) / (end - steady_start) if steady else -1.0
        line.update({"tokens_per_s": round(b * t * args.steps / elapsed, 1),
                     "steady_tokens_per_s": round(steady_tps, 1),
                     "step_ms": round(1000.0 * elapsed / args.steps, 2),
                     "first_step_ms": round(1000.0 * first_step_s, 2),
                     "final_loss": round(loss_value, 5), "params": n_params,
                     "steps": args.steps, "batch": b, "seq_len": t, "d_model": d,
                     "n_layers": args.n_layers, "torch": torch.__version__})
        torch_peer.emit(line)
    tpr.finish()


if __name__ == "__main__":
    sys.exit(torch_peer.main(parse_args(), "gpt_pytorch", first_keys, train, invalid))
