"""Benchmark driver: trains the same GPT-2 under zero and its Python peers, round by round, and
writes every run's JSON plus report.md. See bench/peers/README.md.

  build/peers-venv/bin/python bench/peers/run_all.py --model gpt2-mini --dtypes fp32,bf16 \
      --rounds 3 --warmup 2 --steps 5 --bf16-rounds 1 --bf16-steps 2 --allocators default,retain

Per dtype, each round launches every (configuration, allocator) once, in an order rotated by
one per round, so drift in the machine's speed hits all configurations alike. Only the step
times the programs report are used (start-up is not timed). A configuration that fails is
reported with a one-line reason; the others go on.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from ds_config import deepspeed_config  # noqa: E402
from gpt2_model import count_parameters, preset, write_init  # noqa: E402

PEERS = ["torch", "ddp", "zero-redundancy-optimizer", "fsdp2-no-reshard", "fsdp2-reshard",
         "deepspeed-1", "deepspeed-2", "deepspeed-3"]
# zero-S trains with zero's fused LM head and loss (GPT2Impl::forward_loss); zero-S-plain-head
# computes the logits and then the loss, as the Python systems do, so the table separates what
# the engine gains from what the model code gains.
# zero-3-fp32-compute (bf16 only): bf16 shards and collectives, fp32 compute (zero's
# compute_data_type, Note [Compute dtype] in include/zero/config.h).
ZEROS = ["zero-0", "zero-1", "zero-2", "zero-3",
         "zero-0-plain-head", "zero-1-plain-head", "zero-2-plain-head", "zero-3-plain-head",
         "zero-3-fp32-compute"]
BF16_ONLY = ["zero-3-fp32-compute"]
COMPUTE_DTYPE = {"zero-3-fp32-compute": "fp32"}  # MFU is against the dtype the GEMMs run in
ALL = PEERS + ZEROS
STAGE = {"torch": None, "ddp": 0, "zero-redundancy-optimizer": 1, "fsdp2-no-reshard": 2,
         "fsdp2-reshard": 3, "deepspeed-1": 1, "deepspeed-2": 2, "deepspeed-3": 3}
STAGE.update({z: int(z.split("-")[1]) for z in ZEROS})
# The peers zero is compared with at each stage (ratio section).
STAGE_PEERS = {0: ["ddp"], 1: ["zero-redundancy-optimizer", "deepspeed-1"],
               2: ["fsdp2-no-reshard", "deepspeed-2"], 3: ["fsdp2-reshard", "deepspeed-3"]}
ALLOCATORS = {
    "default": {},
    # glibc keeps freed memory instead of returning it to the OS (no mmap for large blocks,
    # no trimming): the same effect zero's keep_freed_host_memory() has through mallopt.
    "retain": {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "1073741824",
               "MALLOC_TOP_PAD_": "268435456"},
}
WORLD = 2
CORES = 2


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    for d in ("fp32", "bf16"):
        p.add_argument(f"--{d}-rounds", type=int, help=f"--rounds for {d} only")
        p.add_argument(f"--{d}-warmup", type=int, help=f"--warmup for {d} only")
        p.add_argument(f"--{d}-steps", type=int, help=f"--steps for {d} only")
        p.add_argument(f"--{d}-allocators", help=f"--allocators for {d} only")
    p.add_argument("--batch", type=int, default=2, help="rows per rank per step")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--bucket-elements", type=float, default=5e7,
                   help="reduce/allgather bucket size in elements (DeepSpeed's and zero's config)")
    p.add_argument("--allocators", default="default,retain")
    p.add_argument("--configs", default="all", help="'all' or a comma list of: " + ", ".join(ALL))
    p.add_argument("--zero-bin", default="build/bench/bench_peer_zero")
    p.add_argument("--data", default="data/tokens/moby_dick_train.bin")
    p.add_argument("--out", default="build/peers-results")
    p.add_argument("--python", default=None, help="interpreter for the peers (default: the venv's)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per launch")
    p.add_argument("--no-probe-after", action="store_true", help="skip the GEMM probe after the last round")
    p.add_argument("--report-only", metavar="RUNS_JSON[,RUNS_JSON...]",
                   help="launch nothing: write --out/report.md from earlier runs.json files (merged, "
                        "e.g. an fp32 and a bf16 run) and the gemm-probe-*.json files beside them")
    p.add_argument("--probe", action="store_true",
                   help="with --report-only: run the GEMM probe now as well (on a quiet machine)")
    p.add_argument("--comm-profile", action="store_true",
                   help="let each peer profile one extra step and list its collectives")
    return p.parse_args()


def log(msg):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def per_dtype(args, dtype, name):
    v = getattr(args, f"{dtype}_{name}")
    return getattr(args, name) if v is None else v


def child_env(args, allocator, threads):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.update(OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads), DS_ACCELERATOR="cpu",
               TORCH_EXTENSIONS_DIR=os.path.join(os.path.dirname(os.path.dirname(args.python)),
                                                 "torch_extensions"),
               PATH=os.path.dirname(args.python) + os.pathsep + env.get("PATH", ""))
    for k in ALLOCATORS["retain"]:
        env.pop(k, None)  # "default" means nothing set, even if the caller's shell had them
    env.update(ALLOCATORS[allocator])
    return env


def command(args, config, dtype, allocator, init, out, warmup, steps):
    common = ["--dtype", dtype, "--model", args.model, "--init", init, "--data", args.data,
              "--batch", str(args.batch), "--seq", str(args.seq), "--warmup", str(warmup),
              "--steps", str(steps), "--out", out]
    if config in ZEROS:
        xs = []
        for k, v in [("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_NUM_THREADS", "1")] + list(ALLOCATORS[allocator].items()):
            xs += ["-x", f"{k}={v}"]
        # DeepSpeed's own config for this stage and dtype, so both run the same settings.
        stage = STAGE[config]
        ds_config = f"{out}.ds_config.json"
        settings = deepspeed_config(args.batch, dtype, stage, args.bucket_elements)
        if config.endswith("-fp32-compute"):
            settings["compute_data_type"] = "fp32"  # a zero extension; DeepSpeed ignores it
        with open(ds_config, "w") as f:
            json.dump(settings, f)
        head = ["--head", "plain" if config.endswith("-plain-head") else "fused"]
        return (["mpirun", "--allow-run-as-root", "-np", str(WORLD), "--bind-to", "core"] + xs +
                [args.zero_bin, "--stage", str(stage), "--config", ds_config] + head + common), 1
    peer = [os.path.join(HERE, "run_peer.py"), "--config", config,
            "--bucket-elements", str(args.bucket_elements)] + common
    if args.comm_profile:
        peer.append("--comm-profile")
    if config == "torch":
        return [args.python] + peer, CORES
    return ([args.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD)]
            + peer), 1


def failure_reason(out, rc, stderr_path):
    """One line: the program's own error file (rank 0 first), else the last error-like line of
    its stderr, else the exit status."""
    for r in range(WORLD):
        path = f"{out}.error.rank{r}"
        if os.path.exists(path):
            with open(path) as f:
                line = f.read().strip()
            if line:
                return f"rank {r}: {line}"
    try:
        with open(stderr_path, errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    # Drop the launchers' own banners (OpenMPI's between dashed rules, torchrun's between
    # '=' rules) so the program's message wins over "mpirun detected that ...".
    text = re.sub(r"^-{20,}$.*?^-{20,}$", "", text, flags=re.S | re.M)
    text = re.sub(r"^={20,}$.*?^={20,}$", "", text, flags=re.S | re.M)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"Error|error|Exception|what\(\)|Killed|Aborted|Segmentation", ln) and "Traceback" not in ln:
            return ln[:300]
    return f"exit status {rc}" + (f": {lines[-1][:200]}" if lines else "")


def launch(args, config, dtype, allocator, rnd, init, warmup, steps):
    tag = f"{config}.{allocator}.r{rnd}"
    raw = os.path.join(args.out, "raw", dtype)
    os.makedirs(raw, exist_ok=True)
    out = os.path.join(raw, tag + ".json")
    for stale in [out] + [f"{out}.error.rank{r}" for r in range(WORLD)]:
        if os.path.exists(stale):
            os.remove(stale)
    cmd, threads = command(args, config, dtype, allocator, init, out, warmup, steps)
    logbase = os.path.join(raw, tag)
    start = time.time()
    with open(logbase + ".stdout", "w") as so, open(logbase + ".stderr", "w") as se:
        so.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        so.flush()
        # Own session, so a timed-out launch can be ended with all its ranks (the launcher's
        # process group), not just the launcher.
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(args, allocator, threads), stdout=so,
                                stderr=se, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = None
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    pass
    wall = time.time() - start
    record = {"config": config, "dtype": dtype, "allocator": allocator, "round": rnd,
              "wall_s": wall, "path": os.path.relpath(out, args.out)}
    if rc == 0 and os.path.exists(out):
        with open(out) as f:
            record["result"] = json.load(f)
        ms = record["result"]["step_ms"]
        log(f"  {dtype} r{rnd} {config:26s} {allocator:7s} ok   median {statistics.median(ms):9.1f} ms"
            f"  ({wall:.0f} s wall)")
    else:
        record["error"] = (f"timed out after {args.timeout:.0f} s" if rc is None
                           else failure_reason(out, rc, logbase + ".stderr"))
        log(f"  {dtype} r{rnd} {config:26s} {allocator:7s} FAIL {record['error']}")
    return record


def run_probe(args, dtypes, label):
    rows = args.batch * args.seq
    cmd = [args.python, os.path.join(HERE, "gemm_probe.py"), "--model", args.model, "--rows", str(rows),
           "--dtypes", ",".join(dtypes)]
    log(f"GEMM probe ({label}): {' '.join(dtypes)}, 1 thread on core 0")
    res = subprocess.run(cmd, cwd=REPO, env=child_env(args, "default", 1), capture_output=True,
                         text=True, timeout=args.timeout)
    if res.returncode != 0:
        log(f"  GEMM probe failed: {res.stderr.strip().splitlines()[-1:]}")
        return None
    probe = json.loads(res.stdout)
    with open(os.path.join(args.out, f"gemm-probe-{label}.json"), "w") as f:
        json.dump(probe, f, indent=1)
    for d, v in probe["dtypes"].items():
        log(f"  {d}: FLOP-weighted {v['weighted_gflops']:.2f} GFLOP/s per core")
    return probe


def machine():
    info = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def versions(python):
    code = ("import json, importlib.metadata as m, torch\n"
            "v = {'torch': torch.__version__}\n"
            "try: v['deepspeed'] = m.version('deepspeed')\n"
            "except Exception: v['deepspeed'] = 'not installed'\n"
            "print(json.dumps(v))")
    res = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(res.stdout) if res.returncode == 0 else {"torch": "?", "deepspeed": "?"}


# ---------------------------------------------------------------------------------------------
# Summary and report


def flops_per_token(model, seq):
    c = preset(model)
    n = count_parameters(c)
    head = c.vocab_size * c.n_embd
    attn = 12 * c.n_layer * c.n_embd * seq
    return 6 * (n["non_embedding"] + head) + attn, n


def peak_gemm_rate(probes, dtype, sources):
    """FLOP/s of the machine: CORES x the fastest single GEMM measured on one core in `dtype`,
    over the probes of the runs in `sources` and any probe taken at report time. The closest
    this machine gets to its hardware peak, so MFU stays comparable with the usual definition
    (the FLOP-weighted rate of a step's GEMMs is lower: small shapes run below peak). A merged
    report takes each run's own probes: the shared host's speed drifts between runs."""
    rates = [max(s["gflops"] for s in p["dtypes"][dtype]["shapes"])
             for _, p in probes if p and dtype in p["dtypes"] and p.get("source") in sources | {None}]
    return max(rates) * 1e9 * CORES if rates else None


def summarize(records, args, probes):
    """{(dtype, allocator): {config: row}} plus the reference losses per dtype."""
    fpt, _ = flops_per_token(args.model, args.seq)
    tokens_per_step = WORLD * args.batch * args.seq
    reference = {}
    for r in records:  # torch single-process losses, the parity reference
        if r["config"] == "torch" and "result" in r and r["dtype"] not in reference:
            reference[r["dtype"]] = r["result"]["losses"]
    rows = {}
    for r in records:
        if r.get("reference_only"):
            continue
        key = (r["dtype"], r["allocator"])
        row = rows.setdefault(key, {}).setdefault(r["config"], {"runs": 0, "failed": [], "step_ms": [],
                                                               "rss": None, "parity": None, "notes": ""})
        row["runs"] += 1
        if "result" not in r:
            row["failed"].append(r["error"])
            continue
        res = r["result"]
        row["step_ms"] += res["step_ms"]
        rss = res.get("peak_rss_bytes") or []
        row["rss"] = rss if row["rss"] is None else [max(a, b) for a, b in zip(row["rss"], rss)]
        row["notes"] = res.get("notes", "")
        if "collectives_one_step" in res:
            row["collectives"] = res["collectives_one_step"]
        ref = reference.get(r["dtype"])
        if ref:
            n = min(len(ref), len(res["losses"]))
            dev = max(abs(a - b) / abs(b) for a, b in zip(res["losses"][:n], ref[:n]))
            row["parity"] = dev if row["parity"] is None else max(row["parity"], dev)
    for (dtype, _), configs in rows.items():
        sources = {r.get("source") for r in records if r["dtype"] == dtype}
        for config, row in configs.items():
            if row["step_ms"]:
                ms = statistics.median(row["step_ms"])
                row["median_ms"], row["min_ms"], row["max_ms"] = ms, min(row["step_ms"]), max(row["step_ms"])
                row["tokens_per_s"] = tokens_per_step / (ms / 1e3)
                peak = peak_gemm_rate(probes, COMPUTE_DTYPE.get(config, dtype), sources)
                row["mfu"] = fpt * row["tokens_per_s"] / peak if peak else None
    return rows, reference


def fmt(v, spec, none="–"):
    return none if v is None else format(v, spec)


def report(args, records, probes, skipped, started, versions_, info):
    rows, reference = summarize(records, args, probes)
    fpt, n = flops_per_token(args.model, args.seq)
    c = preset(args.model)
    L = []
    L.append(f"# zero vs Python peers: {args.model}, {WORLD} ranks x 1 core\n")
    L.append(f"- date: {started:%Y-%m-%d %H:%M:%S %Z}".rstrip())
    cmd = [os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO) else sys.executable]
    L.append(f"- command: `{' '.join(shlex.quote(a) for a in cmd + sys.argv)}` (cwd `{REPO}`)")
    L.append(f"- machine: {info.get('Model name', '?')}, {info.get('CPU(s)', '?')} CPUs; "
             f"flags: {info.get('Flags', '?')}")
    L.append(f"- torch {versions_.get('torch')}, deepspeed {versions_.get('deepspeed')}, "
             f"python {sys.version.split()[0]}")
    L.append(f"- data: `{args.data}`; {args.batch} rows x {args.seq} tokens per rank per step, "
             f"{WORLD * args.batch * args.seq} tokens per step; init: seed 1234, shared safetensors file")
    L.append("- training: AdamW lr 3e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.1 on all "
             "parameters, clip global norm 1.0; step = forward + backward + clip + optimizer step, "
             "timed between barriers (the slowest rank)")
    L.append(f"- model FLOPs per token = 6 x (non-embedding parameters {n['non_embedding']:,} + head "
             f"V x C {c.vocab_size * c.n_embd:,}) + 12 x n_layer x C x T ({12 * c.n_layer * c.n_embd * args.seq:,})"
             f" = {fpt / 1e6:.1f} MFLOP; MFU = that x tokens/s / ({CORES} cores x the fastest "
             "single-core GEMM rate in the dtype the GEMMs run in, in the run's own probes below: the machine's "
             "measured peak)")
    L.append("- loss parity: max over steps of |loss - torch single-process loss| / torch loss, same dtype")
    L.append("- allocators: `default` = nothing set; `retain` = MALLOC_MMAP_THRESHOLD_=1073741824 "
             "MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=268435456 for every process")
    if skipped:
        L.append(f"- skipped: {'; '.join(skipped)}")
    L.append("")

    for dtype in [d for d in args.dtypes.split(",")]:
        L.append(f"## {dtype}\n")
        # Counts come from the records, so a report merged from earlier runs states what ran.
        ran = [r for r in records if r["dtype"] == dtype and not r.get("reference_only")]
        if not ran:
            L.append("Not run.\n")
            continue
        done = [r["result"] for r in ran if "result" in r]
        warmups = sorted({res.get("warmup") for res in done if res.get("warmup") is not None})
        steps = sorted({len(res["step_ms"]) for res in done})
        L.append(f"{max(r['round'] for r in ran)} round(s), {'/'.join(map(str, warmups)) or '?'} warm-up + "
                 f"{'/'.join(map(str, steps)) or '?'} measured steps per launch; median and min–max over all "
                 "measured steps of all rounds; peak RSS = VmHWM, max over rounds.\n")
        for allocator in [a for a in ALLOCATORS if any(r["allocator"] == a for r in ran)]:
            configs = rows.get((dtype, allocator))
            if not configs:
                continue
            L.append(f"### {dtype}, allocator `{allocator}`\n")
            L.append("| configuration | stage | median step ms | min–max ms | tokens/s | peak RSS MiB per rank "
                     "| loss parity | MFU |")
            L.append("|---|---|---|---|---|---|---|---|")
            for name in [x for x in ALL if x in configs]:
                row = configs[name]
                stage = "–" if STAGE[name] is None else str(STAGE[name])
                if "median_ms" not in row:
                    L.append(f"| {name} | {stage} | failed: {row['failed'][0]} | | | | | |")
                    continue
                rss = " / ".join(f"{b / 2**20:.0f}" for b in row["rss"] or [])
                fails = f" ({len(row['failed'])} of {row['runs']} launches failed)" if row["failed"] else ""
                L.append(f"| {name}{fails} | {stage} | {row['median_ms']:.1f} | {row['min_ms']:.1f}–{row['max_ms']:.1f} "
                         f"| {row['tokens_per_s']:.0f} | {rss} | {fmt(row['parity'], '.1e')} "
                         f"| {fmt(row['mfu'] and 100 * row['mfu'], '.1f')}{'%' if row.get('mfu') else ''} |")
            L.append("")
            L.append("Ratio (fastest peer's median / zero's median; above 1: zero is faster). "
                     "zero: its fused LM head and loss; zero, plain head: logits then loss, "
                     "the Python systems' model code:\n")
            L.append("| stage | fastest peer | peer ms | zero ms | fastest peer / zero | "
                     "zero, plain head ms | fastest peer / zero, plain head |")
            L.append("|---|---|---|---|---|---|---|")
            for stage, peers in STAGE_PEERS.items():
                z = configs.get(f"zero-{stage}", {}).get("median_ms")
                zp = configs.get(f"zero-{stage}-plain-head", {}).get("median_ms")
                cands = [(configs[p]["median_ms"], p) for p in peers if configs.get(p, {}).get("median_ms")]
                best = min(cands) if cands else None
                ratio = f"{best[0] / z:.2f}" if (z and best) else "–"
                ratio_plain = f"{best[0] / zp:.2f}" if (zp and best) else "–"
                L.append(f"| {stage} | {best[1] if best else '–'} | {fmt(best and best[0], '.1f')} | "
                         f"{fmt(z, '.1f')} | {ratio} | {fmt(zp, '.1f')} | {ratio_plain} |")
            L.append("")

    if any((row.get("mfu") or 0) > 1 for configs in rows.values() for row in configs.values()):
        L.append("MFU above 100% means the GEMM probe ran slower than the training did: the "
                 "machine was busier during the probe. Rerun it on a quiet machine "
                 "(`--report-only --probe`).\n")
    for dtype, ref in reference.items():
        L.append(f"Reference losses (torch, {dtype}): " + ", ".join(f"{x:.6f}" for x in ref) + "\n")

    L.append("## GEMM probe (1 thread, 1 core, the model's own GEMM shapes per rank step)\n")
    for label, probe in probes:
        if not probe:
            continue
        for dtype, v in probe["dtypes"].items():
            L.append(f"### {label}, {dtype}: FLOP-weighted {v['weighted_gflops']:.2f} GFLOP/s per core "
                     f"({v['step_gemm_gflop']:.1f} GFLOP of GEMMs per rank step take {v['step_gemm_ms']:.0f} ms)\n")
            L.append("| GEMM | m x k x n | per step | ms | GFLOP/s |")
            L.append("|---|---|---|---|---|")
            for s in v["shapes"]:
                L.append(f"| {s['gemm']} | {s['m']}x{s['k']}x{s['n']} | {s['per_step']} | {s['ms']:.2f} | {s['gflops']:.1f} |")
            L.append("")

    L.append("## What each configuration ran (from the programs' notes)\n")
    seen = set()
    for (dtype, _), configs in sorted(rows.items()):
        for name in [x for x in ALL if x in configs]:
            row = configs[name]
            if (dtype, name) in seen or not row["notes"]:
                continue
            seen.add((dtype, name))
            coll = ""
            if row.get("collectives"):
                coll = "; gloo collectives in one step: " + "; ".join(
                    f"{phase}: " + ", ".join(f"{op} x{v['calls']} ({v['elements'] / 1e6:.2f}M elements)"
                                             for op, v in ops.items())
                    for phase, ops in row["collectives"].items())
            notes = row["notes"] if len(row["notes"]) <= 400 else row["notes"][:400] + " … (see the raw JSON)"
            L.append(f"- {name} ({dtype}): {notes}{coll}")
    L.append("")
    path = os.path.join(args.out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(L))
    return path


def report_only(args, started, vers, info):
    records, probes = [], []
    for path in args.report_only.split(","):
        here = os.path.dirname(os.path.abspath(path))
        with open(path) as f:
            records += [dict(r, source=here) for r in json.load(f)]
        for name in sorted(os.listdir(here)):
            if name.startswith("gemm-probe-") and name.endswith(".json"):
                with open(os.path.join(here, name)) as f:
                    probe = dict(json.load(f), source=here)
                probes.append((f"{os.path.relpath(here, REPO)}, {name[len('gemm-probe-'):-5]}", probe))
    if args.probe:
        probes.append(("at report time", run_probe(args, args.dtypes.split(","), "report")))
    log(f"report: {report(args, records, probes, [], started, vers, info)}")


def main():
    args = parse_args()
    started = datetime.datetime.now().astimezone()
    os.chdir(REPO)
    if args.python is None:
        venv = os.path.join(REPO, "build", "peers-venv", "bin", "python")
        args.python = venv if os.path.exists(venv) else sys.executable
    args.zero_bin = os.path.abspath(args.zero_bin)
    args.data = os.path.abspath(args.data)
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    configs = ALL if args.configs == "all" else [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in ALL]
    if unknown:
        sys.exit(f"unknown configuration(s): {', '.join(unknown)}; known: {', '.join(ALL)}")
    for d in ("fp32", "bf16"):
        if any(a not in ALLOCATORS for a in per_dtype(args, d, "allocators").split(",")):
            sys.exit(f"allocators must be among {', '.join(ALLOCATORS)}")
    dtypes = args.dtypes.split(",")
    skipped = []
    if any(c in ZEROS for c in configs) and not os.access(args.zero_bin, os.X_OK):
        msg = f"zero configurations (binary {os.path.relpath(args.zero_bin, REPO)} not built)"
        log(f"skipping {msg}")
        skipped.append(msg)
        configs = [c for c in configs if c not in ZEROS]

    info, vers = machine(), versions(args.python)
    if args.report_only:
        report_only(args, started, vers, info)
        return
    log(f"{info.get('Model name', '?')}; torch {vers['torch']}, deepspeed {vers['deepspeed']}; python {args.python}")
    init = os.path.join(args.out, f"init-{args.model}.safetensors")
    write_init(args.model, init)
    log(f"initial weights: {init}")

    # Probe every dtype a GEMM runs in (bf16 configurations computing in fp32 need fp32's peak).
    probe_dtypes = dtypes + sorted({COMPUTE_DTYPE[c] for c in configs if c in COMPUTE_DTYPE
                                    and "bf16" in dtypes} - set(dtypes))
    probes = [("before round 1", run_probe(args, probe_dtypes, "before"))]
    records = []
    for dtype in dtypes:
        rounds, warmup, steps = (per_dtype(args, dtype, k) for k in ("rounds", "warmup", "steps"))
        allocators = per_dtype(args, dtype, "allocators").split(",")
        items = [(c, a) for c in configs for a in allocators
                 if dtype == "bf16" or c not in BF16_ONLY]
        if "torch" not in configs:
            # The single-process run is the loss-parity reference; run it once, untabled.
            records.append(launch(args, "torch", dtype, "default", 0, init, warmup, steps))
            records[-1]["reference_only"] = True
        for rnd in range(1, rounds + 1):
            # Rotate by an equal share per round, so over the rounds each configuration runs
            # early, midway and late; the allocators of a configuration stay adjacent.
            shift = (rnd - 1) * len(items) // rounds
            order = items[shift:] + items[:shift]
            log(f"{dtype} round {rnd}/{rounds}: {len(order)} launches")
            for config, allocator in order:
                records.append(launch(args, config, dtype, allocator, rnd, init, warmup, steps))
                with open(os.path.join(args.out, "runs.json"), "w") as f:
                    json.dump(records, f, indent=1)
        # A report after each dtype, so a long bf16 part still leaves the fp32 one behind.
        report(args, records, probes, skipped, started, vers, info)
    if not args.no_probe_after:
        probes.append(("after the last round", run_probe(args, probe_dtypes, "after")))
    path = report(args, records, probes, skipped, started, vers, info)
    log(f"report: {path}")


if __name__ == "__main__":
    main()
