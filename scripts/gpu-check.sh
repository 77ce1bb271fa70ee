#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU: builds zero with CUDA against that machine's
# torch, runs the CUDA tests and the GPU benchmarks, and writes gpu-check-results.txt (and a
# copy to $OUT when set). Idempotent; incremental after the first run.
#
#   scripts/gpu-check.sh [--quick]     --quick: the tests only, no benchmarks
#
# Needs: python3 with a CUDA build of torch, the CUDA toolkit (nvcc, runtime headers), a C++
# compiler, CMake and Ninja (or make), and the Debian packages scripts/setup.sh names for MPI,
# nlohmann-json, CLI11, GoogleTest, liburing and zlib. Where they are not installed and apt is
# there (and we are root), they are installed. Where apt is not (the lent GPU machines: no
# apt, no network), they come from .gpu-deps/*.deb, which scripts/gpu-deps.sh downloads on a
# Debian machine beforehand; they are unpacked into build-gpu.deps/ and used from there (Open MPI
# relocated with OPAL_PREFIX). The machine's own torch is used, never replaced.
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
cmake_args=()
deps_root="$repo/$BUILD_DIR.deps"  # unpacked here (ignored; only .gpu-deps/*.deb travel)
# ZERO_GPU_DEPS=debs uses .gpu-deps even where the packages are installed (to try that path).
if [ "${ZERO_GPU_DEPS:-auto}" != debs ] && command -v mpicc >/dev/null &&
   [ -f /usr/include/nlohmann/json.hpp ]; then
  say "dependencies: installed"
elif [ "${ZERO_GPU_DEPS:-auto}" != debs ] && command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ] &&
     apt-get update -qq 2>/dev/null; then
  say "dependencies: installing from apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ cmake ninja-build pkg-config \
    libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev zlib1g-dev liburing-dev \
    libgtest-dev >/dev/null
elif ls .gpu-deps/*.deb >/dev/null 2>&1; then
  say "dependencies: unpacking .gpu-deps/*.deb into $deps_root"
  if [ ! -f "$deps_root/.unpacked" ]; then
    rm -rf "$deps_root" && mkdir -p "$deps_root"
    for deb in .gpu-deps/*.deb; do dpkg-deb -x "$deb" "$deps_root" 2>/dev/null || dpkg -x "$deb" "$deps_root"; done
    # Debian makes these names with update-alternatives at install time.
    for tool in mpirun mpiexec mpicc mpicxx; do
      ln -sf "$tool.openmpi" "$deps_root/usr/bin/$tool"
    done
    ln -sf pkgconf "$deps_root/usr/bin/pkg-config"
    touch "$deps_root/.unpacked"
  fi
  lib="$deps_root/usr/lib/x86_64-linux-gnu"
  export OPAL_PREFIX="$deps_root/usr"
  export PATH="$deps_root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$deps_root"
  cmake_args+=(-DMPI_C_COMPILER="$deps_root/usr/bin/mpicc.openmpi"
               -DMPIEXEC_EXECUTABLE="$deps_root/usr/bin/mpirun.openmpi"
               -DPKG_CONFIG_EXECUTABLE="$deps_root/usr/bin/pkgconf")
  TORCH_PREFIX="$TORCH_PREFIX;$deps_root/usr"
else
  say "dependencies: missing (no apt here): run scripts/gpu-deps.sh on a Debian machine and bring .gpu-deps/"
  exit 1
fi

# ---- build ---------------------------------------------------------------------------------
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DZERO_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${cmake_args[@]}" >"$BUILD_DIR.configure.log" 2>&1 ||
    { tail -40 "$BUILD_DIR.configure.log" | tee -a "$results"; exit 1; }
fi
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
targets=(test_cuda test_comm_staged test_optimizer)
[ "$quick" = 1 ] || targets+=(bench_cuda)
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
run_test test_cuda 1
run_test test_cuda 2
run_test test_comm_staged 2
run_test test_optimizer 1

# ---- benchmarks ----------------------------------------------------------------------------
if [ "$quick" = 0 ]; then
  say "== benchmarks"
  for stage in 0 2 3; do
    "${mpirun_cmd[@]}" -np 1 "$BUILD_DIR/bench/bench_cuda" --stage "$stage" --rounds 2 2>&1 |
      grep -E "^bench_cuda|error" | tee -a "$results" || status=1
  done
  "$PYTHON" bench/pytorch_gpt2_cuda.py 2>&1 | grep -E "^pytorch_gpt2|Error" | tee -a "$results" || status=1
fi

say "== gpu-check: $([ "$status" = 0 ] && echo OK || echo FAILED)"
[ -n "${OUT:-}" ] && [ -d "$OUT" ] && cp "$results" "$OUT/"
exit "$status"
