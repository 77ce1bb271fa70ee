#!/usr/bin/env bash
# zero-ckpt end to end on a real 2-rank checkpoint (stage 3, bf16): inspect and --verify
# summarize it, export writes fp32 and bf16 files (check_zero_ckpt_export.py reads them with
# Hugging Face's safetensors), and each user error is one "zero-ckpt: error:" line with exit 2
# (a failed --verify: exit 1), never a stack dump.
#   check_zero_ckpt.sh ZERO_CKPT ZERO_RUN MAKE_TEST_CHECKPOINT WORK_DIR
set -uo pipefail
zero_ckpt="$1"; zero_run="$2"; make_checkpoint="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"
ckpt="$work/ckpt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! timeout 300 "$zero_run" -n 2 -- "$make_checkpoint" "$ckpt" "$work/reference.safetensors" 3 bf16 \
     >"$work/make.out" 2>&1; then
  cat "$work/make.out"; echo "FAIL: could not make the test checkpoint"; exit 1
fi

# run NAME EXPECTED_STATUS EXPECTED_SUBSTRING... -- ARGS: one zero-ckpt call.
run() {
  local name="$1" expected_status="$2"; shift 2
  local expected=()
  while [ "$1" != "--" ]; do expected+=("$1"); shift; done
  shift
  local out="$work/$name.out"
  timeout 120 "$zero_ckpt" "$@" >"$out" 2>&1
  local status=$? ok=1
  [ "$status" -eq "$expected_status" ] || { ok=0; echo "[$name] exit status $status, expected $expected_status"; }
  for e in "${expected[@]}"; do
    grep -qF -- "$e" "$out" || { ok=0; echo "[$name] output lacks '$e'"; }
  done
  if grep -qiE "terminate called|stack trace|backtrace|Exception raised from|frame #" "$out"; then
    ok=0; echo "[$name] stack dump in the output"
  fi
  if [ "$expected_status" -eq 2 ] && [ "$(grep -c 'zero-ckpt: error:' "$out")" -ne 1 ]; then
    ok=0; echo "[$name] expected exactly one 'zero-ckpt: error:' line"
  fi
  if [ "$ok" -eq 1 ]; then echo "[$name] ok (exit $status)"; else
    failures=$((failures + 1)); sed 's/^/    | /' "$out"; fi
}

run inspect 0 "tag global_step2" "2 ranks at ZeRO stage 3" "parameters bf16, master weights fp32" \
    "AdamW (state: exp_avg, exp_avg_sq)" "2 global steps" "client state {\"data_step\":2}" \
    "transformer.wte.weight" "[97, 32]" "transformer.h.1.mlp.c_fc.weight" "[32, 128]" \
    "rank_00000.safetensors" "rank_00001.safetensors" "pieces cover every element once" \
    -- inspect "$ckpt"
run inspect_config 0 "config       train_batch_size 4, micro-batch 2 per rank" "effective config:" \
    "\"zero_optimization\": {" "\"stage3_param_persistence_threshold\": 0" -- inspect "$ckpt" --config
run inspect_verify 0 "every file's size and CRC-32 match" -- inspect "$ckpt" --verify --tag global_step2
run export_fp32 0 "wrote $work/model-fp32.safetensors" "as fp32" \
    -- export "$ckpt" --out "$work/model-fp32.safetensors"
run export_bf16 0 "as bf16" -- export "$ckpt" --out "$work/model-bf16.safetensors" --dtype bf16
run export_fp16 0 "as fp16" -- export "$ckpt" --out "$work/model-fp16.safetensors" --dtype fp16

# User errors.
run no_checkpoint 2 "no checkpoint to load in '$work/none'" -- inspect "$work/none"
run unknown_tag 2 "global_step9' does not exist" -- inspect "$ckpt" --tag global_step9
run no_out 2 "--out is required" -- export "$ckpt"
run bad_dtype 2 "int8" -- export "$ckpt" --out "$work/x.safetensors" --dtype int8
# The export may not write into the checkpoint it reads (it could replace a rank file).
run export_into_checkpoint 2 "is inside a checkpoint of" \
    -- export "$ckpt" --out "$ckpt/global_step2/rank_00000.safetensors"
run export_onto_latest 2 "or is its 'latest'" -- export "$ckpt" --out "$ckpt/latest"
run inspect_after_export_into_checkpoint 0 "every file's size and CRC-32 match" -- inspect "$ckpt" --verify
run no_command 2 "A subcommand is required" --
run unknown_command 2 "unknown command 'convert'" -- convert "$ckpt"
run help 0 "inspect" "export" -- --help

# The metadata's own CRC-32 is reproducible outside zero, as docs/checkpoints.md says: compact
# JSON with sorted keys, without the "crc32" key.
python3 - "$ckpt/global_step2/metadata.json" <<'PY' || fail "metadata crc32 not reproducible in Python"
import json, sys, zlib
m = json.load(open(sys.argv[1], encoding="utf-8"))
recorded = m.pop("crc32")
text = json.dumps(m, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
computed = zlib.crc32(text.encode("utf-8"))
if computed != recorded:
    sys.exit(f"crc32 {computed} computed in Python, {recorded} recorded")
PY

# Damage: a flipped byte is found by --verify (exit 1) and refused by export (exit 2).
cp -r "$ckpt" "$work/damaged"
file="$work/damaged/global_step2/rank_00001.safetensors"
python3 - "$file" <<'PY'
import os, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0x10]))
PY
run verify_damaged 1 "rank_00001.safetensors  " "BAD" "1 problem" "is corrupted: CRC-32" \
    -- inspect "$work/damaged" --verify
run export_damaged 2 "rank_00001.safetensors' is corrupted" \
    -- export "$work/damaged" --out "$work/damaged.safetensors"
[ ! -e "$work/damaged.safetensors" ] || fail "export of a damaged checkpoint left a file"

# inspect lists the parameters in the model's order (Hugging Face's state-dict order), at
# stage 3 and at stage 2, whose flat buffer holds them in reverse.
expected_order="transformer.wte.weight transformer.wpe.weight"
for layer in 0 1; do
  for p in ln_1.weight ln_1.bias attn.c_attn.weight attn.c_attn.bias attn.c_proj.weight \
           attn.c_proj.bias ln_2.weight ln_2.bias mlp.c_fc.weight mlp.c_fc.bias \
           mlp.c_proj.weight mlp.c_proj.bias; do
    expected_order+=" transformer.h.$layer.$p"
  done
done
expected_order+=" transformer.ln_f.weight transformer.ln_f.bias"
if ! timeout 300 "$zero_run" -n 2 -- "$make_checkpoint" "$work/ckpt-stage2" \
     "$work/reference-stage2.safetensors" 2 fp32 >"$work/make-stage2.out" 2>&1; then
  cat "$work/make-stage2.out"; fail "could not make the stage 2 test checkpoint"
fi
for c in "$ckpt" "$work/ckpt-stage2"; do
  listed=$("$zero_ckpt" inspect "$c" | awk '/^  transformer\./ {print $1}' | tr '\n' ' ' | sed 's/ $//')
  [ "$listed" = "$expected_order" ] || fail "inspect $c does not list the parameters in model order: $listed"
done

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "ok: zero-ckpt inspect and export"
