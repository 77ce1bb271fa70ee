# Sourced by the end-to-end tests that check zero against Hugging Face's Python packages:
#   source tests/lib/transformers_test.sh; transformers_test PYTHON WORK_DIR [MODULE...]
# cd to the repository (zero's default data paths), skip (exit 77) when PYTHON lacks
# transformers or one of the MODULEs, empty WORK_DIR, and define fail MESSAGE (exit 1).
# python_modules_test PYTHON WORK_DIR MODULE... does the same for the MODULEs alone.
python_modules_test() {
  local python="$1" work="$2"; shift 2
  local modules="$1"; shift
  for module in "$@"; do modules+=", $module"; done
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
  if ! "$python" -c "import $modules" >/dev/null 2>&1; then
    echo "${modules%%,*} is not installed for $python: skipped"; exit 77
  fi
  rm -rf "$work"; mkdir -p "$work"
}
transformers_test() {
  local python="$1" work="$2"; shift 2
  python_modules_test "$python" "$work" transformers "$@"
}
fail() { echo "CHECK FAILED: $*"; exit 1; }
