#!/usr/bin/env bash
# zero as a C++ project adopts it: `cmake --install` of this build into a fresh prefix, then
# examples/ configured and built on its own with find_package(zero) (zero::zero, zero::gpt2),
# and its train_minimal run on 2 ranks against the installed libraries. This checks the
# package files, the exported targets, that the public API is exported (the example links
# the shared libraries, which hide everything else) and the installed rpaths.
#   check_install.sh BUILD_DIR WORK_DIR MPIEXEC
set -uo pipefail
build="$1"; work="$2"; mpiexec="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
fail() { echo "CHECK FAILED: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -30 "$f"; done; exit 1; }
rm -rf "$work"; mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || fail "cmake --install failed"
for f in lib/cmake/zero/zeroConfig.cmake lib/cmake/zero/zeroTargets.cmake include/zero/engine.h \
         bin/zero-train bin/zero-ckpt bin/zero-run; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done
ls "$prefix"/lib/libzero.so* >/dev/null 2>&1 || fail "the install lacks libzero.so"
torch_prefix="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
cmake -S "$repo/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" >"$work/configure.log" 2>&1 ||
  fail "examples/ does not configure against the installed package"
cmake --build "$work/examples" >"$work/build.log" 2>&1 || fail "examples/ does not build against the installed package"
program="$work/examples/train_minimal"
ldd "$program" | grep -q "$prefix/lib/libzero.so" || { ldd "$program"; fail "train_minimal does not load the installed libzero.so"; }
cat >"$work/fp32.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}}
JSON
"$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2 \
  "$program" "$work/fp32.json" 3 >"$work/run.log" 2>&1 || fail "train_minimal failed"
grep -q "ZeRO stage 2 on 2 ranks" "$work/run.log" || fail "train_minimal did not report its run"
# The installed zero-train finds its libraries through its rpath.
"$prefix/bin/zero-train" --help >"$work/help.log" 2>&1 || fail "the installed zero-train does not start"
echo "OK: installed to $prefix; examples/ built against find_package(zero) and trained:"
grep -E "^step|ZeRO stage" "$work/run.log"
