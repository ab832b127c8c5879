#!/usr/bin/env bash
# Type-checks the `cuda` and `nccl` features on a machine without a GPU, against the CUDA
# 13 toolchain from PyPI (see docs/development.md and scripts/cuda-env.sh). Uses its own
# target dir (a CUDA build shares nothing with the CPU one). A long first build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda-env.sh
export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-/var/cache/agent-target-cuda}"
cargo check --features cuda,nccl --lib --bins
