#!/usr/bin/env bash
# Set up (idempotently) and run one episode on Terminal-Bench's hello-world task.
# AGENT_MODEL picks the model; the built-in scripted demo is used until the local
# default model (SmolLM2 through mistral.rs / llama.cpp) lands.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
exec "${CARGO_TARGET_DIR:-target}/debug/agent" run \
  --task ../shared/tb1-tasks/hello-world \
  --model "${AGENT_MODEL:-scripted:assets/demo/hello-world.yaml}" "$@"
