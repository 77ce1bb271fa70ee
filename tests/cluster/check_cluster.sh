#!/usr/bin/env bash
# zero across nodes (scripts/cluster.sh: network namespaces with their own hostname and
# /dev/shm, nothing between them but TCP):
#  1. 2 nodes x 2 ranks give bitwise the losses and gradient norms of 4 ranks on one node cut
#     into 2 virtual nodes (ZERO_RANKS_PER_NODE=2), at ZeRO stages 0-3: the hierarchical
#     collectives' reduction order depends on the topology's shape, not on where the nodes are
#     (Note [Hierarchical collectives]); and, at stage 2, with the flat ring
#     (ZERO_HIERARCHICAL_COLLECTIVES=0) against 4 ranks on one node as they run by default (the
#     ring's order, Note [MPI ring order], which one node's shared-memory reduce-scatter keeps);
#  2. ZeRO++ (Note [ZeRO++]) on the 2 nodes: all three parts, and qgZ alone, give bitwise the
#     losses and exactly the bytes across nodes of the same runs on 2 virtual nodes (whose bytes
#     test_zeropp holds to the note's formulas), losses within 1e-2 relative of plain stage 3
#     on the nodes (test_zeropp's tolerance), and all three move >= 4x less across nodes;
#  3. stage 3's checkpoint saved on 2 nodes (4 ranks) at step 3 resumes on 1 node (2 ranks) and
#     on 3 nodes (6 ranks), resharded, and steps 4-6 are within 1e-5 relative of the
#     uninterrupted run (the global batch is the same at every world size: 12 sequences, the
#     accumulation steps follow the world size).
# Skips (77) with the reason when this machine cannot make the namespaces.
#   check_cluster.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"; source_dir="$(cd "$2" && pwd)"
work="$build/tests/cluster"
cluster=("$source_dir/scripts/cluster.sh")
cluster_args=(--dir "$work/nodes" --id 231)  # apart from a user's cluster (default id 17)
if ! reason="$("${cluster[@]}" check 2>&1)"; then echo "SKIPPED: $reason"; exit 77; fi
rm -rf "$work"; mkdir -p "$work"
trap '"${cluster[@]}" down "${cluster_args[@]}" >/dev/null 2>&1' EXIT
"${cluster[@]}" up 3 "${cluster_args[@]}" || exit 1
hostfile="$work/nodes/hostfile"
# Hostfiles of the first 1 and 2 nodes, beside the 3-node one (the same MCA parameters).
for n in 1 2; do
  head -n "$n" "$hostfile" >"$work/nodes/hostfile$n"
  cp "$hostfile.mca" "$work/nodes/hostfile$n.mca"
done
cd "$source_dir"  # zero-train's default data paths
failures=0
fail() { echo "CHECK FAILED: $*"; failures=$((failures + 1)); }

train() {  # NAME RANKS HOSTFILE|"" STAGE ARGS...: one zero-train run into $work/NAME
  # (the ZERO_* variables set for it reach every rank through zero-run)
  local name="$1" ranks="$2" hosts="$3" stage="$4"; shift 4
  local extra="${zero_extra:-}"  # more zero_optimization keys, e.g. ZeRO++'s
  [ "$stage" = 3 ] && extra=', "stage3_param_persistence_threshold": 0'"$extra"
  cat >"$work/$name.json" <<JSON
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage$extra}}
JSON
  local where=()
  [ -n "$hosts" ] && where=(--hostfile "$hosts")
  if ! timeout 300 "$build/bin/zero-run" -n "$ranks" "${where[@]}" -- "$build/bin/zero-train" \
      --config "$work/$name.json" --seq-len 64 --eval-every 0 --sample-tokens 1 \
      --out "$work/$name" "$@" >"$work/$name.log" 2>&1; then
    fail "$name: zero-train failed"; sed 's/^/    | /' "$work/$name.log" | tail -25
    return 1
  fi
}

# Step, loss and gradient norm of each step, as printed (every digit).
columns() { cut -d, -f1,2,5 "$1/metrics.csv"; }

# The largest relative difference of the losses of steps >= FIRST between two runs, or
# "missing" unless there are ROWS such steps.
worst_relative() {  # A B FIRST ROWS
  awk -F, -v first="$3" -v rows="$4" 'FNR == 1 { next } FNR == NR { want[$1] = $2; next }
      $1 >= first { d = $2 - want[$1]; if (d < 0) d = -d; r = d / want[$1]; if (r > w) w = r; n++ }
      END { if (n != rows) print "missing"; else printf "%.2e", w }' "$work/$1/metrics.csv" "$work/$2/metrics.csv"
}

same() {  # A B WHAT: the two runs' columns are identical
  if [ "$(columns "$work/$1")" = "$(columns "$work/$2")" ]; then
    echo "$3: 6 steps, losses and gradient norms identical ($(columns "$work/$1" | tail -1))"
  else
    fail "$3: $1 and $2 differ"
    paste -d' ' <(columns "$work/$1") <(columns "$work/$2") | sed 's/^/    | /'
  fi
}

echo "== 2 nodes x 2 ranks against 4 ranks on one node, bitwise"
for stage in 0 1 2 3; do
  save=()
  [ "$stage" = 3 ] && save=(--save-every 3)
  train "nodes2-stage$stage" 4 "$work/nodes/hostfile2" "$stage" --steps 6 "${save[@]}" || continue
  ZERO_RANKS_PER_NODE=2 train "virtual2-stage$stage" 4 "" "$stage" --steps 6 || continue
  same "nodes2-stage$stage" "virtual2-stage$stage" "stage $stage, hierarchical"
done
ZERO_HIERARCHICAL_COLLECTIVES=0 train nodes2-flat 4 "$work/nodes/hostfile2" 2 --steps 6 &&
  train local-flat 4 "" 2 --steps 6 && same nodes2-flat local-flat "stage 2, flat ring"
# The runs printed where their ranks were, and counted the bytes between nodes.
grep -q "ranks: 2 nodes x 2 ranks: node1 (ranks 0-1), node2 (ranks 2-3)" "$work/nodes2-stage0.log" ||
  fail "the 2-node run's log does not say where its ranks ran"
grep -q "ranks: 2 nodes x 2 ranks: virtual-node-0 (ranks 0-1)" "$work/virtual2-stage0.log" ||
  fail "the virtual 2-node run's log does not say where its ranks ran"
for run in nodes2-stage0 nodes2-flat; do
  line="$(grep -m1 'across nodes' "$work/$run.log")"
  # "across nodes  MEASURED MiB  EXPECTED MiB (...)": measured equals the formula.
  read -r measured expected <<<"$(echo "$line" | awk '{print $3, $5}')"
  if [ -n "$measured" ] && [ "$measured" = "$expected" ]; then
    echo "$run: $line"
  else
    fail "$run: bytes across nodes differ from the formula: '$line'"
  fi
done

echo "== ZeRO++ on 2 nodes x 2 ranks: as on 2 virtual nodes, close to plain stage 3"
# "  across nodes   13.1 MiB  plain stage 3: ...: 8.0 x less" -> "13.1 8.0"
across() { grep -m1 '^ *across nodes' "$work/$1.log" | sed -nE 's/^ *across nodes +([0-9.]+ [KMG]?i?B).*: ([0-9.]+) x less.*/\1|\2/p'; }
all_three=', "zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true'
for variant in all-three qgz; do
  extra="$all_three"; [ "$variant" = qgz ] && extra=', "zero_quantized_gradients": true'
  zero_extra="$extra" train "nodes2-$variant" 4 "$work/nodes/hostfile2" 3 --steps 6 || continue
  ZERO_RANKS_PER_NODE=2 zero_extra="$extra" train "virtual2-$variant" 4 "" 3 --steps 6 || continue
  same "nodes2-$variant" "virtual2-$variant" "ZeRO++ $variant, nodes against virtual nodes"
  nodes="$(across "nodes2-$variant")"; virtual="$(across "virtual2-$variant")"
  if [ -n "$nodes" ] && [ "$nodes" = "$virtual" ]; then
    echo "ZeRO++ $variant: across nodes ${nodes%|*} per step on both, ${nodes#*|} x less than plain stage 3's formula"
  else
    fail "ZeRO++ $variant: bytes across nodes '$nodes' on the nodes, '$virtual' on virtual nodes"
  fi
  if [ "$variant" = all-three ] && ! awk -v r="${nodes#*|}" 'BEGIN { exit !(r >= 4) }'; then
    fail "ZeRO++ all three: ${nodes#*|} x less across nodes than plain stage 3, expected >= 4"
  fi
  worst="$(worst_relative nodes2-stage3 "nodes2-$variant" 1 6)"
  if [ "$worst" != missing ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-2) }'; then
    echo "ZeRO++ $variant: losses within $worst relative of plain stage 3"
  else
    fail "ZeRO++ $variant: losses differ from plain stage 3 by $worst relative (tolerance 1e-2)"
  fi
done

echo "== stage 3's checkpoint of step 3 (2 nodes, 4 ranks) resumed on 1 node and on 3"
checkpoint="$work/nodes2-stage3/checkpoints/global_step3"
[ -d "$checkpoint" ] || fail "no checkpoint $checkpoint"
for nodes in 1 3; do
  hosts="$work/nodes/hostfile$nodes"; [ "$nodes" = 3 ] && hosts="$hostfile"
  train "resume-nodes$nodes" $((2 * nodes)) "$hosts" 3 --steps 6 --resume "$checkpoint" || continue
  worst="$(worst_relative nodes2-stage3 "resume-nodes$nodes" 4 3)"
  if [ "$worst" != missing ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; then
    echo "resumed on $nodes node(s), $((2 * nodes)) ranks: steps 4-6 within $worst relative"
  else
    fail "resumed on $nodes node(s): steps 4-6 differ from the uninterrupted run by $worst relative (tolerance 1e-5)"
  fi
done
[ "$failures" = 0 ] && echo "OK" || exit 1
