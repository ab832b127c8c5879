#!/usr/bin/env bash
# Set up (idempotently) and run one episode on Terminal-Bench's hello-world task.
# AGENT_MODEL picks the model (default: the built-in local model, SmolLM2-135M).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
exec "${CARGO_TARGET_DIR:-target}/debug/agent" run \
  --task ../shared/tb1-tasks/hello-world \
  --model "${AGENT_MODEL:-default}" "$@"
