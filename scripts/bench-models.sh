#!/usr/bin/env bash
# The built-in models on the dev tasks in each tool format: one `agent bench -k 1` run per
# (model, format), then the table in docs/benchmarks.md: resolved tasks, parse-error rate per turn,
# tokens and time per trial. Slow (every task runs until it finishes, stops or hits its
# agent timeout; hours on 2 cores), so it is not part of the test suite. A finished
# configuration is kept and skipped on a rerun, an interrupted one is resumed.
#
#   scripts/bench-models.sh [OUT_DIR] [TASKS_DIR]    # runs/bench-models, $AGENT_SHARED/tb1-tasks
#   MODELS="qwen2.5-coder-1.5b" FORMATS="native text" scripts/bench-models.sh
#   BENCH_ARGS="--timeout-multiplier 0.5" scripts/bench-models.sh   # shorter trials
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ -n "${2:-}" ] || need_shared
[ -x "$AGENT_BIN" ] || cargo build --quiet --workspace --all-targets
out="${1:-runs/bench-models}"
tasks="${2:-$AGENT_SHARED/tb1-tasks}"
models="${MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m}"
formats="${FORMATS:-native text}"
mkdir -p "$out"
for model in $models; do
  for format in $formats; do
    # SmolLM2's chat template declares no tools: native is refused for it.
    if [ "$model" = smollm2-135m ] && [ "$format" = native ]; then continue; fi
    dir="$out/$model-$format"
    if [ -f "$dir/results.json" ]; then continue; fi
    resume=()
    if [ -f "$dir/run.json" ]; then resume=(--resume); fi
    echo "● $model, $format format → $dir"
    "$AGENT_BIN" bench "$tasks" --model "$model" --tool-format "$format" -k 1 --quiet \
      --output "$dir" ${BENCH_ARGS:-} "${resume[@]}" || echo "✗ $model $format: the run failed (see above)" >&2
  done
done
python3 - "$out" <<'PY'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
print("| model | format | resolved | parse errors per turn | turns | tokens per trial (prompt + completion) | time per trial |")
print("|---|---|---|---|---|---|---|")
for f in sorted(root.glob("*/results.json")):
    r = json.loads(f.read_text())
    s = r["stats"]
    n = max(s["n_trials"], 1)
    formats = sorted({t.get("tool_format", "") for t in r["trials"]} - {""})
    t = s["tokens"]
    print(f"| {r.get('model')} | {', '.join(formats) or '-'} | {s['n_resolved']}/{s['n_trials']} "
          f"| {100 * s.get('parse_error_rate', 0):.1f}% ({s.get('parse_error_turns', 0)}/{s.get('turns', 0)}) "
          f"| {s.get('turns', 0)} | {t['prompt_tokens'] // n:,} + {t['completion_tokens'] // n:,} "
          f"| {s['trial_secs_mean']:.0f} s |")
PY
