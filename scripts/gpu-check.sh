#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU, in tiers that each finish in under 6 minutes of
# wall time on one H100 with 16 cores, build included (GPU time is lent 15 minutes at a time).
# Builds zero with CUDA against the machine's torch (only what the tier needs), runs the tier's
# steps and writes gpu-check-results.txt (copied to $OUT when set) even when a step fails:
# every step's status first (PASS, FAIL, or SKIP with the reason: a second GPU, liburing, the
# time left), then its figures. Idempotent; incremental after the first run.
#
#   scripts/gpu-check.sh [--tier 1|2] [--dry-run]
#     tier 1 (default): correctness and speed: every CUDA test; stages 0/2/3 tokens/s and MFU
#       for gpt2 124M (bf16, 16 x 1024) with a per-kernel profile of a step; zero-train on the
#       GPU and the KV-cache check on its checkpoint; torch.compile's baseline, its compile
#       time bounded; the fused CUDA kernels against the CPU kernels and ATen's composition,
#       in results and in time.
#     tier 2: size: the largest GPT-2 that ZeRO-Offload trains in the time left (its host
#       memory checked first; 6.65B, L32-C4096, when it fits), with the step-time split.
#     --dry-run: each tier's steps and time budgets, and what the machine lacks; runs nothing.
#   ZERO_GPU_TIER_SECONDS: a tier's wall-time budget (default 340); ZERO_GPU_NVME=DIR: tier 2
#   also runs the optimizer state on NVMe under DIR.
#
# Needs: python3 with a CUDA build of torch (2.11 to 2.15), the CUDA toolkit (nvcc, runtime
# headers), a C++ compiler, CMake and Ninja (or make), and MPI, nlohmann-json, CLI11, GoogleTest,
# liburing, zlib and pkg-config. Each one the machine has is used as it is; each one it lacks is
# installed from apt where there is apt (and we are root), else taken from .gpu-deps/*.deb
# (scripts/gpu-deps.sh downloads them on a Debian machine beforehand; the lent GPU machines have
# no apt and no network), unpacked into build-gpu.deps/ and used from there, Open MPI relocated
# with OPAL_PREFIX and its PMIx plugins taken from the same tree. A library the machine has is
# never mixed with a packaged build of it. The machine's own torch is used, never replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
tier=1
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tier) tier="${2:-}"; shift 2 ;;
    --tier=*) tier="${1#--tier=}"; shift ;;
    --dry-run) dry_run=1; shift ;;
    --quick) tier=1; shift ;;  # the old name of tier 1
    *) echo "gpu-check: unknown argument '$1' (allowed: --tier 1|2, --dry-run)" >&2; exit 2 ;;
  esac
done
case "$tier" in 1|2) ;; *) echo "gpu-check: --tier '$tier' is invalid; allowed: 1, 2" >&2; exit 2 ;; esac
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${ZERO_GPU_BUILD_DIR:-build-gpu}"
budget="${ZERO_GPU_TIER_SECONDS:-340}"
started_at=$(date +%s)
results="$repo/gpu-check-results.txt"
figures="$repo/$BUILD_DIR.figures.txt"
statuses=()
elapsed() { echo $(($(date +%s) - started_at)); }
say() { echo "$@" | tee -a "$figures"; }

# Each tier's steps: NAME, its time budget in seconds, and the function that runs it (defined
# below). A step gets the smaller of its budget and the tier's time left; with under 15 s left
# it is skipped, saying so.
tier1_steps=(
  "build:170:step_build"
  "test_cuda_linkage:15:step_linkage"
  "test_cuda, 1 rank:45:step_test_cuda_1"
  "test_cuda, 2 ranks:45:step_test_cuda_2"
  "fused CUDA kernels against the CPU's and ATen's:30:step_fused_kernels"
  "bench_cuda stage 0 (gpt2 124M, bf16, 16 x 1024, profile):40:step_bench_0"
  "bench_cuda stage 2:30:step_bench_2"
  "bench_cuda stage 3:30:step_bench_3"
  "zero-train --device cuda and the KV-cache check:40:step_train_generate"
  "torch.compile baseline (compile time bounded):90:step_compile_baseline"
)
tier2_steps=(
  "build:120:step_build"
  "ZeRO-Offload, the largest GPT-2 that fits:220:step_offload_largest"
  "ZeRO-Offload with the state on NVMe:60:step_offload_nvme"
)
steps_var="tier${tier}_steps[@]"

if [ "$dry_run" = 1 ]; then
  for t in 1 2; do
    v="tier${t}_steps[@]"; total=0
    echo "tier $t (budget ${budget} s):"
    for entry in "${!v}"; do
      IFS=: read -r name seconds fn <<<"$entry"
      printf '  %-70s up to %3d s\n' "$name" "$seconds"
      total=$((total + seconds))
    done
    echo "  steps' budgets add to ${total} s; the tier stops at ${budget} s (later steps skipped)"
  done
  command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "no nvidia-smi: no GPU here"
  if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
    echo ".gpu-deps: $(ls .gpu-deps/*.deb | wc -l) packages, for what the GPU machine lacks"
  else
    echo ".gpu-deps: missing; a GPU machine without apt needs it: run scripts/gpu-deps.sh here"
  fi
  exit 0
fi

: >"$figures"
# The results file, written whatever happens: the statuses, then the figures.
write_results() {
  {
    echo "== gpu-check tier $tier $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(elapsed) s"
    printf '%s\n' "${statuses[@]}"
    echo
    cat "$figures"
  } >"$results"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then cp "$results" "$OUT/"; fi
}
trap write_results EXIT

say "== gpu-check tier $tier on $(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee -a "$figures" || say "nvidia-smi: not found"
torch_info="$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())')"
say "torch (version, CUDA, available, devices): $torch_info"
TORCH_PREFIX="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
gpus="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"

# ---- dependencies --------------------------------------------------------------------------
# Each dependency is taken from the machine when it has it, and only the missing ones are
# filled: from apt where there is apt (and we are root), else from .gpu-deps/*.deb unpacked
# into $deps_root. One library never comes from two places: with the machine's Open MPI, none
# of the packaged MPI stack (libopenmpi, PMIx, hwloc, libevent) is unpacked or put on a path.
# ZERO_GPU_DEPS=debs takes every dependency from .gpu-deps (to try that path on any machine);
# ZERO_GPU_MISSING="liburing ..." treats the named ones as missing and ZERO_GPU_APT=0 ignores apt
# (together: the lent GPU machines' case, on any machine).
cmake_args=()
deps_root="$repo/$BUILD_DIR.deps"  # unpacked here (ignored; only .gpu-deps/*.deb travel)
declare -A debs_of=(
  [mpi]="libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2"
  [json]="nlohmann-json3-dev" [cli11]="libcli11-dev" [gtest]="libgtest-dev"
  [liburing]="liburing2 liburing-dev" [pcre2]="libpcre2-dev libpcre2-8-0" [zlib]="zlib1g-dev"
  [pkgconfig]="pkgconf pkgconf-bin libpkgconf3")
declare -A apt_of=(
  [mpi]="libopenmpi-dev openmpi-bin" [json]="nlohmann-json3-dev" [cli11]="libcli11-dev"
  [gtest]="libgtest-dev" [liburing]="liburing-dev" [pcre2]="libpcre2-dev" [zlib]="zlib1g-dev"
  [pkgconfig]="pkg-config")
have_header() {  # HEADER: found by the C++ compiler's default search (or /usr/local/include)
  echo "#include <$1>" | "${CXX:-c++}" -x c++ -E - >/dev/null 2>&1 || [ -f "/usr/local/include/$1" ]
}
have() {  # DEPENDENCY: present on this machine
  case " ${ZERO_GPU_MISSING:-} " in *" $1 "*) return 1 ;; esac
  [ "${ZERO_GPU_DEPS:-auto}" = debs ] && return 1
  case "$1" in
    mpi) command -v mpicc >/dev/null && command -v mpirun >/dev/null ;;
    json) have_header nlohmann/json.hpp ;;
    cli11) have_header CLI/CLI.hpp ;;
    gtest) have_header gtest/gtest.h ;;
    liburing) command -v pkg-config >/dev/null && pkg-config --exists 'liburing >= 2.0' ;;
    pcre2) command -v pkg-config >/dev/null && pkg-config --exists 'libpcre2-8 >= 10.34' ;;
    zlib) have_header zlib.h ;;
    pkgconfig) command -v pkg-config >/dev/null ;;
  esac
}
missing=()
for dep in mpi json cli11 gtest liburing pcre2 zlib pkgconfig; do have "$dep" || missing+=("$dep"); done
# liburing and PCRE2 are found through pkg-config: when either is packaged, both are, with the
# packaged pkgconf reading only the unpacked tree's .pc files (PKG_CONFIG_LIBDIR below, whose
# sysroot would misplace the machine's own .pc paths).
if [[ " ${missing[*]} " == *" liburing "* || " ${missing[*]} " == *" pcre2 "* ]]; then
  for dep in liburing pcre2 pkgconfig; do
    [[ " ${missing[*]} " == *" $dep "* ]] || missing+=("$dep")
  done
fi
if ((${#missing[@]} == 0)); then
  say "dependencies: all installed"
elif [ "${ZERO_GPU_DEPS:-auto}" != debs ] && [ "${ZERO_GPU_APT:-1}" != 0 ] &&
     command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ] &&
     apt-get update -qq 2>/dev/null; then
  pkgs=(); for dep in "${missing[@]}"; do pkgs+=(${apt_of[$dep]}); done
  say "dependencies: installing from apt: ${pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
else
  debs=()
  for dep in "${missing[@]}"; do
    for p in ${debs_of[$dep]}; do
      f="$(ls .gpu-deps/"${p}"_*.deb 2>/dev/null | head -1)"
      [ -n "$f" ] || { say "dependencies: $dep is missing here and .gpu-deps has no ${p}_*.deb: run scripts/gpu-deps.sh on a Debian machine and bring .gpu-deps/"; statuses+=("FAIL dependencies: $dep missing, no .gpu-deps"); exit 1; }
      debs+=("$f")
    done
  done
  say "dependencies: installed except ${missing[*]}; those from .gpu-deps into $deps_root"
  stamp="$(printf '%s\n' "${debs[@]}" | sort | tr '\n' ' ')"
  if [ "$(cat "$deps_root/.unpacked" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$deps_root" && mkdir -p "$deps_root"
    for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$deps_root" 2>/dev/null || dpkg -x "$deb" "$deps_root"; done
    echo "$stamp" >"$deps_root/.unpacked"
  fi
  lib="$deps_root/usr/lib/x86_64-linux-gnu"
  export PATH="$deps_root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TORCH_PREFIX="$TORCH_PREFIX;$deps_root/usr"
  if [[ " ${missing[*]} " == *" pkgconfig "* ]]; then
    ln -sf pkgconf "$deps_root/usr/bin/pkg-config"
    cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$deps_root/usr/bin/pkgconf")
  fi
  if [[ " ${missing[*]} " == *" liburing "* || " ${missing[*]} " == *" pcre2 "* ]]; then
    # Only the unpacked .pc files are searched, and their /usr paths are read under the tree.
    export PKG_CONFIG_LIBDIR="$lib/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$deps_root"
  fi
  if [[ " ${missing[*]} " == *" mpi "* ]]; then
    # Debian makes these names with update-alternatives at install time.
    for tool in mpirun mpiexec mpicc mpicxx; do ln -sf "$tool.openmpi" "$deps_root/usr/bin/$tool"; done
    export LD_LIBRARY_PATH="$lib/openmpi/lib:$LD_LIBRARY_PATH"
    # Open MPI relocated; PMIx must load its plugins from the unpacked tree, not from a
    # different PMIx build the machine may have in the same standard path (undefined symbols).
    export OPAL_PREFIX="$deps_root/usr"
    export PMIX_MCA_mca_base_component_path="$lib/pmix2/lib/pmix"
    cmake_args+=(-DMPI_C_COMPILER="$deps_root/usr/bin/mpicc.openmpi"
                 -DMPIEXEC_EXECUTABLE="$deps_root/usr/bin/mpirun.openmpi")
  fi
fi
for dep in "${missing[@]}"; do say "  $dep: $( [ -d "$deps_root" ] && echo ".gpu-deps" || echo apt )"; done

# ---- steps --------------------------------------------------------------------------------
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
has_gpu="$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))')"
step_seconds=0  # the running step's time limit
skip_reason=""
skip() { skip_reason="$1"; return 77; }
need_gpu() { [ "$has_gpu" = 1 ] || skip "no CUDA device"; }

step_build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    timeout "$step_seconds" cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DZERO_CUDA=ON -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${cmake_args[@]}" \
      >"$BUILD_DIR.configure.log" 2>&1 || { tail -40 "$BUILD_DIR.configure.log" | tee -a "$figures"; return 1; }
  fi
  local targets=(zero-train)
  if [ "$tier" = 1 ]; then
    targets+=(test_cuda_linkage test_cuda test_cuda_kernels zero-generate bench_cuda
              bench_fused_kernels)
  else
    targets+=(bench_offload_cuda)
  fi
  say "build: ${targets[*]} ($jobs jobs)"
  local left=$((step_seconds - $(elapsed) + step_began))
  [ "$left" -gt 0 ] || return 124
  local rc=0
  timeout "$left" cmake --build "$BUILD_DIR" -j "$jobs" --target "${targets[@]}" \
    >"$BUILD_DIR.build.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    grep -E "error|Error" "$BUILD_DIR.build.log" | head -40 | tee -a "$figures"
    return "$rc"  # 124: over its time
  fi
}

run_test() {  # NAME RANKS
  local log="$BUILD_DIR/$1-np$2.log"
  if timeout "$step_seconds" "${mpirun_cmd[@]}" -np "$2" "$BUILD_DIR/tests/$1" --gtest_color=no >"$log" 2>&1; then
    say "$1 at $2 rank(s): $(grep -c '^\[       OK .* ms)$' "$log") passed, $(grep -c '^\[  SKIPPED \] .* ms)$' "$log") skipped"
  else
    say "$1 at $2 rank(s) failed:"
    grep -E "Failure|FAILED|error|Expected|Which is|Value of|Actual" "$log" | head -40 | tee -a "$figures"
    return 1
  fi
}
step_linkage() {
  timeout "$step_seconds" "$BUILD_DIR/tests/test_cuda_linkage" --gtest_color=no >"$BUILD_DIR/test_cuda_linkage.log" 2>&1 ||
    { grep -E "Failure|error" -A3 "$BUILD_DIR/test_cuda_linkage.log" | head -20 | tee -a "$figures"; return 1; }
}
step_test_cuda_1() { need_gpu || return; run_test test_cuda 1; }
step_test_cuda_2() {
  need_gpu || return
  # Two ranks: NCCL with a GPU each, else host staging on the one GPU (NCCL cannot put two
  # ranks on one GPU).
  [ "$gpus" -ge 2 ] || say "test_cuda at 2 ranks: one GPU, so host staging (no NCCL between ranks)"
  run_test test_cuda 2
}
bench_stage() {  # STAGE
  need_gpu || return
  timeout "$step_seconds" "${mpirun_cmd[@]}" -np 1 "$BUILD_DIR/bench/bench_cuda" --model gpt2 \
    --batch 16 --seq 1024 --stage "$1" --rounds 1 --steps 6 --warmup 2 \
    $([ "$1" = 0 ] && echo --profile 3) >"$BUILD_DIR/bench_cuda-$1.log" 2>&1 ||
    { tail -15 "$BUILD_DIR/bench_cuda-$1.log" | tee -a "$figures"; return 1; }
  grep -E "^bench_cuda" "$BUILD_DIR/bench_cuda-$1.log" | tee -a "$figures"
}
step_bench_0() { bench_stage 0; }
step_bench_2() { bench_stage 2; }
step_bench_3() { bench_stage 3; }
# zero-train on the GPU (stage 0, bf16, gpt2-tiny, 30 steps: the loss must fall), then
# zero-generate from its checkpoint with --check-kv-cache: the logits with and without the KV
# cache at every position (the cached run's tokens) within 2e-2 of their largest magnitude (bf16
# sums in another order flip near-ties of greedy text; logits are the test), and the rates.
step_train_generate() {
  need_gpu || return
  local dir="$BUILD_DIR/zero-train-stage0" log="$BUILD_DIR/zero-train-stage0.log"
  rm -rf "$dir"; mkdir -p "$dir"
  echo '{"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}' >"$dir/config.json"
  timeout "$step_seconds" "$BUILD_DIR/bin/zero-run" -n 1 -- "$BUILD_DIR/bin/zero-train" --device cuda \
    --config "$dir/config.json" --steps 30 --eval-every 0 --sample-tokens 8 --out "$dir/run" \
    --save-every 30 >"$log" 2>&1 || { tail -15 "$log" | tee -a "$figures"; return 1; }
  awk -F, 'NR==2 {first=$2} END {exit !($2 < first)}' "$dir/run/metrics.csv" ||
    { say "zero-train --device cuda: the loss did not fall"; return 1; }
  say "zero-train --device cuda stage 0: $(grep -m1 'tokens/s' "$log" | tr -s ' ') | $(grep -m1 'GPU memory peak' "$log" | tr -s ' ')"
  timeout 60 "$BUILD_DIR/bin/zero-generate" --model "$dir/run" --device cuda \
    --prompt "The whale and the sea" --max-tokens 64 --temperature 0 --check-kv-cache \
    --tolerance 2e-2 >"$BUILD_DIR/generate.txt" 2>"$BUILD_DIR/generate.err" ||
    { tail -5 "$BUILD_DIR/generate.err" | tee -a "$figures"; return 1; }
  grep -E "tokens/s|KV-cache check" "$BUILD_DIR/generate.err" | tee -a "$figures"
}
# Note [Fused element-wise kernels on a GPU]: the kernels against the CPU's (their reference)
# and through autograd against ATen's composition (test_cuda_kernels), then each against the
# composition it replaces in time, and GPT-2's forward + backward fused and composed.
step_fused_kernels() {
  need_gpu || return
  run_test test_cuda_kernels 1 || return
  local left=$((step_seconds - $(elapsed) + step_began))
  [ "$left" -gt 0 ] || return 124
  timeout "$left" "$BUILD_DIR/bench/bench_fused_kernels" \
    --device cuda --model gpt2 --batch 8 --seq 1024 --rounds 5 --dtypes bf16,fp32 \
    >"$BUILD_DIR/bench_fused_kernels.log" 2>&1 ||
    { tail -10 "$BUILD_DIR/bench_fused_kernels.log" | tee -a "$figures"; return 1; }
  grep -E "^\||median" "$BUILD_DIR/bench_fused_kernels.log" | tee -a "$figures"
}
step_compile_baseline() {
  need_gpu || return
  timeout "$step_seconds" "$PYTHON" bench/pytorch_nanogpt_compile.py --runs eager,compile_padded \
    --steps 10 --warmup 3 --profile 3 >"$BUILD_DIR/compile.log" 2>&1 ||
    { tail -10 "$BUILD_DIR/compile.log" | tee -a "$figures"; return 1; }
  grep -E "^pytorch_nanogpt" "$BUILD_DIR/compile.log" | tee -a "$figures"
}

# Tier 2. GPT-2 shapes from the largest down, each run only when the host memory its
# offloaded optimizer needs (about 16 bytes per parameter: fp32 master weights and Adam's
# moments, pinned, and the 16-bit gradient and parameter copies) is available.
offload_run() {  # MODEL EXTRA_ARGS...
  local model="$1"; shift
  timeout "$step_seconds" "${mpirun_cmd[@]}" -np 1 "$BUILD_DIR/bench/bench_offload_cuda" \
    --model "$model" "$@" >"$BUILD_DIR/offload-$model.log" 2>&1 ||
    { tail -10 "$BUILD_DIR/offload-$model.log" | tee -a "$figures"; return 1; }
  grep -E "^bench_offload_cuda (model|result|split|built)" "$BUILD_DIR/offload-$model.log" | tee -a "$figures"
}
params_of() {  # L<layers>-C<width>: parameters of that GPT-2 (vocab 50257, context 1024)
  local l c; l="$(echo "$1" | sed -E 's/^L([0-9]+)-C([0-9]+).*/\1/')"; c="$(echo "$1" | sed -E 's/^L([0-9]+)-C([0-9]+).*/\2/')"
  echo $((12 * l * c * c + 13 * l * c + 50257 * c + 1024 * c + 2 * c))
}
step_offload_largest() {
  need_gpu || return
  local available; available=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024))
  for model in L32-C4096-H32 L24-C4096-H32 L16-C4096-H32 L24-C2048-H16; do
    local need=$(($(params_of "$model") * 17))
    if [ "$need" -gt "$available" ]; then
      say "ZeRO-Offload $model: needs about $((need >> 30)) GiB of host memory, $((available >> 30)) GiB available: the next smaller"
      continue
    fi
    say "ZeRO-Offload $model ($(($(params_of "$model") / 1000000))M parameters; about $((need >> 30)) GiB of host memory of $((available >> 30)) GiB)"
    offload_run "$model" --batch 8 --gas 1 --clip 0 --stage 2 --steps 2 --warmup 1
    return
  done
  skip "no GPT-2 of the list fits this machine's host memory"
}
step_offload_nvme() {
  need_gpu || return
  [ -n "${ZERO_GPU_NVME:-}" ] || skip "ZERO_GPU_NVME not set (a directory on NVMe)"
  pkg-config --exists liburing 2>/dev/null || [ -d "$deps_root" ] || skip "no liburing here"
  offload_run L16-C4096-H32 --batch 8 --gas 4 --clip 1.0 --stage 2 --steps 1 --warmup 1 \
    --offload nvme --nvme-path "$ZERO_GPU_NVME"
}

status=0
step_began=0
for entry in "${!steps_var}"; do
  IFS=: read -r name seconds fn <<<"$entry"
  left=$((budget - $(elapsed)))
  if [ "$left" -lt 15 ]; then
    statuses+=("SKIP $name: the tier's ${budget} s are spent ($(elapsed) s)")
    continue
  fi
  step_seconds=$((seconds < left ? seconds : left))
  step_began=$(elapsed)
  say "== $name (up to ${step_seconds} s)"
  skip_reason=""
  begin=$(elapsed)
  set +e
  "$fn"
  rc=$?
  set -e
  took=$(($(elapsed) - begin))
  case "$rc" in
    0) statuses+=("PASS $name ($took s)") ;;
    77) statuses+=("SKIP $name: $skip_reason") ;;
    124) statuses+=("FAIL $name: over its ${step_seconds} s"); status=1
         [ "$fn" = step_build ] && break ;;
    *) statuses+=("FAIL $name ($took s)"); status=1
       # Nothing after a failed build can run.
       [ "$fn" = step_build ] && break ;;
  esac
done
statuses+=("== gpu-check tier $tier: $([ "$status" = 0 ] && echo OK || echo FAILED) in $(elapsed) s")
exit "$status"
