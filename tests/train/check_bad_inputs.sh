#!/usr/bin/env bash
# Each bad input gives one clear message naming the file or key and the value, exit status 2,
# no stack dump, and no rank left running (every case must finish well within its timeout).
#   check_bad_inputs.sh ZERO_TRAIN ZERO_RUN WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work"; mkdir -p "$work"
cd "$repo"
source "$repo/tests/lib/bad_inputs.sh"  # $good_config, verify_failure
# A token file: header of 256 int32 (magic, version, count) then uint16 ids.
make_tokens() {  # path magic version count first_id
  python3 - "$@" <<'PY'
import struct, sys
path, magic, version, count, first = sys.argv[1], *map(int, sys.argv[2:])
header = [magic, version, count] + [0] * 253
ids = [first] + [1] * (count - 1)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % count, *ids))
PY
}
cp data/tokens/moby_dick_val.bin "$work/ok_val.bin"
make_tokens "$work/magic_train.bin" 12345 1 1000 1; cp "$work/ok_val.bin" "$work/magic_val.bin"
make_tokens "$work/version_train.bin" 20240520 7 1000 1; cp "$work/ok_val.bin" "$work/version_val.bin"
make_tokens "$work/vocab_train.bin" 20240520 1 1000 60000; cp "$work/ok_val.bin" "$work/vocab_val.bin"
make_tokens "$work/short_train.bin" 20240520 1 1000 1; truncate -s 1500 "$work/short_train.bin"
cp "$work/ok_val.bin" "$work/short_val.bin"
echo '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}, "zero_optimizaton": {"stage": 2}}' > "$work/typo.json"
echo '{"train_batch_size": 3, "optimizer": {"type": "AdamW"}}' > "$work/batch.json"

failures=0
# case NAME EXPECTED_SUBSTRING... -- ARGS
check() {
  local name="$1"; shift
  local expected=()
  while [ "$1" != "--" ]; do expected+=("$1"); shift; done
  shift
  local out="$work/$name.out"
  timeout 120 "$zero_run" -n 2 -- "$zero_train" --steps 2 --out "$work/run-$name" "$@" >"$out" 2>&1
  verify_failure "$name" $? "$out" "${expected[@]}"
}
check missing_data "$work/none_train.bin" "No such file" -- --config "$good_config" --data "$work/none"
check wrong_magic "$work/magic_train.bin" "12345" "20240520" -- --config "$good_config" --data "$work/magic"
check wrong_version "$work/version_train.bin" "7" -- --config "$good_config" --data "$work/version"
check token_out_of_vocab "$work/vocab_train.bin" "60000" "50257" -- --config "$good_config" --data "$work/vocab"
check truncated_file "$work/short_train.bin" -- --config "$good_config" --data "$work/short"
check config_typo "zero_optimizaton" "zero_optimization" -- --config "$work/typo.json"
check config_missing "$work/nope.json" -- --config "$work/nope.json"
check batch_not_divisible "train_batch_size" "3" -- --config "$work/batch.json"
check unknown_model "gpt3" "gpt2-tiny" -- --config "$good_config" --model gpt3
check steps_zero "--steps" "'0'" -- --config "$good_config" --steps 0
check save_every_negative "--save-every" "'-1'" -- --config "$good_config" --save-every -1
# The start-up plan counts activations (Note [Memory plan]): gpt2-large's model state fits at
# stage 3 on 2 ranks (6.2 GB each), but its activations for 48 x 160 tokens per micro-batch
# (23 GB each) do not, and the run stops before allocating.
echo '{"train_micro_batch_size_per_gpu": 48, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}' > "$work/big_batch.json"
check activations_do_not_fit "of memory for the training step's peak" "activations" "MemAvailable" \
  -- --config "$work/big_batch.json" --model gpt2-large --seq-len 160
# Issue 29's 3B model (36 x 2560, ~3.0B parameters) at stage 3 without offload needs ~15-22 GiB
# per rank: refused at start-up with one message that names the two offload keys which make it
# train on this machine (configs/zero-infinity.json; docs/benchmarks.md).
echo '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}' > "$work/3b_in_memory.json"
check model_3b_without_offload "MemAvailable" 'offload_optimizer.device "nvme"' 'offload_param.device "nvme"' \
  -- --config "$work/3b_in_memory.json" --model L36-C2560 --seq-len 128
check save_every_not_a_number "--save-every" "'often'" -- --config "$good_config" --save-every often
check device_unknown "--device" "tpu" -- --config "$good_config" --device tpu
# Text --data (zero/text_corpus.h): a file that is not UTF-8, or binary, is named with the byte
# offset before anything is tokenized or trained.
printf 'caf\xe9 au lait, and more words after it\n' > "$work/latin1.txt"
check text_not_utf8 "$work/latin1.txt" "not valid UTF-8 at byte offset 3" -- --config "$good_config" --data "$work/latin1.txt"
printf 'text\0binary' > "$work/binary.txt"
check text_binary "$work/binary.txt" "binary file" "byte offset 4" -- --config "$good_config" --data "$work/binary.txt"
# --device cuda where there is no GPU (this suite's machines): one message on every rank's
# behalf, whether zero was built with CUDA (no device) or without (no libzero_cuda).
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  check device_cuda_without_gpu "--device cuda" -- --config "$good_config" --device cuda
fi
check resume_missing "--resume" "$work/none" -- --config "$good_config" --resume "$work/none"
mkdir -p "$work/bad-checkpoint/global_step1"; echo global_step1 > "$work/bad-checkpoint/latest"
echo '{"format": "zero-checkpoint", "version": 99}' > "$work/bad-checkpoint/global_step1/metadata.json"
check checkpoint_dir_in_use "$work/bad-checkpoint" "latest: global_step1" "--resume auto" -- \
  --config "$good_config" --save-every 1 --checkpoint-dir "$work/bad-checkpoint"
check resume_bad_checkpoint "cannot resume" "version 99" -- --config "$good_config" --resume "$work/bad-checkpoint"
# A real checkpoint edited and re-signed as a forger would (Note [Checkpoint metadata]): each
# edit contradicts the rest of the metadata and is refused by key, with the file named.
timeout 120 "$zero_run" -n 2 -- "$zero_train" --config "$good_config" --steps 1 --save-every 1 \
  --checkpoint-dir "$work/signed/original" --out "$work/run-signed" >"$work/signed.out" 2>&1 ||
  { echo "[signed] the run to edit failed"; cat "$work/signed.out"; failures=$((failures + 1)); }
edit_checkpoint() {  # NAME PYTHON_EDIT_OF_m: a copy of the checkpoint, edited and re-signed
  rm -rf "$work/signed/$1"; cp -r "$work/signed/original" "$work/signed/$1"
  python3 - "$work/signed/$1/global_step1/metadata.json" "$2" <<'PY'
import json, sys, zlib
path, edit = sys.argv[1], sys.argv[2]
m = json.load(open(path))
exec(edit)
m.pop("crc32", None)
m["crc32"] = zlib.crc32(json.dumps(m, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode())
json.dump(m, open(path, "w"), indent=1)
PY
}
edit_checkpoint next_step 'm["client_state"]["next_step"] = 0'
check resume_next_step_contradicts "cannot resume" "global_step1/metadata.json': client_state.next_step = 0 contradicts" \
  "saved after boundary 1" -- --config "$good_config" --steps 3 --resume "$work/signed/next_step"
edit_checkpoint optimizer_steps 'm["counters"]["optimizer_steps"] = 0'
check resume_optimizer_steps_reset "cannot resume" "counters.optimizer_steps = 0 contradicts counters.global_steps = 1" \
  -- --config "$good_config" --steps 3 --resume "$work/signed/optimizer_steps"
edit_checkpoint version_string 'm["version"] = "2"'
check resume_version_string "cannot resume" "version = \"2\" is invalid; expected the integer 2" \
  -- --config "$good_config" --steps 3 --resume "$work/signed/version_string"
edit_checkpoint model_renamed 'm["client_state"]["model"] = "gpt2-other"'
check resume_model_renamed "cannot resume" "client_state.model = \"gpt2-other\", but this run trains --model gpt2-tiny" \
  -- --config "$good_config" --steps 3 --resume "$work/signed/model_renamed"
# NVMe offload keys that cannot work: one line naming the key and the value, exit 2, from
# every rank together (a unit shard too big for a buffer is found per rank).
mkdir -p "$work/nvme"
echo '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "'"$work/nvme"'", "buffer_size": 1}}}' > "$work/buffer_size.json"
check offload_buffer_size_too_small "offload_param.buffer_size = 1 elements is smaller than this rank's shard of unit" \
  -- --config "$work/buffer_size.json"
echo '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "'"$work/no-such-dir"'"}}}' > "$work/nvme_missing.json"
check nvme_path_missing "offload_optimizer.nvme_path = \"$work/no-such-dir\" does not exist" \
  -- --config "$work/nvme_missing.json"
# Inputs that are not what they claim (Note [Bounded input] in src/common/bounded_input.h):
# none may hang, grow memory without bound or crash.
check threads_too_many "--threads" "100000" "cores" -- --config "$good_config" --threads 100000
mkfifo "$work/fifo.json"
check config_fifo "$work/fifo.json" "FIFO" -- --config "$work/fifo.json"
check config_dev_zero "/dev/zero" "character device" -- --config /dev/zero
python3 -c 'print("{\"zero_optimization\": {\"stage\": " + "[" * 100000 + "]" * 100000 + "}}")' > "$work/deep.json"
check config_deep "$work/deep.json" "nested deeper than 64" -- --config "$work/deep.json"
echo '{"train_micro_batch_size_per_gpu": 1e400}' > "$work/overflow.json"
check config_number_overflow "$work/overflow.json" "1e400" -- --config "$work/overflow.json"
mkdir -p "$work/fifo-checkpoint"; mkfifo "$work/fifo-checkpoint/latest"
check resume_latest_fifo "$work/fifo-checkpoint/latest" "FIFO" -- --config "$good_config" --resume "$work/fifo-checkpoint"
# Checked before training, on every rank (issue: faults found only mid-run): a csv_monitor
# path that cannot be made (rank 0 alone fails; every rank ends with one message), a
# checkpoint directory that cannot be made, an encoder with fewer tokens than the model draws.
echo "not a directory" > "$work/a-file"
cat > "$work/monitor.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
 "csv_monitor": {"enabled": true, "output_path": "$work/a-file/monitor", "job_name": "job"}}
JSON
check monitor_unwritable "csv_monitor: cannot create directory" "$work/a-file/monitor" -- --config "$work/monitor.json"
check checkpoint_dir_unwritable "$work/a-file/checkpoints" -- --config "$good_config" --save-every 1 \
  --checkpoint-dir "$work/a-file/checkpoints"
echo '{"!": 0, "\"": 1}' > "$work/small-encoder.json"
check encoder_too_small "$work/small-encoder.json" "has 2 ids" "50257" -- --config "$good_config" \
  --encoder "$work/small-encoder.json"
# One job per directory (Note [Directory lock]): while job A trains in run-shared with its
# checkpoints in shared-ckpt, a second job on either directory ends at start-up naming A.
"$zero_run" -n 1 -- "$zero_train" --config "$good_config" --steps 100000 --out "$work/run-shared" \
  --save-every 100000 --checkpoint-dir "$work/shared-ckpt" >"$work/job-a.out" 2>&1 &
job_a=$!
for _ in $(seq 600); do
  [ -s "$work/run-shared/.zero-lock" ] && [ -s "$work/shared-ckpt/.zero-lock" ] && break
  sleep 0.1
done
holder="pid $(cut -d' ' -f2 "$work/run-shared/.zero-lock")"
check shared "run directory $work/run-shared is in use by another job" "$holder" -- --config "$good_config"
check shared_checkpoints "checkpoint directory $work/shared-ckpt is in use by another job" "$holder" -- \
  --config "$good_config" --save-every 1 --checkpoint-dir "$work/shared-ckpt"
grep -q "step" "$work/run-shared/metrics.csv" 2>/dev/null || sleep 2
rows_before=$(wc -l < "$work/run-shared/metrics.csv" 2>/dev/null || echo 0)
kill -TERM "$job_a"; wait "$job_a" 2>/dev/null
rows_after=$(wc -l < "$work/run-shared/metrics.csv" 2>/dev/null || echo 0)
if [ "$rows_after" -lt "$rows_before" ]; then
  echo "[shared] job A's metrics.csv lost rows ($rows_before -> $rows_after)"; failures=$((failures + 1))
fi
# zero-run's own options.
"$zero_run" -n >"$work/zero_run_n.out" 2>&1
verify_failure zero_run_no_value $? "$work/zero_run_n.out" "zero-run: -n needs a value"
# A full disk: tests/train/check_disk_full.sh (ctest zero_train_disk_full).
# No rank may outlive its job. Only this script's ranks count (every case passes --out under
# $work): other tests may run zero-train at the same time (ctest -j). Anchored at the binary,
# since this script's own command line also contains the paths.
if pgrep -f "^$zero_train .*--out $work/" >/dev/null; then
  echo "ranks left running:"; pgrep -af "^$zero_train .*--out $work/"; failures=$((failures + 1))
fi
echo "$failures failing case(s)"
[ "$failures" -eq 0 ]
