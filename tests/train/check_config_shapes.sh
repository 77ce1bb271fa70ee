#!/usr/bin/env bash
# The shapes real DeepSpeed configs come in (issue 37; docs/config.md), written here: each one
# zero-train should accept goes through --plan and a 3-step run at 2 ranks, and the values the
# run directory's effective config holds are asserted; each one it should refuse ends at
# --plan with exit 2 and one line naming the DeepSpeed feature zero lacks.
#   check_config_shapes.sh ZERO_TRAIN ZERO_RUN WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work"; mkdir -p "$work"
cd "$repo"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# --- configs that must train --------------------------------------------------------------
# A Hugging Face Trainer template: "auto" everywhere the HF integration fills.
cat > "$work/hf_auto.json" <<'JSON'
{
  "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
           "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                           "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "zero_optimization": {"stage": 2, "allgather_partitions": true, "allgather_bucket_size": 2e8,
                        "overlap_comm": true, "reduce_scatter": true,
                        "reduce_bucket_size": "auto", "contiguous_gradients": true},
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "steps_per_print": 2000,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "wall_clock_breakdown": false
}
JSON
# No optimizer section (the trainer's AdamW), stage 3 with the HF bucket sizes, a comment.
cat > "$work/no_optimizer.json" <<'JSON'
{
  "_comment": "written for the Hugging Face Trainer",
  "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
                        "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                        "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto",
                        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                        "stage3_gather_16bit_weights_on_model_save": true},
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "zero_allow_untested_optimizer": true
}
JSON
# Every key that changes nothing in zero at once, the deprecated cpu_offload, a disabled
# monitor under a wrapper DeepSpeed ignores.
cat > "$work/no_effect.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "torch_adam": true}},
  "zero_allow_untested_optimizer": true,
  "zero_force_ds_cpu_optimizer": false,
  "zero_optimization": {"stage": 2, "cpu_offload": true, "round_robin_gradients": true,
                        "elastic_checkpoint": true},
  "activation_checkpointing": {"partition_activations": true,
                               "contiguous_memory_optimization": true},
  "timers": {"throughput": {"enabled": true, "synchronized": false}},
  "monitor_config": {"enabled": true, "tag": "DeepSpeedMonitor", "csv_monitor": {"enabled": false}},
  "comms_config": {"verbose": false}
}
JSON
# Stage 3 with DeepSpeed's "each alone" sizes and its gradient-path options, bf16 with fp16's
# loss-scale keys, fp32 gradient accumulation.
cat > "$work/stage3_options.json" <<'JSON'
{
  "train_batch_size": 8,
  "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "bf16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16},
  "communication_data_type": "fp32",
  "data_types": {"grad_accum_dtype": "fp32"},
  "zero_optimization": {"stage": 3, "sub_group_size": 0, "reduce_bucket_size": 0,
                        "contiguous_gradients": false, "reduce_scatter": false}
}
JSON
# Stage 0 with prescale_gradients (honoured: DeepSpeed divides before its all-reduce there) and
# fp16's auto_cast.
cat > "$work/prescale.json" <<'JSON'
{
  "train_batch_size": 8,
  "prescale_gradients": true,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "fp16": {"enabled": false, "auto_cast": true},
  "zero_optimization": {"stage": 0}
}
JSON

# value FILE KEY.PATH: the value at KEY.PATH of a JSON file, as JSON.
value() {
  python3 - "$1" "$2" <<'PY'
import json, sys
node = json.load(open(sys.argv[1]))
for part in sys.argv[2].split("."):
    node = node[part]
print(json.dumps(node))
PY
}
expect() {  # NAME KEY.PATH EXPECTED_JSON
  local got
  got="$(value "$work/run-$1/config.json" "$2")"
  [ "$got" = "$3" ] || fail "[$1] $2 = $got, expected $3"
}
train() {  # NAME EXPECTED_LINE... -- ARGS: --plan, then 3 steps; the lines in both outputs
  local name="$1"; shift
  local lines=()
  while [ "$1" != "--" ]; do lines+=("$1"); shift; done
  shift
  for mode in plan train; do
    local out="$work/$name.$mode.out" extra=(--plan)
    [ "$mode" = train ] && extra=(--seq-len 32 --eval-batches 1 --sample-tokens 2)
    if ! timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/$name.json" --steps 3 \
         --out "$work/run-$name" "${extra[@]}" "$@" >"$out" 2>&1; then
      fail "[$name] $mode exited non-zero:"; tail -5 "$out"; return
    fi
    for line in "${lines[@]}"; do
      grep -qF -- "$line" "$out" || fail "[$name] $mode output lacks '$line'"
    done
  done
  grep -q "^step 3/3\|summary (3 steps" "$work/$name.train.out" || fail "[$name] did not train 3 steps"
}

train hf_auto 'values left open ("auto"):' 'optimizer.params.lr = 0.0002 (--lr)' \
      'train_micro_batch_size_per_gpu = 4 (--micro-batch)' \
      'gradient_accumulation_steps = 2 (--grad-accum)' \
      'scheduler.params.total_num_steps = 3 (--steps)' \
      -- --micro-batch 4 --grad-accum 2 --lr 2e-4 --warmup-steps 1
expect hf_auto train_batch_size 16
expect hf_auto optimizer.params.lr 0.0002
expect hf_auto optimizer.params.betas "[0.9, 0.999]"
expect hf_auto optimizer.params.eps 1e-08
expect hf_auto gradient_clipping 1.0
expect hf_auto scheduler.params.warmup_max_lr 0.0002
expect hf_auto scheduler.params.warmup_min_lr 0.0
expect hf_auto scheduler.params.total_num_steps 3
expect hf_auto zero_optimization.reduce_bucket_size 16384  # gpt2-tiny's width 128, squared
# ZERO_GEMM_RATES (set by ctest) makes this a CPU with slow 16-bit GEMMs: fp32 it is.
expect hf_auto fp16.enabled false
expect hf_auto bf16.enabled false
grep -qF 'bf16.enabled = false (bf16 GEMMs run 10.0x slower than fp32' "$work/hf_auto.plan.out" ||
  fail "[hf_auto] the start-up line does not say why bf16 stayed off"

train no_optimizer 'no optimizer section: the Hugging Face Trainer'"'"'s AdamW' \
      "unknown key '_comment' ignored" 'zero_allow_untested_optimizer = true changes nothing' \
      -- --micro-batch 2 --weight-decay 0.01
expect no_optimizer optimizer.type '"AdamW"'
expect no_optimizer optimizer.params.lr 5e-05
expect no_optimizer optimizer.params.weight_decay 0.01
expect no_optimizer zero_optimization.stage3_prefetch_bucket_size 14745  # 0.9 x 128^2
expect no_optimizer zero_optimization.stage3_param_persistence_threshold 1280

train no_effect 'round_robin_gradients = true changes nothing in zero' \
      'torch_adam = true changes nothing in zero' 'cpu_offload = true is DeepSpeed'"'"'s deprecated spelling' \
      'partition_activations = true changes nothing' 'elastic_checkpoint = true changes nothing' \
      "unknown key 'monitor_config' ignored" "unknown key 'comms_config' ignored" --
expect no_effect zero_optimization.offload_optimizer.device '"cpu"'
expect no_effect optimizer.type '"AdamW"'

train stage3_options 'sub_group_size = 0' 'reduce_bucket_size = 0 changes nothing at stage 3' \
      'contiguous_gradients = false changes nothing at stage 3' \
      'reduce_scatter = false changes nothing at stage 3' 'bf16.loss_scale ignored' --
expect stage3_options data_types.grad_accum_dtype '"fp32"'
expect stage3_options zero_optimization.sub_group_size 1000000000

train prescale 'fp16.auto_cast = true has no effect' --
expect prescale prescale_gradients true

# A validation set too small for the micro-batch: evaluated in smaller batches, said once.
out="$work/small_val.out"
timeout 120 "$zero_run" -n 2 -- "$zero_train" --config "$work/hf_auto.json" --plan \
  --micro-batch 32 >"$out" 2>&1 || fail "[small validation set] --plan exited non-zero"
grep -qF "validation: 1 batch(es) of 31 sequence(s) per rank" "$out" ||
  fail "[small validation set] no note of the smaller evaluation batches"

# A command-line value that contradicts the config's number: one message naming both.
out="$work/mismatch.out"
timeout 120 "$zero_run" -n 2 -- "$zero_train" --config "$work/prescale.json" --plan --lr 0.1 \
  >"$out" 2>&1
[ $? -eq 2 ] || fail "[mismatch] expected exit 2"
grep -qF -- "--lr 0.1 contradicts optimizer.params.lr = 0.001 in the config" "$out" ||
  fail "[mismatch] message: $(cat "$out")"

# --- configs that must be refused, naming what zero lacks ----------------------------------
refuse() {  # NAME JSON_MEMBERS EXPECTED
  local config="$work/refuse_$1.json" out="$work/refuse_$1.out"
  if [ "${2:0:1}" = "{" ]; then
    echo "$2" > "$config"
  else
    echo "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\"}, $2}" > "$config"
  fi
  timeout 120 "$zero_run" -n 2 -- "$zero_train" --config "$config" --plan >"$out" 2>&1
  local status=$?
  [ $status -eq 2 ] || fail "[refuse $1] exit $status, expected 2"
  grep -qF -- "$3" "$out" || fail "[refuse $1] message lacks '$3': $(cat "$out")"
  [ "$(grep -c 'error' "$out")" -eq 1 ] || fail "[refuse $1] not one line: $(cat "$out")"
}
refuse amp '"amp": {"enabled": true, "opt_level": "O1"}' 'amp.enabled = true: zero does not have NVIDIA apex AMP'
refuse autotuning '"autotuning": {"enabled": true}' 'zero does not have the DeepSpeed Autotuner'
refuse compression '"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}}' 'zero does not have DeepSpeed Compression'
refuse data_efficiency '"data_efficiency": {"enabled": true}' 'zero does not have DeepSpeed Data Efficiency'
refuse compile '"compile": {"backend": "inductor"}' "zero does not have DeepSpeed's torch.compile integration"
refuse sparse_attention '"sparse_attention": {"mode": "fixed"}' 'zero does not have DeepSpeed Sparse Attention'
refuse progressive_layer_drop '"progressive_layer_drop": {"enabled": true}' 'zero does not have Progressive Layer Drop'
refuse onebit '{"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}}' "zero does not have DeepSpeed's 1-bit optimizers"
refuse prescale_stage2 '"prescale_gradients": true, "zero_optimization": {"stage": 2}' "DeepSpeed's stage 1-2 optimizer asserts it"
refuse typo_held '"log": {"steps_per_print": 50}' "did you mean 'steps_per_print'?"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "OK: every config shape trained or was refused as expected"
