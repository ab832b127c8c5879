# Sourced by the other scripts: the shared cargo settings.
# A persistent target directory, when the machine has one, saves most of the build.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
# AGENT_BIN may name another build (e.g. a copy kept fixed while a long sweep runs).
AGENT_BIN="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/agent}"
# The Terminal-Bench tasks the tests and scripts use: $AGENT_SHARED, a folder holding
# tb1-tasks/ and tb2-tasks/; when unset, the `shared` folder beside the checkout if it
# has them (scripts that need the tasks call need_shared).
if [ -z "${AGENT_SHARED:-}" ]; then
  _beside="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared"
  if [ -d "$_beside/tb1-tasks" ]; then export AGENT_SHARED="$_beside"; fi
  unset _beside
fi
need_shared() {
  if [ -z "${AGENT_SHARED:-}" ] || [ ! -d "$AGENT_SHARED/tb1-tasks" ]; then
    echo "error: the Terminal-Bench tasks were not found: set AGENT_SHARED to a folder holding tb1-tasks/ and tb2-tasks/ (see docs/development.md)" >&2
    exit 2
  fi
}
