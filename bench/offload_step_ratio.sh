#!/usr/bin/env bash
# Step time with the optimizer state on NVMe against the same run in memory (docs/benchmarks.md,
# "NVMe offload"): zero-train at ZeRO stage 2 on 2 ranks, configs/demo.json with and without
# zero_optimization.offload_optimizer {"device": "nvme"}, the two runs interleaved ROUNDS times
# so that machine noise hits both alike. Prints one line per run and the ratio of medians.
# COMPARE=checksums compares instead the NVMe run with its swap records' checksums (Note [Swap
# record checksums]) against the same run without them (ZERO_SWAP_CHECKSUMS=0).
#   bench/offload_step_ratio.sh MODEL [ROUNDS=3] [STEPS=8] [NVME_DIR=/tmp/zero-nvme] [SUB_GROUP=5e6] [COMPARE=memory]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: bench/offload_step_ratio.sh MODEL [ROUNDS] [STEPS] [NVME_DIR] [SUB_GROUP]}"
rounds="${2:-3}"
steps="${3:-8}"
nvme="${4:-/tmp/zero-nvme}"
sub_group="${5:-5e6}"
compare="${6:-memory}"
case "$compare" in
  memory) base=memory; base_env=""; label=in_memory ;;
  checksums) base=nvme; base_env="ZERO_SWAP_CHECKSUMS=0"; label=nvme_unchecked ;;
  *) echo "COMPARE must be memory or checksums" >&2; exit 1 ;;
esac
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$nvme"
python3 - "$work" "$nvme" "$sub_group" <<'PY'
import json, sys
work, nvme, sub_group = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = json.load(open("configs/demo.json"))
c["zero_optimization"]["sub_group_size"] = int(sub_group)
json.dump(c, open(f"{work}/memory.json", "w"))
c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme}
json.dump(c, open(f"{work}/nvme.json", "w"))
PY
# Median ms/step of the steps after the first (the first allocates and, offloaded, touches the
# swap files for the first time).
run() {  # CONFIG [VAR=VALUE]
  env ${2:-} build/bin/zero-run -n 2 -- build/bin/zero-train --config "$work/$1.json" --model "$model" \
    --steps "$steps" --eval-every 0 --eval-batches 1 --sample-tokens 1 --out "$work/run-$1" 2>&1 |
    python3 -c '
import re, statistics, sys
ms = [float(m.group(1)) for m in (re.search(r"\| ([0-9.]+) ms/step", l) for l in sys.stdin) if m]
print(statistics.median(ms[1:]) if len(ms) > 1 else float("nan"))'
}
declare -a memory_ms nvme_ms
for r in $(seq 1 "$rounds"); do
  m="$(run "$base" "$base_env")"; n="$(run nvme)"
  memory_ms+=("$m"); nvme_ms+=("$n")
  echo "offload_step model=$model round=$r ${label}_ms=$m nvme_ms=$n"
done
python3 - "$model" "${memory_ms[*]}" "${nvme_ms[*]}" "$label" <<'PY'
import statistics, sys
model, m, n = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
print(f"offload_step model={model} median_{sys.argv[4]}_ms={statistics.median(m):.0f} "
      f"median_nvme_ms={statistics.median(n):.0f} ratio={statistics.median(n) / statistics.median(m):.3f}")
PY
