#!/usr/bin/env bash
# Everything a fresh machine needs, idempotently: debootstrap (for the base image),
# tmux (for the terminal tests), the release build, and the local base image.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
if [ ${#need[@]} -gt 0 ]; then
  echo "● installing ${need[*]} from Debian's mirror"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "✗ the Docker engine is not reachable (is the daemon running? is DOCKER_HOST right?)" >&2
  exit 1
fi

# A persistent target directory, when the machine has one, saves most of the build.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ -d /var/cache/agent-target ]; then
  export CARGO_TARGET_DIR=/var/cache/agent-target
fi
cargo build --quiet --bin agent
"${CARGO_TARGET_DIR:-target}/debug/agent" sandbox base
