#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
need_shared
AGENT_SETUP_ALL_TARGETS=1 scripts/setup.sh
cargo fmt --all --check
cargo clippy --quiet --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast -- --test-threads="${AGENT_TEST_THREADS:-4}"
# Whatever a failed test left behind (tests remove their containers; this is a net).
"$AGENT_BIN" sandbox prune >/dev/null || true
# Build leftovers of `agent bench` tests (a failed build's last layer, images replaced by
# a rebuild): dangling images carrying the layers bench adds. Done here, after every
# test, because removing a dangling image races any build still running.
for id in $(docker images -a -q --no-trunc -f dangling=true); do
  if docker history --no-trunc "$id" 2>/dev/null | grep -q /usr/local/share/agent/host-ca-bundle.crt; then
    docker rmi "$id" >/dev/null 2>&1 || true
  fi
done
