#!/usr/bin/env bash
# Trials per hour with one Docker engine and with two (the local one plus a second engine
# in a container, over TLS), for README.md and docs/benchmarks.md. Not in the suite:
#
#   scripts/engines-throughput.sh            # ATTEMPTS=3: 12 trials per configuration
#
# Both engines share this machine's cores, so the figure shows what the pool adds when
# trials wait (the fixture solutions sleep 8 s), not what a second host's CPUs would add.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export ATTEMPTS=${ATTEMPTS:-3}
cargo test --quiet --test it engines::throughput_with_one_and_two_engines -- --ignored --nocapture 2>&1 \
  | grep -E "trials/hour|  on |panicked|FAILED"
