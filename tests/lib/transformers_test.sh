# Sourced by the end-to-end tests that check zero against Hugging Face transformers:
#   source tests/lib/transformers_test.sh; transformers_test PYTHON WORK_DIR [MODULE...]
# cd to the repository (zero's default data paths), skip (exit 77) when PYTHON lacks
# transformers or one of the MODULEs, empty WORK_DIR, and define fail MESSAGE (exit 1).
transformers_test() {
  local python="$1" work="$2"; shift 2
  local modules="transformers"
  for module in "$@"; do modules+=", $module"; done
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
  if ! "$python" -c "import $modules" >/dev/null 2>&1; then
    echo "transformers is not installed for $python: skipped"; exit 77
  fi
  rm -rf "$work"; mkdir -p "$work"
}
fail() { echo "CHECK FAILED: $*"; exit 1; }
