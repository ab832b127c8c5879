#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
scripts/setup.sh
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo test --no-fail-fast -- --test-threads="${AGENT_TEST_THREADS:-4}"
# Whatever a failed test left behind (tests remove their containers; this is a net).
"${CARGO_TARGET_DIR:-target}/debug/agent" sandbox prune >/dev/null || true
