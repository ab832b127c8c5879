# Sourced by the other scripts: the shared cargo settings.
# A persistent target directory, when the machine has one, saves most of the build.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
# AGENT_BIN may name another build (e.g. a copy kept fixed while a long sweep runs).
AGENT_BIN="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/agent}"
