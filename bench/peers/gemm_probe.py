"""Single-core GEMM rate at the benchmark model's own GEMM shapes: the peak that MFU divides by.

  python gemm_probe.py --model gpt2-mini --rows 512 --dtypes fp32,bf16 [--core 0] > probe.json

For one rank's training step (rows = batch x seq tokens) every Conv1D runs three GEMMs in the
layouts autograd uses (forward addmm X[M,K] W[K,N]; input grad dY W^T; weight grad X^T dY), and
the tied head runs H Wte^T, dY Wte and dY^T H. Each is timed alone on one thread pinned to one
core, best of several repetitions. The FLOP-weighted rate of a step is total GEMM FLOPs over
the total time those GEMMs take at the measured rates (a harmonic mean weighted by FLOPs), so
the big head GEMMs count as much as they cost. Attention's batched products (about 4% of a
gpt2-mini step's FLOPs) are not probed.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_model import preset  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def gemm_list(model: str, rows: int):
    """(name, layer count, callable factory (dtype) -> (fn, flops)) for one rank's step."""
    c = preset(model)
    C, V, M, L = c.n_embd, c.vocab_size, rows, c.n_layer
    out = []
    for name, K, N in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C), ("mlp.c_fc", C, 4 * C),
                       ("mlp.c_proj", 4 * C, C)):
        out.append((f"{name} fwd  X W", L, M, K, N, "fwd"))
        out.append((f"{name} bwd  dY W^T", L, M, N, K, "dx"))
        out.append((f"{name} bwd  X^T dY", L, K, M, N, "dw"))
    out.append(("lm_head fwd  H Wte^T", 1, M, C, V, "head_fwd"))
    out.append(("lm_head bwd  dY Wte", 1, M, V, C, "head_dx"))
    out.append(("lm_head bwd  dY^T H", 1, V, M, C, "head_dw"))
    return out


def make_op(kind, m, k, n, dtype):
    """A closure running the GEMM [m,k] x [k,n] with the operand layouts autograd would use.

    Every product writes into one preallocated output: a fresh [512, 50257] result is 100 MB,
    and glibc maps and faults it in on every call, which would time the page faults rather than
    the GEMM (training reuses its memory; zero keeps freed memory, the peers' `retain` allocator
    does the same)."""
    r = lambda *s: torch.randn(*s, dtype=dtype)  # noqa: E731
    out = torch.empty(m, n, dtype=dtype)
    if kind == "fwd":  # addmm(bias, X[m,k], W[k,n])
        b, x, w = r(n), r(m, k), r(k, n)
        return lambda: torch.addmm(b, x, w, out=out)
    if kind == "dx":  # dY[m,k] @ W^T, W stored [n,k] as Conv1D keeps it ([in, out])
        dy, w = r(m, k), r(n, k)
        return lambda: torch.mm(dy, w.t(), out=out)
    if kind == "dw":  # X^T @ dY[k,n], X stored [k,m] (the activation, [tokens, in])
        x, dy = r(k, m), r(k, n)
        return lambda: torch.mm(x.t(), dy, out=out)
    if kind == "head_fwd":  # H[m,k] @ Wte^T, Wte stored [n,k]
        h, wte = r(m, k), r(n, k)
        return lambda: torch.mm(h, wte.t(), out=out)
    if kind == "head_dx":  # dY[m,k] @ Wte, Wte stored [k,n] = [vocab, C]
        dy, wte = r(m, k), r(k, n)
        return lambda: torch.mm(dy, wte, out=out)
    if kind == "head_dw":  # dY^T @ H, dY stored [k,m] = [tokens, vocab]
        dy, h = r(k, m), r(k, n)
        return lambda: torch.mm(dy.t(), h, out=out)
    raise ValueError(kind)


def best_seconds(fn, reps: int, budget_s: float) -> float:
    """Best of at least 2 and at most `reps` timed calls, stopping after `budget_s`."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    # A slow GEMM's first call is as good a sample as any (its one-off costs are negligible);
    # counting it keeps the bf16 probe, where one head GEMM takes tens of seconds, affordable.
    samples = [first] if first > 0.5 else []
    spent = first
    while len(samples) < reps and (len(samples) < 2 or spent < budget_s):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        spent += dt
        samples.append(dt)
    return min(samples)


def probe(model: str, rows: int, dtypes, reps: int, budget_s: float):
    result = {"model": model, "rows": rows, "threads": torch.get_num_threads(), "dtypes": {}}
    for dname in dtypes:
        dtype = DTYPES[dname]
        table, total_flops, total_s = [], 0.0, 0.0
        for name, count, m, k, n, kind in gemm_list(model, rows):
            fn = make_op(kind, m, k, n, dtype)
            s = best_seconds(fn, reps, budget_s)
            flops = 2.0 * m * k * n
            table.append({"gemm": name, "m": m, "k": k, "n": n, "per_step": count,
                          "gflop": flops / 1e9, "ms": s * 1e3, "gflops": flops / s / 1e9})
            total_flops += count * flops
            total_s += count * s
        result["dtypes"][dname] = {"shapes": table, "step_gemm_gflop": total_flops / 1e9,
                                   "step_gemm_ms": total_s * 1e3,
                                   "weighted_gflops": total_flops / total_s / 1e9}
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--rows", type=int, default=512, help="tokens per rank per step (batch x seq)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=3.0, help="stop repeating a shape after this")
    args = p.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    json.dump(probe(args.model, args.rows, args.dtypes.split(","), args.reps, args.budget_s),
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
