#!/usr/bin/env bash
# Prepares the Python peers of the benchmark (bench/peers/README.md). Idempotent: a second run
# installs and builds nothing, it only checks.
#   1. build/peers-venv: a virtual environment that sees the system site-packages, so it uses
#      the torch pinned by scripts/setup.sh (checked here) instead of installing another one.
#   2. deepspeed (pinned below) and its Python dependencies from PyPI, into the venv.
#   3. DeepSpeed's CPU ops, which it otherwise JIT-compiles at first use (minutes): fused_adam
#      (the optimizer a plain AdamW config gets on the CPU accelerator), cpu_adam
#      (DeepSpeedCPUAdam, used with optimizer offload) and deepspeed_shm_comm (built by every
#      deepspeed.init_distributed). They go to build/peers-venv/torch_extensions, which
#      run_peer.py uses too.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEEPSPEED_VERSION=0.19.8
VENV=build/peers-venv
PYTHON="${PYTHON:-python3}"
# The torch pin lives in scripts/setup.sh; read it from there so the two cannot drift.
# shellcheck disable=SC2016  # the ${...} is text to match, not to expand
TORCH_PIN="$(sed -n 's/^TORCH_VERSION="\${ZERO_TORCH_VERSION:-\([^}]*\)}"$/\1/p' scripts/setup.sh)"
TORCH_VERSION="${ZERO_TORCH_VERSION:-$TORCH_PIN}"
[ -n "$TORCH_VERSION" ] || { echo "peers setup: cannot read the torch pin from scripts/setup.sh" >&2; exit 1; }

export DS_ACCELERATOR=cpu
export TORCH_EXTENSIONS_DIR="$PWD/$VENV/torch_extensions"
export OMP_WAIT_POLICY=PASSIVE
unset OPENBLAS_CORETYPE

if [ ! -x "$VENV/bin/python" ]; then
  echo "peers setup: creating $VENV (with system site-packages, for the pinned torch)"
  mkdir -p build
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
PY="$PWD/$VENV/bin/python"
export PATH="$PWD/$VENV/bin:$PATH"  # the venv's ninja for DeepSpeed's JIT builds

have_torch="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
case "$have_torch" in
  "$TORCH_VERSION" | "$TORCH_VERSION"+*) ;;
  *)
    echo "peers setup: the venv sees torch '${have_torch:-none}', but the project pins $TORCH_VERSION;" \
      "run scripts/setup.sh first (it installs the pinned torch into $PYTHON)" >&2
    exit 1
    ;;
esac

have_ds="$("$PY" -c 'import importlib.metadata as m; print(m.version("deepspeed"))' 2>/dev/null || true)"
if [ "$have_ds" != "$DEEPSPEED_VERSION" ]; then
  echo "peers setup: installing deepspeed==$DEEPSPEED_VERSION into $VENV (found: ${have_ds:-none})"
  "$PY" -m pip install --quiet --disable-pip-version-check "deepspeed==$DEEPSPEED_VERSION"
fi
# deepspeed's requirements list torch without a pin; make sure pip did not replace ours.
have_torch_after="$("$PY" -c 'import torch; print(torch.__version__)')"
[ "$have_torch_after" = "$have_torch" ] ||
  { echo "peers setup: torch changed from $have_torch to $have_torch_after while installing deepspeed" >&2; exit 1; }

# Load (building if needed) each op. A load of an up-to-date op is a no-op ninja check.
"$PY" - <<'EOF'
import os, sys, time
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder, ShareMemCommBuilder

acc = get_accelerator()
if acc.device_name() != "cpu":
    sys.exit(f"peers setup: DeepSpeed chose accelerator {acc.device_name()!r}, expected 'cpu'")
root = os.environ["TORCH_EXTENSIONS_DIR"]
for builder in (FusedAdamBuilder(), CPUAdamBuilder(), ShareMemCommBuilder()):
    name = builder.NAME
    built = os.path.exists(os.path.join(root, name, name + ".so"))
    if not built:
        print(f"peers setup: building DeepSpeed op {name} (JIT, a few minutes) ...", flush=True)
    start = time.time()
    builder.load(verbose=False)
    if not built:
        print(f"peers setup: built {name} in {time.time() - start:.0f} s", flush=True)
print(f"peers setup: ok (torch {__import__('torch').__version__}, deepspeed "
      f"{__import__('deepspeed').__version__}, accelerator cpu, comm backend "
      f"{acc.communication_backend_name()}, ops in {root})")
EOF
