#!/usr/bin/env bash
# zero-train's tokens/s for every compute dtype (fp32, bf16, fp16) x ZeRO stage 0-3 on this
# CPU, and the share of the step in GEMMs (docs/benchmarks.md, "Every dtype at every stage"):
# gpt2-mini by default, 2 ranks of one thread, micro-batch 2 x 256, no accumulation, AdamW.
# Rounds interleave the configurations (the shared machine's drift hits each alike); tokens/s
# is the median over rounds of each run's median step (the first two steps left out). With
# `perf` installed, the last round runs under `perf record` (both ranks) and the GEMM share is
# the share of its samples, over the last 60 % of the run's time (start-up left out), in GEMM
# kernels: MKL's and oneDNN's symbols, and code without a symbol (oneDNN's JIT kernels, which
# perf cannot name).
#   bench/dtype_stage_table.sh [MODEL=gpt2-mini] [STEPS=10] [ROUNDS=2] [DTYPES=fp32,bf16,fp16]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-gpt2-mini}"
steps="${2:-10}"
rounds="${3:-2}"
dtypes="${4:-fp32,bf16,fp16}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work" "$dtypes" <<'PY'
import json, sys
work, dtypes = sys.argv[1], sys.argv[2].split(",")
for dtype in dtypes:
    for stage in range(4):
        c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
             "gradient_clipping": 1.0,
             "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
             "zero_optimization": {"stage": stage}}
        if dtype == "bf16":
            c["bf16"] = {"enabled": True}
        elif dtype == "fp16":
            c["fp16"] = {"enabled": True}
        elif dtype != "fp32":
            sys.exit(f"unknown dtype {dtype}: allowed fp32, bf16, fp16")
        json.dump(c, open(f"{work}/{dtype}-{stage}.json", "w"))
PY
have_perf=0
if command -v perf > /dev/null && perf record -o "$work/probe.data" -- true > /dev/null 2>&1; then
  have_perf=1
fi
lscpu | grep -E 'Model name' | sed 's/  */ /g'
grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '
echo
run() {  # NAME ROUND PERF
  local name="$1" round="$2" prefix=()
  if [[ "$3" == 1 ]]; then prefix=(perf record -q -F 499 -o "$work/$name.perf" --); fi
  "${prefix[@]}" build/bin/zero-run -n 2 -- build/bin/zero-train --config "$work/$name.json" \
    --model "$model" --threads 1 --steps "$steps" --eval-every 0 --eval-batches 1 \
    --sample-tokens 1 --out "$work/run-$name-$round" > "$work/$name-$round.log" 2>&1 ||
    { echo "$name failed:"; tail -5 "$work/$name-$round.log"; exit 1; }
}
for round in $(seq 1 "$rounds"); do
  for dtype in ${dtypes//,/ }; do
    for stage in 0 1 2 3; do
      use_perf=0
      [[ "$round" == "$rounds" && "$have_perf" == 1 ]] && use_perf=1
      run "$dtype-$stage" "$round" "$use_perf"
    done
  done
done
python3 - "$work" "$dtypes" "$rounds" "$have_perf" <<'PY'
import csv, re, statistics, subprocess, sys
work, dtypes, rounds, have_perf = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4] == "1"
gemm = re.compile(r"gemm|brgemm|dnnl|mkldnn|jit_|mkl_blas|sgemm")
def share(path):
    out = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "dso,symbol",
                          "--time", "40%-100%", "--stdio", "-q"],
                         capture_output=True, text=True).stdout
    total = in_gemm = 0.0
    for line in out.splitlines():
        # "  12.34%  DSO (may hold spaces, e.g. [JIT] tid 123)  [.] SYMBOL" ([k]: the kernel's)
        m = re.match(r"\s*([\d.]+)%\s+(.+?)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(4)
        total += pct
        if m.group(3) == "." and (gemm.search(sym) or dso.startswith(("[JIT]", "[unknown]"))):
            in_gemm += pct
    return 100.0 * in_gemm / total if total else float("nan")
print("| compute | stage | tokens/s | step ms | GEMM share |")
print("|---|---|---|---|---|")
for dtype in dtypes:
    for stage in range(4):
        name = f"{dtype}-{stage}"
        meds = []
        for r in range(1, rounds + 1):
            rows = list(csv.DictReader(open(f"{work}/run-{name}-{r}/metrics.csv")))[2:]
            meds.append(statistics.median(float(x["step_ms"]) for x in rows))
        ms = statistics.median(meds)
        tokens = 2 * 2 * 256 * 1000.0 / ms
        g = f"{share(f'{work}/{name}.perf'):.0f} %" if have_perf else "(no perf)"
        print(f"| {dtype} | {stage} | {tokens:.0f} | {ms:.0f} | {g} |")
PY
