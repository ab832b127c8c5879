#!/usr/bin/env bash
# The trained adapter against the base model through `agent bench` (issue 31's last
# acceptance point): the demo's held-out tasks, the same seeds and the rollouts' settings
# (`tools = ["bash"]`, 4 turns, 384-token replies: docs/train-real-demo/bench-config.toml),
# the built-in model's recommended sampling. Run after scripts/train-real-demo.sh:
#
#   scripts/train-real-bench.sh            # OUT as the demo's (runs/train-real-0.5b)
#
# Knobs (environment): OUT, K (trials per task, 1), N (trials at once, 2),
# ADAPTER (another adapter folder than OUT/run/adapter), TASKS (another task folder than
# OUT/tasks-heldout), PER_FAMILY (only the first N tasks of each family, by name).
# Writes OUT/bench-base/results.json and OUT/bench-adapter/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
OUT=${OUT:-runs/train-real-0.5b}
ADAPTER=${ADAPTER:-$OUT/run/adapter}
TASKS=${TASKS:-$OUT/tasks-heldout}
[ -d "$TASKS" ] || { echo "no $TASKS: run scripts/train-real-demo.sh first" >&2; exit 2; }
if [ -n "${PER_FAMILY:-}" ]; then
  sub="$OUT/tasks-heldout-$PER_FAMILY-per-family"
  rm -rf "$sub"
  mkdir -p "$sub"
  for family in $(ls "$TASKS" | sed -n 's/-l[0-9]*-heldout-.*//p' | sort -u); do
    ls -d "$TASKS/$family"-l* | sort | head -n "$PER_FAMILY" | xargs -I{} cp -r {} "$sub/"
  done
  TASKS=$sub
fi
[ -f "$ADAPTER/adapter-model.gguf" ] || { echo "no adapter in $ADAPTER (adapter-model.gguf)" >&2; exit 2; }
for side in base adapter; do
  lora=()
  if [ "$side" = adapter ]; then lora=(--lora "$ADAPTER"); fi
  rm -rf "$OUT/bench-$side"
  "$AGENT_BIN" --config docs/train-real-demo/bench-config.toml bench --quiet --model qwen2.5-coder-0.5b \
    "${lora[@]}" -k "${K:-1}" -n "${N:-2}" --output "$OUT/bench-$side" "$TASKS"
done
python3 - "$OUT" <<'EOF'
import json, math, sys
out = sys.argv[1]
for side in ("base", "adapter"):
    r = json.load(open(f"{out}/bench-{side}/results.json"))
    n, k = r["n_trials"], r["n_resolved"]
    p = k / n if n else 0.0
    se = math.sqrt(p * (1 - p) / n) if n else 0.0
    print(f"{side:8} {k}/{n} resolved ({100 * p:.1f}% ± {100 * se:.1f})")
EOF
