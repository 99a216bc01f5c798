"""What the PyTorch peers of the benches share: thread flags, JSON lines, TP ranks.

A peer script (bench/peers/gpt_pytorch.py, bench/peers/tp_mlp_pytorch.py)
keeps only its model and its step; this module sets the thread pools before
torch loads, prints a "skipped" line when torch cannot be imported, forks
the --tp ranks over gloo (a file store in a fresh temporary directory, no
ports) and gives each rank its all_reduce and the Megatron copy / reduce
autograd functions. Scripts are started as `python3 bench/peers/x.py`, so
their own directory is on sys.path and `import torch_peer` finds this file.

  import torch_peer

  def run(rank, args, store_dir):
      tp = torch_peer.setup_rank(rank, args, store_dir, seed=1234)
      y = tp.reduce_from(F.linear(tp.copy_to(x), w))  # row-parallel output
      if rank == 0:
          torch_peer.emit(dict(first_keys(args), step_ms=...))
      tp.finish()

  def first_keys(args):
      return torch_peer.base_line("mine", args)

  args = torch_peer.add_common_args(argparse.ArgumentParser()).parse_args()
  sys.exit(torch_peer.main(args, "mine_pytorch", first_keys, run, invalid=lambda a: None))
"""
import json
import os
import shutil
import sys
import tempfile


def add_common_args(parser):
    """Adds --omp_threads, --blas_threads, --openblas_core, --tp and --dtype; returns the parser."""
    parser.add_argument("--omp_threads", type=int, default=1)
    parser.add_argument("--blas_threads", type=int, default=1)
    # auto: OpenBLAS picks its kernels for this CPU. Some hosts set
    # OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) to an older core as a workaround
    # for old OpenBLAS builds; on a CPU with AVX-512 that halves PyTorch's f32
    # GEMM rate, which would flatter tpx. Where OpenBLAS does not know the CPU
    # model and falls back to its SSE kernels, auto takes the newest kernel set
    # the CPU's features allow instead (openblas_core_for_cpu). env: keep what
    # the environment says.
    parser.add_argument("--openblas_core", default="auto", choices=("auto", "env"))
    parser.add_argument("--tp", type=int, default=1, choices=(1, 2))
    parser.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    return parser


def emit(line):
    print(json.dumps(line, separators=(",", ":")), flush=True)


def base_line(bench, args, **after_tp):
    """The keys every line of `bench` starts with; `after_tp` go right after "tp"."""
    line = {"bench": bench, "impl": "pytorch", "tp": args.tp}
    line.update(after_tp)
    line.update({"dtype": args.dtype, "threads": max(args.omp_threads, args.blas_threads),
                 "omp_threads": args.omp_threads, "blas_threads": args.blas_threads,
                 "openblas_core": openblas_core_name()})
    if os.environ.get(OWN_CORE_ENV):
        line["openblas_own_core"] = os.environ[OWN_CORE_ENV]
    return line


def openblas_core_name():
    """The kernel set the OpenBLAS that torch loaded runs ("Cooperlake", "Haswell", ...)."""
    import ctypes
    with open("/proc/self/maps") as maps:
        paths = {l.split()[-1] for l in maps if "libopenblas" in l and l.split()[-1].startswith("/")}
    for path in sorted(paths):
        try:
            get = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_char_p
        return get().decode()
    return "unknown"


# OpenBLAS's SSE-only kernel sets: what a release falls back to on a CPU model
# it predates (0.3.21 runs "Prescott" on an Emerald Rapids Xeon, at a sixth of
# the f32 GEMM rate of its AVX-512 kernels there).
SSE_ONLY_CORES = {"katmai", "coppermine", "northwood", "prescott", "banias", "core2", "penryn",
                  "dunnington", "nehalem", "atom", "opteron", "opteron_sse3", "barcelona",
                  "bobcat", "nano"}
# Set when auto replaced such a fallback: the core OpenBLAS chose on its own.
OWN_CORE_ENV = "TPX_OPENBLAS_OWN_CORE"


def openblas_core_for_cpu():
    """The newest OpenBLAS kernel set the CPU's features allow, or None.

    The order newer OpenBLAS releases use for CPU models they do not know.
    """
    flags = set()
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    avx512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags
    if avx512 and "avx512_bf16" in flags:
        return "Cooperlake"
    if avx512:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    if "avx" in flags:
        return "Sandybridge"
    return None


def replace_sse_fallback(args):
    """In auto mode, restarts this process on a better core when OpenBLAS fell back to SSE.

    OpenBLAS reads OPENBLAS_CORETYPE once, as torch loads it: hence the restart.
    """
    if args.openblas_core != "auto" or os.environ.get(OWN_CORE_ENV):
        return
    own = openblas_core_name()
    if own.lower() not in SSE_ONLY_CORES:
        return
    better = openblas_core_for_cpu()
    if better is None:
        return
    os.environ["OPENBLAS_CORETYPE"] = better
    os.environ[OWN_CORE_ENV] = own
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable] + sys.argv)


class TpRank:
    """One rank's collectives; at tp == 1 every reduction is the identity."""

    def __init__(self, rank, tp):
        import torch
        import torch.distributed as dist

        self.rank, self.size = rank, tp
        self._torch, self._dist = torch, dist
        reduce = self.all_reduce

        class CopyToTp(torch.autograd.Function):  # identity; gradient summed over ranks
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return reduce(g.contiguous())

        class ReduceFromTp(torch.autograd.Function):  # sum over ranks; gradient as is
            @staticmethod
            def forward(ctx, x):
                return reduce(x.contiguous())

            @staticmethod
            def backward(ctx, g):
                return g

        self.copy_to, self.reduce_from = CopyToTp.apply, ReduceFromTp.apply

    def all_reduce(self, t, op=None):
        """Reduces `t` in place across the ranks (sum unless `op`) and returns it."""
        if self.size > 1:
            op = op or self._dist.ReduceOp.SUM
            if t.dtype == self._torch.bfloat16:  # gloo (PyTorch 1.13) reduces no bf16: via f32
                wide = t.float()
                self._dist.all_reduce(wide, op=op)
                t.copy_(wide)
            else:
                self._dist.all_reduce(t, op=op)
        return t

    def barrier(self):
        if self.size > 1:
            self._dist.barrier()

    def finish(self):
        if self.size > 1:
            self._dist.destroy_process_group()


def setup_rank(rank, args, store_dir, seed):
    """Joins the gloo group (tp > 1), sets torch's threads and seed; the rank's TpRank."""
    import torch
    import torch.distributed as dist

    if args.tp > 1:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(store_dir, "store"),
                                rank=rank, world_size=args.tp)
    torch.set_num_threads(args.omp_threads)
    torch.manual_seed(seed)
    return TpRank(rank, args.tp)


def main(args, name, first_keys, run, invalid):
    """Runs run(rank, args, store_dir) on each of the --tp ranks; the exit status.

    Sizes OpenBLAS's pool before torch loads (it reads the environment once);
    prints first_keys(args) with a "skipped" reason and succeeds when torch
    cannot be imported; `invalid(args)` returns an error message (printed
    after `name`) for flags the model cannot take, else None.
    """
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    if args.openblas_core == "auto" and not os.environ.get(OWN_CORE_ENV):
        os.environ.pop("OPENBLAS_CORETYPE", None)
        os.environ.pop("OPENBLAS_L2_SIZE", None)
    try:
        import torch  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError as e:
        line = first_keys(args)
        line.update({"skipped": "torch not importable: %s" % e})
        emit(line)
        return 0
    replace_sse_fallback(args)
    error = invalid(args)
    if error:
        print("%s: %s" % (name, error), file=sys.stderr)
        return 2
    if args.tp == 1:
        run(0, args, None)
        return 0
    store_dir = tempfile.mkdtemp(prefix=name + "_")
    try:
        mp.spawn(run, args=(args, store_dir), nprocs=args.tp, join=True)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return 0
