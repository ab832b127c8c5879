# Sourced by the other scripts: the shared cargo settings.
# A persistent target directory, when the machine has one, saves most of the build.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
AGENT_BIN="${CARGO_TARGET_DIR:-target}/debug/agent"
