#!/usr/bin/env bash
# zero-train -> checkpoint -> zero-ckpt export -> transformers' AutoModelForCausalLM.from_pretrained:
# the exported directory (model.safetensors and the config.json export writes from the
# checkpoint's recorded model shape) loads with no hand-written file, and the Hugging Face
# model gives the validation loss zero-train measured on the same windows (fp32; 1e-5
# relative). Skipped (exit 77) when Python's transformers is not installed.
# Each MODEL in turn (GPT-2 and a Llama-family one).
#   check_hf_export.sh ZERO_TRAIN ZERO_RUN ZERO_CKPT PYTHON WORK_DIR MODEL...
set -uo pipefail
zero_train="$1"; zero_run="$2"; zero_ckpt="$3"; python="$4"; work_root="$5"; shift 5
source "$(dirname "$0")/../lib/transformers_test.sh"
transformers_test "$python" "$work_root"
for model in "$@"; do
work="$work_root/$model"
mkdir -p "$work"
cat > "$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}, "zero_optimization": {"stage": 2}}
JSON
timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/config.json" --model "$model" \
  --steps 3 --eval-every 0 --eval-batches 1 --seq-len 64 --sample-tokens 4 --save-every 3 \
  --out "$work/run" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "zero-train failed"; }
"$zero_ckpt" export "$work/run/checkpoints" --out "$work/hf/model.safetensors" >"$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "zero-ckpt export failed"; }
cat "$work/export.log"
grep -q "wrote $work/hf/config.json (Hugging Face config.json)" "$work/export.log" ||
  fail "export did not write config.json"
# The last metrics.csv row's val_loss: 2 ranks x 1 batch x 2 rows = validation windows 0..3.
val_loss=$(tail -n 1 "$work/run/metrics.csv" | cut -d, -f3)
"$python" - "$work/hf" data/tokens/moby_dick_val.bin 64 4 "$val_loss" <<'PY'
import struct, sys
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

directory, tokens_path, seq, windows, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
model = AutoModelForCausalLM.from_pretrained(directory)
model.eval()
with open(tokens_path, "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    count = header[2]
    tokens = struct.unpack("<%dH" % count, f.read(2 * count))
# Window w is tokens [w*T, w*T + T + 1) (zero/data.h, Note [Token windows and sample order]).
rows = torch.tensor([tokens[w * seq: w * seq + seq + 1] for w in range(windows)], dtype=torch.long)
with torch.no_grad():
    logits = model(rows[:, :-1]).logits
loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1)).item()
relative = abs(loss - expected) / expected
print(f"transformers {type(model).__name__} from {directory}: validation loss {loss:.8f}, "
      f"zero-train {expected:.8f}, relative difference {relative:.2e}")
sys.exit(0 if relative < 1e-5 else 1)
PY
status=$?
[ "$status" -eq 0 ] || fail "$model: the Hugging Face model's loss differs from zero-train's (status $status)"
done
echo "OK: the exports ($*) load with from_pretrained and reproduce zero-train's validation loss"
