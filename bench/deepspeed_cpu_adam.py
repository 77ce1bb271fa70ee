#!/usr/bin/env python3
"""Speed of DeepSpeed's own CPU optimizers (DeepSpeedCPUAdam, DeepSpeedCPUAdagrad,
DeepSpeedCPULion: the cpu_adam, cpu_adagrad and cpu_lion C++ ops) on CPU tensors.

    bench/deepspeed_cpu_adam.py [--numel 100000000] [--steps 5] [--warmup 1]
                                [--threads N (default: all CPUs)] [--adamw | --adam]
                                [--optimizer adam|adagrad|lion] [--dtype fp32|bf16]

--optimizer adagrad: lr 1e-2, eps 1e-10, no weight decay; lion: lr 1e-3, betas (0.9, 0.999),
weight decay 0.01 (each DeepSpeed's defaults but the decay, as bench_offload steps them).

One flat parameter of --numel elements with a gradient of the same dtype (seeded randn * 0.01),
stepped --warmup times untimed (the first step also allocates exp_avg/exp_avg_sq) and --steps
times timed. --dtype bf16: a bf16 parameter and gradient, fp32 moments (DeepSpeed's
fp32_optimizer_states default); DeepSpeed keeps no fp32 master copy then, so it moves 22 bytes
per element where zero's bf16 step (fp32 master, bf16 gradient and copy) moves 30.
Prints the deepspeed version and one line (deepspeed_cpu_adagrad / deepspeed_cpu_lion for
the others)
    deepspeed_cpu_adam elements_per_s=... numel=... steps=... threads=... seconds_per_step=... simd=...
which docs/benchmarks.md sets beside zero's own CPU optimizer step on the same machine.

Needs deepspeed==0.19.8 (pip) and a C++ compiler and ninja: the op is JIT-built on first use into
$TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions/py<ver>_<cuda>/cpu_adam); no
DS_BUILD_CPU_ADAM is needed. DeepSpeed builds it with -march=native -fopenmp and -D__AVX512__ or
-D__AVX256__ from py-cpuinfo's CPU flags; simd= reports that choice. DS_ACCELERATOR defaults to
cpu here, so a GPU host builds the same CPU-only op. Exit status 2 if the op cannot be built.
"""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--numel", type=int, default=100_000_000)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--warmup", type=int, default=1)
parser.add_argument("--threads", type=int, default=os.cpu_count())
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--adamw", dest="adamw", action="store_true", default=True)
mode.add_argument("--adam", dest="adamw", action="store_false")
parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
parser.add_argument("--optimizer", choices=["adam", "adagrad", "lion"], default="adam")
args = parser.parse_args()
if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.numel < 1:
    parser.error("--numel, --steps and --threads must be >= 1, --warmup >= 0")

# Before torch/deepspeed load their OpenMP runtime.
os.environ["OMP_NUM_THREADS"] = str(args.threads)
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

torch.set_num_threads(args.threads)
try:
    import deepspeed
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.lion import DeepSpeedCPULion
    from deepspeed.ops.op_builder import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder
except Exception as e:  # noqa: BLE001
    print(f"deepspeed_cpu_adam: cannot import deepspeed: {e!r}", file=sys.stderr)
    sys.exit(2)
print(f"deepspeed_version={deepspeed.__version__} torch_version={torch.__version__}")

builder = {"adam": CPUAdamBuilder, "adagrad": CPUAdagradBuilder,
           "lion": CPULionBuilder}[args.optimizer]()
simd = builder.simd_width().removeprefix("-D__").removesuffix("__")  # AVX512, AVX256, SCALAR, ...
start = time.perf_counter()
try:
    op = builder.load(verbose=False)
except Exception as e:  # noqa: BLE001
    cause = f" (caused by {e.__cause__!r})" if e.__cause__ else ""
    print(f"deepspeed_cpu_{args.optimizer}: cannot build/load the op: {e!r}{cause}",
          file=sys.stderr)
    sys.exit(2)
load_s = time.perf_counter() - start
so = getattr(op, "__file__", "?")
built = so != "?" and os.path.getmtime(so) >= time.time() - load_s - 1
print(f"cpu_{args.optimizer}_op {'built' if built else 'loaded'}_in_s={load_s:.1f} path={so}")

torch.manual_seed(0)
dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
param = torch.nn.Parameter((torch.randn(args.numel, dtype=torch.float32) * 0.01).to(dtype))
param.grad = (torch.randn(args.numel, dtype=torch.float32) * 0.01).to(dtype)
if args.optimizer == "adam":
    opt = DeepSpeedCPUAdam([param], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                           adamw_mode=args.adamw)
elif args.optimizer == "adagrad":
    opt = DeepSpeedCPUAdagrad([param], lr=1e-2, eps=1e-10, weight_decay=0)
else:
    opt = DeepSpeedCPULion([param], lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
for _ in range(args.warmup):
    opt.step()
start = time.perf_counter()
for _ in range(args.steps):
    opt.step()
per_step = (time.perf_counter() - start) / args.steps

mode = {"adam": "adamw" if args.adamw else "adam"}.get(args.optimizer, args.optimizer)
print(f"deepspeed_cpu_{args.optimizer} elements_per_s={args.numel / per_step:.4g} "
      f"numel={args.numel} steps={args.steps} threads={args.threads} "
      f"seconds_per_step={per_step:.4f} simd={simd} mode={mode} dtype={args.dtype}")
