#!/usr/bin/env bash
# Type-checks the `cuda` and `nccl` features on a machine without a GPU, against the CUDA
# 13 toolchain from PyPI (see ../shared/CUDA.md). Installs the toolchain into
# $CUDA_VENV (default /opt/cu13) once; uses its own target dir (a CUDA build shares
# nothing with the CPU one). About 1 GB of wheels, and a long first build.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CUDA_VENV:-/opt/cu13}"
if [ ! -x "$venv/bin/pip" ]; then python3 -m venv "$venv"; fi
C="$venv/lib/python3.11/site-packages/nvidia/cu13"
# mistralrs-quant 0.8.1's build script knows CUDA up to 13.2, so the compiler parts are
# pinned there (PyPI's newest is 13.5).
cu="${CUDA_WHEEL_VERSION:-13.2.*}"
if ! "$C/bin/nvcc" --version 2>/dev/null | grep -q "release ${cu%.*}"; then
  "$venv/bin/pip" install --quiet "nvidia-cuda-nvcc==$cu" "nvidia-cuda-runtime==$cu" "nvidia-cuda-cccl==$cu" \
    "nvidia-cuda-crt==$cu" "nvidia-cuda-nvrtc==$cu" "nvidia-nvvm==$cu" nvidia-cublas nvidia-curand nvidia-nccl-cu13
fi
for lib in cublas cublasLt cudart curand nvrtc; do
  real="$(ls "$C/lib/lib$lib.so."* 2>/dev/null | head -n 1)"
  [ -n "$real" ] && ln -sf "$real" "$C/lib/lib$lib.so"
done
nccl="$venv/lib/python3.11/site-packages/nvidia/nccl/lib"
ln -sf "$(ls "$nccl"/libnccl.so.* | head -n 1)" "$nccl/libnccl.so"
export PATH="$C/bin:$PATH" CUDA_ROOT="$C" CUDA_PATH="$C" CUDA_HOME="$C" \
  CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" CUDARC_CUDA_VERSION=13000
export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-/var/cache/agent-target-cuda}"
cargo check --features cuda,nccl --lib --bins
