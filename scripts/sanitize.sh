#!/usr/bin/env bash
# Sanitizers and fuzzing: part of the test suite (scripts/test.sh runs it after ctest; alone:
# scripts/sanitize.sh). Idempotent; incremental after the first run.
#
# 1. build-asan/: clang with AddressSanitizer + UndefinedBehaviorSanitizer (any report ends the
#    program, so the run fails) and libFuzzer. Runs:
#    - the unit tests of what reads input or moves data: config, bounded input, safetensors,
#      checkpoints (every damaged-checkpoint case), shard arithmetic, the communicator and its
#      work handles (the multi-rank ones at 2 ranks), and the communicator's collective tests
#      at 4 ranks (the hierarchical schedules over two virtual nodes);
#    - a short 2-rank zero-train run at stages 2 (overlap_comm) and 3 that saves, resumes and
#      is read back by zero-ckpt inspect --verify and export;
#    - the fuzz targets of tests/fuzz/ (config parser, checkpoint metadata, safetensors reader),
#      ZERO_FUZZ_SECONDS each (default 10), from seeds made here: configs/*.json, the
#      metadata.json that run saved, small safetensors files. The corpus grows in
#      build-asan/fuzz/ from one run to the next; a crash leaves its input there.
# 2. build-tsan/: ThreadSanitizer over the communicator and the threads around it (its
#    progress thread, which overlap_comm's work runs on, the collective watchdog, stats read
#    from another thread): test_comm_work at 1 and 2 ranks and test_comm's threaded tests.
#
# ZERO_SANITIZERS=0 makes scripts/test.sh skip this script (for a quick local run only: CI
# runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null

ASAN_DIR="${ZERO_ASAN_BUILD_DIR:-build-asan}"
TSAN_DIR="${ZERO_TSAN_BUILD_DIR:-build-tsan}"
# 10 s per target keeps the whole suite (scripts/test.sh) under 20 minutes on 2 cores.
FUZZ_SECONDS="${ZERO_FUZZ_SECONDS:-10}"
PYTHON="${PYTHON:-python3}"
TORCH_PREFIX="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
repo="$(pwd)"

# configure DIR [CMAKE_ARGS...]: clang, -O1 with line tables (fast enough to build and run,
# readable reports), no benchmarks.
configure() {
  local dir="$1"; shift
  [ -f "$dir/build.ninja" ] && return 0
  cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DZERO_BUILD_BENCHMARKS=OFF "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; rm -rf "$dir"; exit 1; }
}

# Reports: symbolized, every one fatal. Leaks: ours are reported; the MPI and libtorch
# libraries' own allocations that live until exit are not ours to fix (suppressed by library;
# the slow unwinder sees through their frames, which have no frame pointers).
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer || true)}"
lsan_suppressions="$repo/$ASAN_DIR/lsan.supp"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$lsan_suppressions:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
tsan_suppressions="$repo/$TSAN_DIR/tsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$tsan_suppressions"
# Build jobs: every core. GNU nproc honours OMP_NUM_THREADS (set to 1 below), which made these
# builds run one job at a time: 6 minutes instead of 3 for build-asan.
build_jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
export OMP_NUM_THREADS=1

echo "== sanitize: AddressSanitizer + UndefinedBehaviorSanitizer build ($ASAN_DIR)"
configure "$ASAN_DIR" -DZERO_SANITIZE=address,undefined -DZERO_FUZZ=ON
cat >"$lsan_suppressions" <<'SUPP'
leak:libmpi.so
leak:libopen-pal.so
leak:libopen-rte.so
leak:mca_
leak:libtorch_cpu.so
leak:libc10.so
leak:libgomp.so
leak:libhwloc.so
leak:libevent
leak:libpmix
SUPP
asan_tests=(test_config test_bounded_input test_safetensors test_shard test_comm test_comm_work
            test_checkpoint test_device_offload test_muon)
fuzzers=(fuzz_config fuzz_safetensors fuzz_checkpoint_metadata)
cmake --build "$ASAN_DIR" -j "$build_jobs" --target zero-train zero-ckpt "${asan_tests[@]}" "${fuzzers[@]}"
# Single-process tests as they are; the multi-rank ones at 2 ranks. test_muon: Muon's exchange
# plan over simulated ranks (its transfers index per-peer lists) and Newton-Schulz; the engine's
# Muon step runs in test_checkpoint's resume test.
# The device offload pipeline (its worker and copy threads) at 1 rank; test_checkpoint without
# its device-offload case (that pipeline is test_device_offload's here).
(cd "$ASAN_DIR" && GTEST_FILTER="-Checkpoint.DeviceOffload*" ctest --output-on-failure --timeout 900 \
   -R "^(test_config|test_bounded_input|test_safetensors|test_shard|test_comm_np2|test_comm_work_np2|test_checkpoint_np2|test_device_offload|test_muon)$")

# The hierarchical collectives (Note [Hierarchical collectives]: the packed layout, the node's
# shared packed buffer) need two nodes of two ranks: test_comm's collective tests at 4 ranks,
# whose virtual-node communicators split them so.
hierarchical="Comm.ReduceScatterMatchesNoteOrderBitwise:Comm.AllReduceMatchesNoteOrderAndIsIdenticalOnAllRanks:Comm.AllGather:Comm.TopologyAndBytesAcrossNodes"
mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS -x ASAN_OPTIONS \
  -x LSAN_OPTIONS -x UBSAN_OPTIONS -np 4 "$ASAN_DIR/tests/test_comm" --gtest_filter="$hierarchical" --gtest_color=no \
  >"$ASAN_DIR/test_comm_np4.log" 2>&1 ||
  { tail -40 "$ASAN_DIR/test_comm_np4.log"; echo "sanitize: test_comm at 4 ranks failed under ASan"; exit 1; }
echo "test_comm at 4 ranks (hierarchical collectives): $(grep -c '^\[       OK' "$ASAN_DIR/test_comm_np4.log") rank-tests passed"

echo "== sanitize: 2-rank training, checkpoint, resume and zero-ckpt under ASan + UBSan"
work="$ASAN_DIR/train"
rm -rf "$work"; mkdir -p "$work"
for stage in 2 3; do
  cat >"$work/stage$stage.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": $stage, "overlap_comm": true, "reduce_bucket_size": 200000}}
JSON
  train() {
    timeout 600 "$ASAN_DIR/bin/zero-run" -n 2 -- "$ASAN_DIR/bin/zero-train" \
      --config "$work/stage$stage.json" --seq-len 32 --eval-every 0 --eval-batches 1 \
      --sample-tokens 4 --dropout 0.1 --save-every 2 --out "$work/run$stage" "$@" \
      >>"$work/run$stage.log" 2>&1 || { cat "$work/run$stage.log"; exit 1; }
  }
  train --steps 2
  train --steps 3 --resume auto
  grep -q "resuming from" "$work/run$stage.log" || { cat "$work/run$stage.log"; exit 1; }
  "$ASAN_DIR/bin/zero-ckpt" inspect "$work/run$stage/checkpoints" --verify >>"$work/run$stage.log"
  "$ASAN_DIR/bin/zero-ckpt" export "$work/run$stage/checkpoints" \
    --out "$work/export$stage/model.safetensors" --dtype bf16 >>"$work/run$stage.log"
  echo "stage $stage: trained, saved, resumed, inspected and exported cleanly"
done

echo "== sanitize: fuzzing, $FUZZ_SECONDS s per target"
fuzz="$ASAN_DIR/fuzz"
mkdir -p "$fuzz/seeds/fuzz_config" "$fuzz/seeds/fuzz_safetensors" "$fuzz/seeds/fuzz_checkpoint_metadata"
cp configs/*.json tests/train/*.json "$fuzz/seeds/fuzz_config/"
for stage in 2 3; do cp "$work/stage$stage.json" "$fuzz/seeds/fuzz_config/train-stage$stage.json"; done
cp "$work/run3/checkpoints/global_step2/metadata.json" "$fuzz/seeds/fuzz_checkpoint_metadata/stage3.json"
cp "$work/run2/checkpoints/global_step2/metadata.json" "$fuzz/seeds/fuzz_checkpoint_metadata/stage2.json"
# Small safetensors files (a rank file is tens of MB: too large to mutate quickly).
"$PYTHON" - "$fuzz/seeds/fuzz_safetensors" <<'PY'
import json, struct, sys
def write(path, tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata: header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
write(sys.argv[1] + "/two.safetensors",
      {"master/w/0": ("F32", [3], struct.pack("<3f", 1, 2, 3)), "rng/cpu": ("U8", [4], bytes(4))},
      {"format": "zero-checkpoint-shard"})
write(sys.argv[1] + "/dtypes.safetensors",
      {"a": ("BF16", [2, 2], bytes(8)), "b": ("I64", [1], bytes(8)), "c": ("F16", [], bytes(2)),
       "d": ("BOOL", [0], b"")})
PY
for f in "${fuzzers[@]}"; do
  mkdir -p "$fuzz/corpus/$f"
  log="$fuzz/$f.log"
  if ! "$ASAN_DIR/tests/$f" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=6144 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$fuzz/$f-" \
       "$fuzz/corpus/$f" "$fuzz/seeds/$f" >"$log" 2>&1; then
    tail -60 "$log"
    echo "sanitize: $f found a failing input (saved as $fuzz/$f-*); see $log"
    exit 1
  fi
  runs=$(grep -m1 "stat::number_of_executed_units" "$log" | awk '{print $2}')
  cov=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$log" | tail -1 | grep -oE "cov: [0-9]+" || true)
  echo "$f: ${runs:-?} inputs in $FUZZ_SECONDS s, ${cov:-cov: ?}, corpus $(ls "$fuzz/corpus/$f" | wc -l) files"
done

echo "== sanitize: ThreadSanitizer build of the communicator and its threads ($TSAN_DIR)"
configure "$TSAN_DIR" -DZERO_SANITIZE=thread -DZERO_SOURCE_FILTER='src/(common|comm)/' \
  -DZERO_TEST_FILTER='/comm\.cmake$'
# Open MPI's own locking (inside MPI_Init and its progress thread) is not ours to fix.
cat >"$tsan_suppressions" <<'SUPP'
deadlock:mca_btl_
deadlock:libopen-pal.so
race:libopen-pal.so
race:libmpi.so
race:mca_
SUPP
cmake --build "$TSAN_DIR" -j "$build_jobs" --target test_comm test_comm_work
(cd "$TSAN_DIR" && ctest --output-on-failure --timeout 600 -R '^test_comm_work(_np2)?$')
threaded='CollectiveWatchdog.*:Comm.StatsCanBeReadFromAnotherThread:Comm.Basics'
"$TSAN_DIR/tests/test_comm" --gtest_filter="$threaded"
mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS -x TSAN_OPTIONS -np 2 \
  "$TSAN_DIR/tests/test_comm" --gtest_filter="$threaded"
echo "sanitize: OK (ASan + UBSan, fuzzing, TSan)"
