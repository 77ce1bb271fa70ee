#!/usr/bin/env bash
# The README's zero-train usage table names every option `zero-train --help` has, and no
# option that it does not.
#   check_readme_usage.sh ZERO_TRAIN README
set -uo pipefail
zero_train="$1"; readme="$2"
help_options=$("$zero_train" --help | grep -oE -- '--[a-z][a-z-]+' | grep -v -- '--help' | sort -u)
readme_options=$(grep -E '^\| `--' "$readme" | grep -oE -- '^\| `--[a-z][a-z-]+' | sed 's/^| `//' | sort -u)
if [ "$help_options" != "$readme_options" ]; then
  echo "README.md's zero-train options differ from --help (< --help, > README):"
  diff <(echo "$help_options") <(echo "$readme_options")
  exit 1
fi
echo "OK: README.md lists the $(echo "$help_options" | wc -l) options of zero-train --help"
