#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
AGENT_SETUP_ALL_TARGETS=1 scripts/setup.sh
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo test --no-fail-fast -- --test-threads="${AGENT_TEST_THREADS:-4}"
# Whatever a failed test left behind (tests remove their containers; this is a net).
"$AGENT_BIN" sandbox prune >/dev/null || true
