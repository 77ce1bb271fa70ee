"""Trains the benchmark GPT-2 under one Python system ("configuration") and writes the result
as JSON, following the same protocol as zero's bench_peer_zero program.

  single process:  python run_peer.py --config torch ...
  two ranks:       python -m torch.distributed.run --standalone --nproc_per_node 2 \
                       run_peer.py --config ddp ...

Configurations (see README.md): torch, ddp, zero-redundancy-optimizer, fsdp2-no-reshard,
fsdp2-reshard, deepspeed-1, deepspeed-2, deepspeed-3.

Every configuration loads the same init file and reads the same token windows, with the same
AdamW hyper-parameters and clipping, so its per-step losses match the single-process run up
to reduction order. A step (forward, backward, clip, optimizer step, zero_grad) is timed between
barriers, so the time is the slowest rank's. On failure each rank writes a one-line reason to
OUT.error.rankR (and the traceback to stderr) and exits non-zero.
"""

import argparse
import json
import os
import sys
import time
import traceback

# Pin before torch starts its thread pools, so every thread of this rank (intra-op, gloo,
# DeepSpeed's) inherits the rank's core. torch.distributed.run sets LOCAL_RANK.
_LOCAL_RANK = os.environ.get("LOCAL_RANK")
if _LOCAL_RANK is not None:
    os.sched_setaffinity(0, {int(_LOCAL_RANK) % os.cpu_count()})
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # also DeepSpeed's OpenMP Adam kernel
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
# DeepSpeed's JIT-built ops live in the venv (built once by setup.sh), not in ~/.cache.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ds_config import BETAS, CLIP, EPS, LR, WEIGHT_DECAY, deepspeed_config  # noqa: E402
from gpt2_model import GPT2, preset  # noqa: E402

CONFIGS = {
    # name: (stage reported, needs 2 ranks)
    "torch": (None, False),
    "ddp": (0, True),
    "zero-redundancy-optimizer": (1, True),
    "fsdp2-no-reshard": (2, True),
    "fsdp2-reshard": (3, True),
    "deepspeed-1": (1, True),
    "deepspeed-2": (2, True),
    "deepspeed-3": (3, True),
}

DATA_WORLD = 2  # the data layout is always that of 2 ranks (the single process takes both)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, choices=sorted(CONFIGS))
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--init", required=True, help="fp32 safetensors with HF GPT-2 names")
    p.add_argument("--data", required=True, help="llm.c token file (uint16)")
    p.add_argument("--batch", type=int, default=2, help="rows per rank per step")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="measured steps after the warm-up")
    p.add_argument("--out", required=True)
    p.add_argument("--bucket-elements", type=float, default=5e7,
                   help="DeepSpeed reduce/allgather bucket size in elements")
    p.add_argument("--comm-profile", action="store_true",
                   help="after the measured steps, profile one extra (unrecorded) step and list "
                        "the collectives the process group ran in it")
    return p.parse_args()


# ---------------------------------------------------------------------------------------------
# Data


class Tokens:
    """llm.c token file: 256 int32 header (magic 20240520, version 1, count N), N uint16 ids."""

    def __init__(self, path: str, seq: int):
        with open(path, "rb") as f:
            header = torch.frombuffer(bytearray(f.read(256 * 4)), dtype=torch.int32)
            if int(header[0]) != 20240520 or int(header[1]) != 1:
                raise ValueError(f"{path}: not an llm.c token file (magic {int(header[0])})")
            n = int(header[2])
            raw = bytearray(f.read(2 * n))
        if len(raw) != 2 * n:
            raise ValueError(f"{path}: header says {n} tokens, file has {len(raw) // 2}")
        # uint16 -> int64; frombuffer has no uint16 on older torch, int16 & 0xFFFF does it.
        self.tokens = torch.frombuffer(raw, dtype=torch.int16).to(torch.int64) & 0xFFFF
        self.seq = seq
        self.windows = (n - 1) // seq
        if self.windows < 1:
            raise ValueError(f"{path}: {n} tokens is less than one window of {seq + 1}")

    def rows(self, first: int, count: int):
        """Rows for global sample indices first .. first+count-1: (input [count,T], target)."""
        T = self.seq
        idx = [((first + b) % self.windows) * T for b in range(count)]
        w = torch.stack([self.tokens[i:i + T + 1] for i in idx])
        return w[:, :T].contiguous(), w[:, 1:].contiguous()

    def batch(self, step: int, rank: int, world: int, rows: int):
        # Global sample g = (step*world + rank)*B + b: the single process (world 1, rows = 2B)
        # reads exactly both ranks' rows in rank order.
        return self.rows((step * world + rank) * rows, rows)


# ---------------------------------------------------------------------------------------------
# Systems. Each builder returns (Step, notes).


class Step:
    """One training step as three phases, so --comm-profile can tell which phase ran which
    collective; calling it runs them in order and returns the loss."""

    def __init__(self, forward, backward, update):
        self.forward, self.backward, self.update = forward, backward, update

    def __call__(self, x, y):
        loss = self.forward(x, y)
        self.backward(loss)
        self.update()
        return loss


def load_model(args):
    from safetensors.torch import load_file

    model = GPT2(preset(args.model))
    state = load_file(args.init)
    model.load_state_dict(state, strict=True)
    return model


def adamw(params):
    return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)


def autocast(dtype):
    # torch's native bf16 on CPU: parameters, gradients and optimizer state stay fp32; matmuls
    # (addmm, matmul, sdpa) run in bf16 inside the autocast region; the loss is fp32.
    if dtype == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def build_torch_like(args, model, wrap):
    """torch, ddp and zero-redundancy-optimizer: one module, plain backward, clip, AdamW."""
    if wrap == "torch":
        net, opt = model, adamw(model.parameters())
        notes = "single process, 2 threads, both ranks' rows as one batch; torch.optim.AdamW (foreach)"
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
        if wrap == "ddp":
            opt = adamw(net.parameters())
            notes = "DDP (gloo all_reduce of 25 MB buckets, overlapped with backward); AdamW (foreach)"
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, lr=LR,
                                          betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
            notes = ("DDP all_reduce + ZeroRedundancyOptimizer(AdamW): each rank updates its "
                     "parameter shard, then broadcasts it; clip on the full averaged gradients")
    notes += "; bf16 = torch.autocast(cpu, bf16) around forward+loss, fp32 weights/grads/state" \
        if args.dtype == "bf16" else ""

    def forward(x, y):
        with autocast(args.dtype):
            return net(x, y)

    def update():
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(forward, lambda loss: loss.backward(), update), notes


def build_fsdp2(args, model, reshard):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    kw = dict(mesh=mesh, reshard_after_forward=reshard)
    if args.dtype == "bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for block in model.transformer.h:
        fully_shard(block, **kw)
    # The root unit holds wte (embedding and tied head), wpe and ln_f.
    fully_shard(model, **kw)
    opt = adamw(model.parameters())
    notes = (f"FSDP2 fully_shard per block + root, reshard_after_forward={reshard} "
             "(gloo all_gather_into_tensor / reduce_scatter_tensor); AdamW (foreach) on DTensor shards")
    if args.dtype == "bf16":
        notes += ("; bf16 = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16): fp32 sharded "
                  "master weights and state, bf16 gathered weights, compute and gradient reduce-scatter")

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(model, lambda loss: loss.backward(), update), notes


def build_deepspeed(args, model, stage):
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    config = deepspeed_config(args.batch, args.dtype, stage, args.bucket_elements)
    # Stage 3 partitions the already-loaded weights at initialize (no zero.Init needed).
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    if stage == 3:
        # The tied head reads wte.weight in GPT2.logits, outside the wte module's forward;
        # DeepSpeed must gather it for GPT2's forward/backward as well.
        deepspeed.zero.register_external_parameter(engine.module, engine.module.transformer.wte.weight)
    acc = get_accelerator()
    notes = (f"DeepSpeed {deepspeed.__version__} ZeRO-{stage}, accelerator {acc.device_name()}, "
             f"comm backend {acc.communication_backend_name()}, "
             f"basic optimizer {type(engine.basic_optimizer).__name__}, "
             f"wrapper {type(engine.optimizer).__name__}, buckets {args.bucket_elements:.0e} elements")
    if args.dtype == "bf16":
        notes += "; bf16 = bf16 module weights/grads/communication, fp32 master weights and Adam state"

    # engine.step() clips, steps the optimizer and zeroes the gradients.
    return Step(engine, engine.backward, engine.step), notes


# ---------------------------------------------------------------------------------------------


def vm_hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def profile_collectives(step: Step, x, y):
    """Collectives of one step as the gloo process group records them (this sees DDP's C++
    reducer and DeepSpeed's calls alike), by phase:
    {"forward"|"backward"|"update": {op: {"calls": n, "elements": total input elements}}}.
    An operation belongs to the phase during which it started (DDP's all-reduces run on gloo's
    threads while backward is still going)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("phase:forward"):
            loss = step.forward(x, y)
        with record_function("phase:backward"):
            step.backward(loss)
        with record_function("phase:update"):
            step.update()
    events = prof.events()
    phases = [(ev.time_range.start, ev.time_range.end, ev.name.split(":", 1)[1])
              for ev in events if ev.name.startswith("phase:")]
    result = {}
    for ev in events:
        if not ev.name.startswith("gloo:"):  # what the backend ran (c10d:: wrappers duplicate it)
            continue
        start = ev.time_range.start
        phase = next((p for s, e, p in phases if s <= start <= e), "after")
        entry = result.setdefault(phase, {}).setdefault(ev.name.removeprefix("gloo:"),
                                                        {"calls": 0, "elements": 0})
        entry["calls"] += 1
        for shape in ev.input_shapes or []:
            if shape and all(isinstance(d, int) for d in shape):
                n = 1
                for d in shape:
                    n *= d
                entry["elements"] += n
    return result


def run(args):
    stage, distributed = CONFIGS[args.config]
    if distributed:
        if args.config.startswith("deepspeed"):
            import deepspeed

            deepspeed.init_distributed(dist_backend="gloo")
        else:
            dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        if world != DATA_WORLD:
            raise RuntimeError(f"{args.config} expects {DATA_WORLD} ranks, got {world}")
        torch.set_num_threads(1)
        rows = args.batch
    else:
        world, rank = 1, 0
        torch.set_num_threads(DATA_WORLD)  # the two cores the two ranks would have
        rows = args.batch * DATA_WORLD

    torch.manual_seed(0)  # nothing random is drawn (dropout 0); set for determinism anyway
    data = Tokens(args.data, args.seq)
    model = load_model(args)
    if args.config == "torch" or args.config in ("ddp", "zero-redundancy-optimizer"):
        step_fn, notes = build_torch_like(args, model, args.config)
    elif args.config.startswith("fsdp2"):
        step_fn, notes = build_fsdp2(args, model, reshard=args.config == "fsdp2-reshard")
    else:
        step_fn, notes = build_deepspeed(args, model, stage)

    barrier = dist.barrier if distributed else (lambda: None)
    losses, step_ms = [], []
    for step in range(args.warmup + args.steps):
        x, y = data.batch(step, rank, world, rows)
        barrier()
        start = time.perf_counter()
        loss = step_fn(x, y)
        barrier()
        ms = (time.perf_counter() - start) * 1e3
        value = loss.detach().float().reshape(1).clone()
        if distributed:
            dist.all_reduce(value)
            value /= world
        losses.append(float(value))
        if step >= args.warmup:
            step_ms.append(ms)

    # Peak RSS is read before the optional profiled step, which is not part of the benchmark.
    rss = torch.tensor([vm_hwm_bytes()], dtype=torch.int64)
    if distributed:
        gathered = [torch.zeros_like(rss) for _ in range(world)]
        dist.all_gather(gathered, rss)
        rss_all = [int(t) for t in gathered]
    else:
        rss_all = [int(rss)]
    collectives = None
    if args.comm_profile:
        collectives = profile_collectives(step_fn, *data.batch(args.warmup + args.steps, rank, world, rows))
    if rank == 0:
        result = {
            "system": "torch" if args.config in ("torch", "ddp", "zero-redundancy-optimizer")
            or args.config.startswith("fsdp2") else "deepspeed",
            "config": args.config,
            "stage": stage,
            "dtype": args.dtype,
            "model": args.model,
            "world": DATA_WORLD,
            "processes": world,
            "batch": args.batch,
            "seq": args.seq,
            "threads_per_rank": torch.get_num_threads(),
            "warmup": args.warmup,
            "losses": losses,
            "step_ms": step_ms,
            "peak_rss_bytes": rss_all,
            "torch_version": torch.__version__,
            "notes": notes,
        }
        if collectives is not None:
            result["collectives_one_step"] = collectives
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.out)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def main():
    args = parse_args()
    try:
        run(args)
    except BaseException as e:  # noqa: BLE001 - report any failure as one line for the driver
        traceback.print_exc()
        rank = os.environ.get("RANK", "0")
        msg = f"{type(e).__name__}: {e}".strip().splitlines()
        with open(f"{args.out}.error.rank{rank}", "w") as f:
            f.write((msg[0] if msg else type(e).__name__)[:500] + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
