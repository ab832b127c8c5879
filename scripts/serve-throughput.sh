#!/usr/bin/env bash
# Throughput of `agent serve` with 1, 4 and 8 concurrent clients (the OpenAI Python
# client, streamed chats of 64 tokens), with --parallel 8 and with --parallel 1 (one
# request at a time). Usage: scripts/serve-throughput.sh [MODEL] [JSON_OUT]
# MODEL defaults to `default` (Qwen2.5-Coder-1.5B on a CPU). Figures go to
# docs/benchmarks.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
model="${1:-default}"
out="${2:-/tmp/serve-throughput.json}"
venv="${OPENAI_VENV:-$HOME/.cache/agent/openai-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "openai==3.63.0"
fi
results=()
for parallel in 8 1; do
  log="$(mktemp)"
  "$AGENT_BIN" serve --model "$model" --port 0 --parallel "$parallel" --ctx 2048 --model-id bench >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "^listening on" "$log" && break; sleep 1; done
  url="$(grep -m1 '^listening on' "$log" | awk '{print $3}')"
  clients="1 4 8"
  [ "$parallel" = 1 ] && clients="4"
  part="$(mktemp)"
  "$venv/bin/python" scripts/serve_throughput.py "$url" "$parallel" $clients >"$part"
  results+=("$part")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
cat "${results[@]}" | python3 -c 'import json,sys; rows=[json.loads(l) for l in sys.stdin if l.strip()]; print(json.dumps(rows, indent=1))' > "$out"
cat "$out"
