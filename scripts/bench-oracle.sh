#!/usr/bin/env bash
# The full oracle and nop sweeps over the shared TB1 tasks, plus the harness-overhead
# and throughput figures of docs/benchmarks.md. Too slow for the test suite (image builds and
# package downloads); run it by hand:
#
#   scripts/bench-oracle.sh [TASKS_DIR]          # default $AGENT_SHARED/tb1-tasks
#   STAGES="oracle nop overhead throughput" scripts/bench-oracle.sh
#
# Each stage writes a run under runs/ and prints its summary table; the last lines
# print the figures. Expected on a host that reaches only PyPI and Debian's mirror:
# oracle 12/15 (crack-7z-hash and fix-git clone from GitHub and end env_build_failed;
# broken-python's solution fetches get-pip.py from bootstrap.pypa.io), nop 0/15. The
# same with the TB2/Harbor layout: scripts/bench-oracle.sh $AGENT_SHARED/tb2-tasks
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ -n "${1:-}" ] || need_shared
TASKS=${1:-$AGENT_SHARED/tb1-tasks}
STAGES=${STAGES:-oracle nop overhead throughput}
AGENT="${CARGO_TARGET_DIR:-target}/debug/agent"
[ -x "$AGENT" ] || cargo build --quiet --bin agent
stamp=$(date -u +%Y%m%d-%H%M%S)

for stage in $STAGES; do
  case $stage in
    oracle)
      "$AGENT" bench "$TASKS" --agent oracle -n 2 --run-id "oracle-$stamp" ;;
    nop)
      "$AGENT" bench "$TASKS" --agent nop -n 2 --run-id "nop-$stamp" ;;
    overhead)
      # Harness overhead per trial once the image exists: everything but the
      # solution and the test command (build time is excluded by a warm-up run).
      "$AGENT" bench "$TASKS/hello-world" --agent oracle --quiet --run-id "warm-$stamp" >/dev/null
      "$AGENT" bench "$TASKS/hello-world" --agent oracle -k 10 --quiet --run-id "overhead-$stamp" >/dev/null
      python3 - "runs/overhead-$stamp/results.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
t = [x["timings"] for x in r["trials"]]
over = [x["total_secs"] - x["agent_secs"] - x["tests_secs"] - x["test_setup_secs"] for x in t]
print(f"overhead: {len(t)} oracle trials on hello-world, resolved {r['n_resolved']}/{r['n_trials']}")
for k in ["env_start_secs", "agent_secs", "tests_secs", "teardown_secs", "total_secs"]:
    print(f"  {k:<16} mean {statistics.mean(x[k] for x in t):.3f} s")
print(f"  harness overhead per trial (total - agent - tests): mean {statistics.mean(over):.3f} s, max {max(over):.3f} s")
PY
      ;;
    throughput)
      for n in 1 2 4; do
        start=$(date +%s.%N)
        "$AGENT" bench "$TASKS/hello-world" --agent oracle -k 8 -n $n --quiet --run-id "tput$n-$stamp" >/dev/null
        end=$(date +%s.%N)
        python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); print(f'-n {sys.argv[3]}: 8 trials in {s:.1f} s = {8*3600/s:.0f} trials/hour')" "$start" "$end" "$n"
      done ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
