#!/usr/bin/env bash
# Soak test of `agent bench` under signals (not in CI; figures in docs/development.md):
# SOAK_TRIALS scripted episodes (default 200: 10 copies of a small task × 20 attempts)
# at -n 4, the bench process sent SIGKILL, SIGTERM or SIGHUP at random every
# 20..SOAK_INTERVAL seconds and resumed with --resume each time, until it finishes.
# Then: every trial has exactly one result, the verdicts equal a clean run's, and no
# container, network or dangling image of the run is left.
#   scripts/soak.sh            (SOAK_INTERVAL=90 SOAK_TRIALS=200 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
interval="${SOAK_INTERVAL:-90}"
trials="${SOAK_TRIALS:-200}"
copies=10
attempts=$(( (trials + copies - 1) / copies ))
work="$(mktemp -d /tmp/agent-soak.XXXXXX)"
mkdir -p "$work/tasks"
for i in $(seq 1 "$copies"); do cp -r tests/fixtures/bench/slow-ok "$work/tasks/soak-$i"; done
cat > "$work/model.yaml" <<'YAML'
- "<bash>\ncmd: sleep 3; echo ok > /app/ok.txt\n</bash>"
- "<finish>\nmessage: wrote ok.txt\n</finish>"
YAML
# Dangling images that carry bench's layers, to tell this run's leftovers from older ones.
ours_dangling() {
  for id in $(docker images -a -q --no-trunc -f dangling=true); do
    if docker history --no-trunc "$id" 2>/dev/null | grep -q /usr/local/share/agent/host-ca-bundle.crt; then echo "$id"; fi
  done | sort
}
dangling_before="$(ours_dangling)"
bench=("$AGENT_BIN" bench --quiet -n 4 -k "$attempts" --agent agent --model "scripted:$work/model.yaml")
started=$(date +%s)

echo "● clean run: $((copies * attempts)) trials"
"${bench[@]}" --run-id "soak-clean-$$" --output "$work/clean" "$work/tasks" > "$work/clean.log" 2>&1
clean_secs=$(( $(date +%s) - started ))

echo "● soak run, a random signal every 20..${interval} s"
run_id="soak-$$"
args=(--run-id "$run_id" --output "$work/soak" "$work/tasks")
signals=0
while :; do
  "${bench[@]}" "${args[@]}" >> "$work/soak.log" 2>&1 &
  pid=$!
  args=(--resume --output "$work/soak")
  delay=$(( 20 + RANDOM % (interval - 19) ))
  for _ in $(seq 1 "$delay"); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" && break
    echo "✗ the bench run failed on its own; see $work/soak.log" >&2
    exit 1
  fi
  sig=$(shuf -n1 -e KILL TERM HUP)
  kill -s "$sig" "$pid" 2>/dev/null || true
  wait "$pid" || true
  signals=$((signals + 1))
  echo "  SIG$sig after ${delay} s ($(find "$work/soak" -name result.json | wc -l) results so far)"
done
soak_secs=$(( $(date +%s) - started - clean_secs ))

python3 - "$work/clean/results.json" "$work/soak/results.json" "$work/soak" <<'PY'
import json, os, sys
clean, soak, root = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
def verdicts(r):
    out = {}
    for t in r["trials"]:
        key = (t["task"], t["attempt"])
        assert key not in out, f"trial {key} has two results"
        out[key] = (t["resolved"], t["failure_mode"])
    return out
c, s = verdicts(clean), verdicts(soak)
assert len(s) == len(c) == clean["n_trials"], (len(s), len(c))
diff = {k: (c[k], s.get(k)) for k in c if c[k] != s.get(k)}
assert not diff, f"verdicts differ from the clean run: {diff}"
files = sum(1 for d, _, fs in os.walk(root) for f in fs if f == "result.json")
assert files == len(s), f"{files} result files for {len(s)} trials"
print(f"✔ {len(s)} trials, one result each, verdicts equal the clean run's ({soak['n_resolved']} resolved)")
PY
left_c=$(docker ps -aq --filter "label=agent.run=$run_id" | wc -l)
left_n=$(docker network ls -q --filter "label=agent.run=$run_id" | wc -l)
left_i=$(comm -13 <(echo "$dangling_before") <(ours_dangling) | grep -c . || true)
echo "● left: $left_c containers, $left_n networks, $left_i dangling images of ours"
echo "● clean run ${clean_secs} s; soak run ${soak_secs} s with $signals signals"
[ "$left_c" = 0 ] && [ "$left_n" = 0 ] && [ "$left_i" = 0 ]
for i in $(seq 1 "$copies"); do docker rmi "agent-bench-soak-$i-client:latest" >/dev/null 2>&1 || true; done
rm -rf "$work"
