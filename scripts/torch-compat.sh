#!/usr/bin/env bash
# Part of the test suite (scripts/test.sh runs it after ctest): compiles zero's libraries
# (zero, zero_gpt2 and, with CUDA, zero_cuda) and its programs with GCC against the OLDEST
# libtorch zero supports, and links them with --no-undefined and --as-needed, so that a use of
# an API the oldest version lacks fails CI here instead of a build on a GPU machine that has
# that torch. With CUDA, every CUDA-bearing target too: test_cuda, test_cuda_linkage and
# test_cuda_kernels, the CUDA benchmarks (bench_cuda, bench_offload_cuda, bench_fused_kernels
# with its --device cuda; the kernels of src/cuda/kernels by nvcc) and the programs that train
# on a GPU (zero-train, zero-generate); the suite's own build compiles the same against the newest.
# Programs link with --allow-shlib-undefined: libtorch_cuda's own CUDA dependencies (cuSPARSELt,
# NVSHMEM, ...) come in wheels of their own that are not fetched; every symbol of zero's is
# still resolved (the libraries link with --no-undefined). The suite itself
# runs against the pinned (newest) torch of scripts/setup.sh. Supported: README, "Supported
# libtorch versions".
#
# The C++ API needs only the wheel's headers, CMake package and libraries: the wheel is
# downloaded from PyPI once (no dependencies, nothing installed into any Python) and the parts
# needed are unpacked into ~/.cache/zero/torch-VERSION, reused by later runs. Unoptimised (-O0):
# this checks that the code compiles and links, it runs nothing. Idempotent, incremental.
#   ZERO_TORCH_COMPAT=0 makes scripts/test.sh skip it (a quick local run only: CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
OLDEST="${ZERO_TORCH_OLDEST:-2.11.0}"
PYTHON="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/zero/torch-$OLDEST"
BUILD_DIR="${ZERO_COMPAT_BUILD_DIR:-build-torch$OLDEST}"

if [ ! -f "$cache/.complete" ]; then
  echo "torch-compat: fetching the torch $OLDEST wheel from PyPI (C++ headers and libraries only)"
  rm -rf "$cache" && mkdir -p "$cache/wheel"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps "torch==$OLDEST" \
    -d "$cache/wheel"
  "$PYTHON" - "$cache" <<'PY'
import glob, sys, zipfile
cache = sys.argv[1]
wheel = glob.glob(f"{cache}/wheel/torch-*.whl")[0]
libs = {f"torch/lib/{n}" for n in ("libtorch_cpu.so", "libc10.so", "libtorch.so",
                                   "libtorch_cuda.so", "libc10_cuda.so", "libtorch_nvshmem.so")}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(("torch/include/", "torch/share/cmake/")) or name in libs:
            z.extract(name, cache)
PY
  rm -rf "$cache/wheel"
  touch "$cache/.complete"
fi

# With GCC: the suite's own build uses clang (scripts/setup.sh), so GCC compiles the libraries
# here (the GPU machines' compiler). Configured every run (quick when nothing changed), so an
# option changed here reaches a build directory made by an earlier version of this script.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_PREFIX_PATH="$cache/torch/share/cmake" -DZERO_BUILD_BENCHMARKS=ON \
  "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--no-undefined -Wl,--as-needed" \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed -Wl,--allow-shlib-undefined" \
  >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; rm -rf "$BUILD_DIR"; exit 1; }
targets=(zero zero_gpt2 zero-train zero-generate)
if grep -q "zero: CUDA support TRUE" "$BUILD_DIR.configure.log"; then
  targets+=(zero_cuda test_cuda test_cuda_linkage test_cuda_kernels bench_cuda bench_offload_cuda
            bench_fused_kernels)
fi
echo "== torch-compat: building ${targets[*]} against torch $OLDEST ($BUILD_DIR)"
cmake --build "$BUILD_DIR" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" \
  --target "${targets[@]}" >"$BUILD_DIR.build.log" 2>&1 ||
  { grep -E "error|undefined reference" -A3 "$BUILD_DIR.build.log" | head -60; exit 1; }
echo "torch-compat: ${targets[*]} compile and link against torch $OLDEST"
