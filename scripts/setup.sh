#!/usr/bin/env bash
# Installs what zero needs and is missing, then configures the build directory. Idempotent:
# a second run installs nothing and only re-runs cmake's configure step if needed.
#   Debian packages: compiler, CMake, Ninja, OpenMPI, nlohmann-json, CLI11, zlib, liburing, PCRE2,
#   protobuf (TensorBoard event files), fio,
#   GoogleTest,
#   and clang with its sanitizer and fuzzer runtimes (scripts/sanitize.sh).
#   PyPI: torch (pinned below), whose wheel carries libtorch and its CMake config; the
#   safetensors and transformers packages for the interoperability tests (optional).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION="${ZERO_TORCH_VERSION:-2.15.0}"
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
PYTHON="${PYTHON:-python3}"

# clang, its sanitizer and libFuzzer runtimes and llvm-symbolizer: scripts/sanitize.sh.
# liburing-dev: NVMe offload's swap-file I/O; fio: the disk benchmark (bench/disk_limit.sh).
apt_packages=(g++ cmake ninja-build pkg-config libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev
              zlib1g-dev liburing-dev libpcre2-dev libprotobuf-dev protobuf-compiler fio libgtest-dev
              clang libclang-rt-dev llvm)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

have_torch="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
if [ "${have_torch%%+*}" != "$TORCH_VERSION" ]; then
  echo "setup: installing torch==$TORCH_VERSION from PyPI (found: ${have_torch:-none})"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# Python packages only the tests and benchmarks that compare with them use; such a test skips
# without its package, and scripts/test.sh lists the skip. With ZERO_REQUIRE_ALL_TESTS=1 (CI)
# a failed install fails setup instead.
install_optional() {  # MODULE PIP_NAME VERSION PURPOSE
  "$PYTHON" -c "import $1" 2>/dev/null && return 0
  echo "setup: installing $2==$3 from PyPI ($4)"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "$2==$3" && return 0
  if [ "${ZERO_REQUIRE_ALL_TESTS:-0}" = 1 ]; then
    echo "setup: $2 could not be installed, and every test must run here"; exit 1
  fi
  echo "setup: $2 not installed; $4 will be skipped"
}
# The safetensors reference implementation: tests/checkpoint/check_python_interop.py.
install_optional safetensors safetensors 0.8.0 "the safetensors interop test"
# Hugging Face transformers: loads zero-ckpt exports (tests/train/check_hf_export.sh), makes the
# pretrained directories (tests/models/), and is the reference for zero-generate.
install_optional transformers transformers 5.23.0 "the Hugging Face tests"
# tiktoken: zero's GPT-2 encoder against it (tests/data/check_encoder_vs_tiktoken.py,
# bench/encoder_vs_tiktoken.py).
install_optional tiktoken tiktoken 0.14.0 "the encoder's comparison test"
# tokenizers (transformers' own, pinned to the version its tests were checked with): the
# reference for zero's tokenizer.json encoder (tests/data/make_hf_tokenizers.py,
# bench/bench_hf_tokenizer.py).
install_optional tokenizers tokenizers 0.23.3 "the Hugging Face tokenizer test"
# tensorboard: reads zero's event files (tests/train/check_tensorboard.py).
install_optional tensorboard tensorboard 2.20.0 "the event file test"
TORCH_PREFIX="$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"

# Linked with --as-needed, as Ubuntu's toolchain links by default (Debian's does not): a library
# that the link would drop although it is needed for its side effects (libtorch_cuda registers
# ATen's CUDA kernels) then fails here, in test_cuda_linkage, not on a GPU machine.
# Compiled with clang (installed above for the sanitizers): the libtorch headers compile 2.2x
# faster than with g++ 12 (the whole build, 3.2 against 7 minutes on 2 cores), which keeps the
# suite within its time. GCC still compiles the libraries in the suite (scripts/torch-compat.sh,
# against the oldest supported torch) and on the GPU machines (scripts/gpu-check.sh);
# ZERO_CXX=g++ scripts/setup.sh builds ./build with it.
CXX_COMPILER="${ZERO_CXX:-clang++}"
C_COMPILER="${ZERO_CC:-clang}"
if [ "$CXX_COMPILER" = "g++" ]; then C_COMPILER="${ZERO_CC:-gcc}"; fi
if ! command -v "$CXX_COMPILER" >/dev/null; then CXX_COMPILER=g++; C_COMPILER=gcc; fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DCMAKE_C_COMPILER="$C_COMPILER" -DCMAKE_CXX_COMPILER="$CXX_COMPILER" \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--as-needed \
    >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
fi
