#!/usr/bin/env bash
# Set up (idempotently), then let the built-in default model solve Terminal-Bench's
# hello-world task: the agent works in a container, then the task's own tests run and
# decide. AGENT_MODEL picks another model (any model spec); extra arguments go to
# `agent bench` (e.g. `-k 5` for five attempts).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
need_shared
scripts/setup.sh
model="${AGENT_MODEL:-default}"
# The results folder: the caller's `--output DIR`, else a new temporary one.
out=""
args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --output) out="${args[$((i + 1))]:-}" ;;
    --output=*) out="${args[$i]#--output=}" ;;
  esac
done
if [ -z "$out" ]; then
  out="$(mktemp -d "${TMPDIR:-/tmp}/agent-demo.XXXXXX")"
  set -- --output "$out" "$@"
fi
"$AGENT_BIN" bench "$AGENT_SHARED/tb1-tasks/hello-world" --model "$model" "$@"
if grep -q '"resolved": true' "$out/results.json" 2>/dev/null; then
  echo "✓ the model $model resolved hello-world: the task's tests ran and passed"
else
  echo "✗ the model $model did not resolve hello-world; why is in the table above and in $out" >&2
  exit 1
fi
