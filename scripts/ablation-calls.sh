#!/usr/bin/env bash
# Issue 49's ablation: the built-in models on a task folder with each change on and off —
# the call grammar (`constrain_calls`), the repeated-call notes (`repeat_notes`) and the
# compact prompt for small models (`prompt_profile`) — one `agent bench` run per (model,
# arm; `default` is what ships: grammar and notes on, the full prompt), then a table for docs/benchmarks.md: resolved (standard error clustered by task),
# parse errors per turn, repeated calls per turn, tokens per resolved task (the decode cost
# of the grammar comes from `agent perf model --tool-format native`).
# Slow (hours on 2 cores), so not part of the test suite. A finished arm is kept and
# skipped on a rerun, an interrupted one resumed.
#
#   scripts/ablation-calls.sh [OUT_DIR] [TASKS_DIR]      # runs/ablation-calls, $AGENT_SHARED/tb1-tasks
#   MODELS="qwen2.5-coder-1.5b" ARMS="off all" K=3 scripts/ablation-calls.sh
#   BENCH_ARGS="--timeout-multiplier 0.4" scripts/ablation-calls.sh   # shorter trials
#   EXTRA_CONF='[episode]\nmax_turns = 8' scripts/ablation-calls.sh  # appended to every arm's config
#   scripts/ablation-calls.sh --table OUT_DIR [OUT_DIR...]    # the table of finished arms only; an
#                 arm found in several folders (its attempts run in parts, same build) is pooled
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
table_only=false
if [ "${1:-}" = "--table" ]; then table_only=true; shift; fi
out="${1:-runs/ablation-calls}"
if ! $table_only; then
  [ -n "${2:-}" ] || need_shared
  [ -x "$AGENT_BIN" ] || cargo build --quiet --workspace
  tasks="${2:-$AGENT_SHARED/tb1-tasks}"
  models="${MODELS:-qwen2.5-coder-1.5b qwen2.5-coder-0.5b}"
  arms="${ARMS:-off default grammar notes prompt all}"
  mkdir -p "$out"
  for model in $models; do
    for arm in $arms; do
      dir="$out/$model-$arm"
      if [ -f "$dir/results.json" ]; then continue; fi
      # Each arm is one config file; everything not named keeps its default.
      case "$arm" in
        off)     conf='constrain_calls = false\nrepeat_notes = false\nprompt_profile = "full"' ;;
        grammar) conf='constrain_calls = true\nrepeat_notes = false\nprompt_profile = "full"' ;;
        notes)   conf='constrain_calls = false\nrepeat_notes = true\nprompt_profile = "full"' ;;
        prompt)  conf='constrain_calls = false\nrepeat_notes = false\nprompt_profile = "compact"' ;;
        all)     conf='constrain_calls = true\nrepeat_notes = true\nprompt_profile = "compact"' ;;
        default) conf='constrain_calls = true\nrepeat_notes = true\nprompt_profile = "full"' ;;
        *) echo "unknown arm $arm (off, grammar, notes, prompt, all, default)" >&2; exit 2 ;;
      esac
      mkdir -p "$dir"
      printf "$conf\n${EXTRA_CONF:-}\n" > "$dir.toml"
      resume=()
      if [ -f "$dir/run.json" ]; then resume=(--resume); fi
      echo "● $model, arm $arm → $dir"
      "$AGENT_BIN" bench "$tasks" --config "$dir.toml" --model "$model" --tool-format native -k "${K:-1}" --quiet \
        --output "$dir" ${BENCH_ARGS:-} "${resume[@]}" || echo "✗ $model $arm: the run failed (see above)" >&2
    done
  done
fi
if $table_only; then dirs=("$@"); else dirs=("$out"); fi
python3 - "${dirs[@]}" <<'PY'
import json, math, pathlib, sys
from collections import defaultdict
# One arm (a `MODEL-ARM` folder) may be split over several output folders: pooled.
arms = defaultdict(list)
for root in sys.argv[1:]:
    for f in sorted(pathlib.Path(root).glob("*/results.json")):
        arms[f.parent.name].append(json.loads(f.read_text()))
print("| model | arm | resolved (± s.e., by task) | parse errors per turn | repeated calls per turn | tokens per resolved task |")
print("|---|---|---|---|---|---|")
for name in sorted(arms):
    runs = arms[name]
    r = runs[0]
    trials = [t for run in runs for t in run["trials"]]
    by_task = defaultdict(list)
    for t in trials:
        by_task[t["task"]].append(1.0 if t["resolved"] else 0.0)
    means = [sum(v) / len(v) for v in by_task.values()]
    n_tasks = len(means)
    rate = sum(means) / max(n_tasks, 1)
    # Tasks are the clusters: the spread of per-task rates, not of trials.
    se = math.sqrt(sum((m - rate) ** 2 for m in means) / (n_tasks - 1) / n_tasks) if n_tasks > 1 else 0.0
    resolved = sum(1 for t in trials if t["resolved"])
    turns = sum(t.get("turns", 0) for t in trials)
    parse = sum(t.get("parse_error_turns", 0) for t in trials)
    repeats = sum(t.get("repeated_calls", 0) for t in trials)
    tokens = sum(t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"] for t in trials)
    completion = sum(t["usage"]["completion_tokens"] for t in trials)
    per_resolved = f"{tokens // resolved:,}" if resolved else "—"
    arm = name.rsplit("-", 1)[1]
    print(f"| {r.get('model')} | {arm} | {resolved}/{len(trials)} ({100 * rate:.1f}% ± {100 * se:.1f}) "
          f"| {100 * parse / max(turns, 1):.1f}% ({parse}/{turns}) | {repeats / max(turns, 1):.2f} ({repeats}) "
          f"| {per_resolved} |")
# Each arm against `off` on the same tasks: the mean over tasks of the difference in per-task
# resolve rates, with the standard error of that mean (tasks paired, so the spread between
# tasks' difficulty cancels).
rates = {}
for name, runs in arms.items():
    by_task = defaultdict(list)
    for run in runs:
        for t in run["trials"]:
            by_task[t["task"]].append(1.0 if t["resolved"] else 0.0)
    rates[name] = {task: sum(v) / len(v) for task, v in by_task.items()}
pairs = []
for name in sorted(rates):
    model, arm = name.rsplit("-", 1)
    base = rates.get(f"{model}-off")
    if arm == "off" or base is None:
        continue
    common = sorted(set(base) & set(rates[name]))
    if len(common) < 2:
        continue
    diffs = [rates[name][t] - base[t] for t in common]
    mean = sum(diffs) / len(diffs)
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs))
    pairs.append(f"| {model} | {arm} − off | {100 * mean:+.1f} points ± {100 * se:.1f} | {len(common)} |")
if pairs:
    print()
    print("| model | arms | resolved, difference (± s.e., paired by task) | tasks |")
    print("|---|---|---|---|")
    print("\n".join(pairs))
PY
