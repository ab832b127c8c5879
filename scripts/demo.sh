#!/usr/bin/env bash
# Set up (idempotently) and run one episode on Terminal-Bench's hello-world task.
# AGENT_MODEL picks the model (default: the built-in local model, SmolLM2-135M).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
exec "$AGENT_BIN" run \
  --task ../shared/tb1-tasks/hello-world \
  --model "${AGENT_MODEL:-default}" "$@"
