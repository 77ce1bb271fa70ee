#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU: builds zero with CUDA against that machine's
# torch, runs the CUDA tests and the GPU benchmarks, and writes gpu-check-results.txt (and a
# copy to $OUT when set). Idempotent; incremental after the first run.
#
#   scripts/gpu-check.sh [--quick]     --quick: the tests only, no benchmarks
#   ZERO_GPU_BIG=0: no 6.65B ZeRO-Offload runs; ZERO_GPU_NVME=DIR: an NVMe-offload run too
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
quick=0
[ "${1:-}" = "--quick" ] && quick=1
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${ZERO_GPU_BUILD_DIR:-build-gpu}"
results="$repo/gpu-check-results.txt"
: >"$results"
say() { echo "$@" | tee -a "$results"; }

say "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee -a "$results" || say "nvidia-smi: not found"
torch_info="$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())')"
say "torch (version, CUDA, available, devices): $torch_info"
TORCH_PREFIX="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"

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
      [ -n "$f" ] || { say "dependencies: $dep is missing here and .gpu-deps has no ${p}_*.deb: run scripts/gpu-deps.sh on a Debian machine and bring .gpu-deps/"; exit 1; }
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

# ---- build ---------------------------------------------------------------------------------
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DZERO_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${cmake_args[@]}" >"$BUILD_DIR.configure.log" 2>&1 ||
    { tail -40 "$BUILD_DIR.configure.log" | tee -a "$results"; exit 1; }
fi
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
targets=(test_cuda_linkage test_cuda test_comm_staged test_optimizer zero-train zero-generate)
[ "$quick" = 1 ] || targets+=(bench_cuda bench_offload_cuda)
say "== build (${targets[*]}, $jobs jobs)"
cmake --build "$BUILD_DIR" -j "$jobs" --target "${targets[@]}" >"$BUILD_DIR.build.log" 2>&1 ||
  { grep -E "error|Error" "$BUILD_DIR.build.log" | head -40 | tee -a "$results"; exit 1; }

# ---- tests ---------------------------------------------------------------------------------
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
status=0
run_test() {  # NAME RANKS
  local log="$BUILD_DIR/$1-np$2.log"
  if "${mpirun_cmd[@]}" -np "$2" "$BUILD_DIR/tests/$1" --gtest_color=no >"$log" 2>&1; then
    say "PASS $1 at $2 rank(s): $(grep -c '^\[       OK .* ms)$' "$log") passed, $(grep -c '^\[  SKIPPED \] .* ms)$' "$log") skipped"
  else
    say "FAIL $1 at $2 rank(s):"
    grep -E "Failure|FAILED|error|Expected|Which is|Value of|Actual" "$log" | head -40 | tee -a "$results"
    status=1
  fi
}
say "== tests"
if "$BUILD_DIR/tests/test_cuda_linkage" --gtest_color=no >"$BUILD_DIR/test_cuda_linkage.log" 2>&1; then
  say "PASS test_cuda_linkage (libtorch's CUDA kernels registered with zero_cuda)"
else
  say "FAIL test_cuda_linkage:"; grep -E "Failure|error" -A3 "$BUILD_DIR/test_cuda_linkage.log" | head -20 | tee -a "$results"
  status=1
fi
run_test test_cuda 1
run_test test_cuda 2
run_test test_comm_staged 2
run_test test_optimizer 1
# zero-train on the GPU end to end (--device cuda): every stage, and ZeRO-Offload at stages 2
# and 3, each 30 steps of gpt2-tiny; the loss must fall and the run end cleanly.
has_gpu="$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))')"
train_cuda() {  # NAME CONFIG_JSON
  local dir="$BUILD_DIR/zero-train-$1" log="$BUILD_DIR/zero-train-$1.log"
  rm -rf "$dir"; mkdir -p "$dir"; echo "$2" >"$dir/config.json"
  if timeout 300 "$BUILD_DIR/bin/zero-run" -n 1 -- "$BUILD_DIR/bin/zero-train" --device cuda \
       --config "$dir/config.json" --steps 30 --eval-every 0 --sample-tokens 8 --out "$dir/run" \
       --save-every 30 >"$log" 2>&1 &&
     awk -F, 'NR==2 {first=$2} END {exit !($2 < first)}' "$dir/run/metrics.csv"; then
    say "PASS zero-train --device cuda $1: $(grep -m1 'tokens/s' "$log" | tr -s ' ') | $(grep -m1 'GPU memory peak' "$log" | tr -s ' ')"
  else
    say "FAIL zero-train --device cuda $1:"; tail -15 "$log" | tee -a "$results"; status=1
  fi
}
if [ "$has_gpu" = 1 ]; then
  common='"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}'
  for stage in 0 1 2 3; do
    train_cuda "stage$stage" "{$common, \"zero_optimization\": {\"stage\": $stage}}"
  done
  # zero-generate --device cuda from stage 0's checkpoint: greedy, with and without the KV
  # cache; the two continuations must be the same text (issue 26), and the rates are recorded.
  generate_cuda() {  # LOG [--no-kv-cache]
    timeout 120 "$BUILD_DIR/bin/zero-generate" --model "$BUILD_DIR/zero-train-stage0/run" \
      --device cuda --prompt "The whale and the sea" --max-tokens 64 --temperature 0 "${@:2}" \
      >"$1.txt" 2>"$1.err"
  }
  if generate_cuda "$BUILD_DIR/generate-cache" && generate_cuda "$BUILD_DIR/generate-nocache" --no-kv-cache &&
     cmp -s "$BUILD_DIR/generate-cache.txt" "$BUILD_DIR/generate-nocache.txt"; then
    say "PASS zero-generate --device cuda, the same greedy text with and without the KV cache: $(grep tokens/s "$BUILD_DIR/generate-cache.err") | $(grep tokens/s "$BUILD_DIR/generate-nocache.err")"
  else
    say "FAIL zero-generate --device cuda:"; tail -5 "$BUILD_DIR"/generate-*.err "$BUILD_DIR"/generate-*.txt | tee -a "$results"; status=1
  fi
  for stage in 2 3; do
    train_cuda "stage$stage-offload" "{$common, \"zero_optimization\": {\"stage\": $stage, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}}"
  done
else
  say "SKIP zero-train --device cuda: no CUDA device"
fi

# ---- benchmarks ----------------------------------------------------------------------------
if [ "$quick" = 0 ]; then
  say "== benchmarks"
  for stage in 0 2 3; do
    "${mpirun_cmd[@]}" -np 1 "$BUILD_DIR/bench/bench_cuda" --stage "$stage" --rounds 2 --profile 3 2>&1 |
      grep -E "^bench_cuda|error" | tee -a "$results" || status=1
  done
  "$PYTHON" bench/pytorch_gpt2_cuda.py 2>&1 | grep -E "^pytorch_gpt2|Error" | tee -a "$results" || status=1
  # The torch.compile baseline of issue 25 (a nanoGPT-style model), with its kernel breakdown
  # beside bench_cuda's (--profile).
  timeout 420 "$PYTHON" bench/pytorch_nanogpt_compile.py --runs eager,compile_padded --profile 3 2>&1 |
    grep -E "^pytorch_nanogpt|Error" | tee -a "$results" || status=1
  # ZeRO-Offload of a model plain PyTorch cannot fit on an 80 GB GPU (issue 24): 6.65B
  # parameters (L32 C4096, head size 128), optimizer state in pinned host memory. With clipping
  # and 4 micro-batches of 8 x 1024 tokens per step at stage 1 (gradients accumulate on the GPU
  # and go down once; the step waits for the norm), and without clipping at one micro-batch at
  # stage 2 (the step overlaps backward). The plans: 58 / 47 GiB of the GPU, 99 GiB of host
  # memory (zero-train --plan --device cuda). ZERO_GPU_BIG=0 skips them;
  # ZERO_GPU_NVME=DIR adds a run with the optimizer state on NVMe under DIR (a smaller model:
  # its swap files must fit the disk).
  if [ "${ZERO_GPU_BIG:-1}" != 0 ] && [ "$has_gpu" = 1 ]; then
    offload_bench() {
      timeout 420 "${mpirun_cmd[@]}" -np 1 \
        "$BUILD_DIR/bench/bench_offload_cuda" "$@" 2>&1 |
        grep -E "^bench_offload_cuda (model|result|split|built)|error|Error|what" | tee -a "$results" || status=1
    }
    offload_bench --model L32-C4096-H32 --batch 8 --gas 4 --clip 1.0 --stage 1 --steps 2
    offload_bench --model L32-C4096-H32 --batch 8 --gas 1 --clip 0 --stage 2 --steps 3
    if [ -n "${ZERO_GPU_NVME:-}" ]; then
      offload_bench --model L16-C4096-H32 --batch 8 --gas 4 --clip 1.0 --stage 2 --steps 2 \
        --offload nvme --nvme-path "$ZERO_GPU_NVME"
    fi
  fi
fi

say "== gpu-check: $([ "$status" = 0 ] && echo OK || echo FAILED)"
[ -n "${OUT:-}" ] && [ -d "$OUT" ] && cp "$results" "$OUT/"
exit "$status"
