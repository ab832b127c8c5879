#!/usr/bin/env bash
# The cpu-tiny demonstration with its rollouts spread over two Docker engines (the local
# one and a second engine in a container, over TLS); it must learn as the one-engine run
# does (before 20–70%, at least 25 points better after). About 10 minutes on 2 cores; the
# suite keeps the short preset over two engines (metrics equal to one engine's).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cargo test --quiet --test it engines::cpu_tiny_training_spreads_its_rollouts_over_two_engines_and_learns \
  -- --ignored --nocapture
