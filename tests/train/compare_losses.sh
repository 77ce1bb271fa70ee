#!/usr/bin/env bash
# Two zero-train runs trained alike: their metrics.csv have the same steps, and every step's
# training loss, and validation loss where evaluated, is within TOLERANCE (absolute).
#   compare_losses.sh A/metrics.csv B/metrics.csv TOLERANCE
set -euo pipefail
a="$1"; b="$2"; tolerance="$3"
for f in "$a" "$b"; do [ -s "$f" ] || { echo "CHECK FAILED: no $f"; exit 1; }; done
[ "$(wc -l < "$a")" -eq "$(wc -l < "$b")" ] || {
  echo "CHECK FAILED: $a and $b have different numbers of steps"; exit 1; }
# Columns: step,loss,val_loss,... (val_loss empty where not evaluated).
paste -d, <(tail -n +2 "$a" | cut -d, -f1-3) <(tail -n +2 "$b" | cut -d, -f1-3) |
  awk -F, -v tol="$tolerance" '
    function check(what, x, y,   d) {
      d = x - y; if (d < 0) d = -d; if (d > worst) worst = d
      if (d > tol) { printf "CHECK FAILED: step %s %s %s vs %s\n", $1, what, x, y; bad = 1 }
      return d
    }
    { if ($1 != $4) { print "CHECK FAILED: step " $1 " vs " $4; bad = 1 }
      printf "step %s: loss %s vs %s (|diff| %.2e)", $1, $2, $5, check("loss", $2, $5)
      if (($3 == "") != ($6 == "")) { print ""; print "CHECK FAILED: step " $1 " evaluated in one run only"; bad = 1 }
      else if ($3 != "") printf ", validation %s vs %s (|diff| %.2e)", $3, $6, check("validation loss", $3, $6)
      print "" }
    END { if (NR == 0) { print "CHECK FAILED: no steps"; exit 1 }
          if (bad) exit 1; printf "OK: %d steps, largest difference %.2e (tolerance %s)\n", NR, worst, tol }'
