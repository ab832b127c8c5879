#!/usr/bin/env bash
# Validates every task family at every level in both splits through the real bench
# (`agent tasks validate`: the image builds, doing nothing fails, the reference solution
# passes three times in fresh containers). Writes OUT/{train,heldout} and OUT/validate.txt;
# exits 1 when a task is invalid. About 40 s a task on 2 cores (41 families × 3 levels × 2
# splits = 246 tasks: a few hours); FAMILIES="a b" for some, SEED to draw others.
#   scripts/validate-families.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
OUT=${1:-runs/validate-families}
SEED=${SEED:-7}
AGENT=${AGENT_BIN:-target/debug/agent}
[ -x "$AGENT" ] || cargo build --quiet --bin agent
FAMILIES=${FAMILIES:-$("$AGENT" tasks list-families | awk '/^[a-z][a-z0-9-]* /{print $1}')}
args=()
for f in $FAMILIES; do args+=(--family "$f"); done
n=$(( $(echo "$FAMILIES" | wc -w) * 3 ))
mkdir -p "$OUT"
"$AGENT" tasks generate "${args[@]}" --level 1,2,3 --seed "$SEED" -n "$n" "$OUT/train"
"$AGENT" tasks generate "${args[@]}" --level 1,2,3 --split heldout --seed "$((SEED + 1))" -n "$n" "$OUT/heldout"
"$AGENT" tasks validate -n 2 "$OUT/train" "$OUT/heldout" 2>&1 | tee "$OUT/validate.txt"
