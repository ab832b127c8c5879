#!/usr/bin/env bash
# The trainer's checks on a GPU, written to one JSON report (agent-gpu-check):
#   - one GRPO training step on the device = the same step in f64 on the CPU (1e-3);
#   - the memory plan against a measured LoRA step of Qwen3-8B's shape (2,048 tokens): the
#     plan's trainer total must cover the device's peak use during the step;
#   - the candle sampler's cached decoding = a full forward pass (1e-3), alone and 8 batched;
#   - training tokens/s and MFU, decode tokens/s, on Qwen3-0.6B's shape, in f32 and bf16;
#   - one GRPO step by 2 ranks as 2 processes = the step by 1 rank (1e-3; 1e-5 on the CPU):
#     the binary starts itself twice on the same device, the ranks meet through the
#     trainer's rendezvous and sum gradients with NCCL on CUDA (NcclWorld), over TCP on
#     the CPU. NCCL refuses two ranks on one GPU, so each rank gets its own NCCL_HOSTID and
#     NCCL carries the data over its socket transport on loopback.
#
#   scripts/gpu-check.sh --build   here, without a GPU: builds the CUDA binary with the PyPI
#                                  toolchain (scripts/cuda-env.sh) into .gpu-check/, the
#                                  folder a GPU machine is sent (`carry` it)
#   scripts/gpu-check.sh           on the GPU machine: runs .gpu-check/agent-gpu-check on cuda:0
#   scripts/gpu-check.sh --cpu     builds and runs the same checks on the CPU (small shapes)
#
# The report goes to $OUT/gpu-check.json when OUT is set, else runs/gpu-check.json. What it
# does not check yet (mistral.rs on CUDA, NCCL between distinct GPUs) is listed in the report.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=gpu
case "${1:-}" in
  --build) mode=build ;;
  --cpu) mode=cpu ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--build | --cpu]" >&2; exit 2 ;;
esac
out="${OUT:-runs}"
mkdir -p "$out"
pack=.gpu-check

if [ "$mode" = build ]; then
  source scripts/cuda-env.sh
  export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-/var/cache/agent-target-cuda}"
  # The link flags go to an explicit target so that they do not reach build scripts.
  LIBRARY_PATH="$C/lib:$CUDA_NCCL_LIB:$CUDA_STUB_DIR" \
  RUSTFLAGS="-C link-arg=-Wl,--unresolved-symbols=ignore-in-object-files -C link-arg=-Wl,--push-state,--no-as-needed -C link-arg=-lcuda -C link-arg=-lnvrtc -C link-arg=-lcudart -C link-arg=-lcublas -C link-arg=-lcublasLt -C link-arg=-lcurand -C link-arg=-lnccl -C link-arg=-Wl,--pop-state" \
    cargo build --release --target x86_64-unknown-linux-gnu -p agent-train --no-default-features \
      --features candle-cuda,nccl-collective --bin agent-gpu-check
  mkdir -p "$pack"
  cp "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/agent-gpu-check" "$pack/"
  strip "$pack/agent-gpu-check"
  cp scripts/gpu-check.sh "$pack/"
  echo "● $(du -h "$pack/agent-gpu-check" | cut -f1) in $pack/; on the GPU machine: scripts/gpu-check.sh (carry $pack)"
  exit 0
fi

if [ "$mode" = cpu ]; then
  export CARGO_TARGET_DIR="${LEAN_TARGET_DIR:-/var/cache/agent-target-lean}"
  cargo build --quiet --release -p agent-train --no-default-features --bin agent-gpu-check
  exec "$CARGO_TARGET_DIR/release/agent-gpu-check" --device cpu --quick --out "$out/gpu-check.json"
fi

bin="$pack/agent-gpu-check"
if [ ! -x "$bin" ]; then
  echo "✗ no $bin: build it first with scripts/gpu-check.sh --build (on a machine with cargo)" >&2
  exit 2
fi
# The CUDA libraries the binary links: the driver gives libcuda; the others come from the
# machine's CUDA toolkit or its Python `nvidia-*` packages (PyTorch's).
dirs=()
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libnccl.so.2; do
  found="$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /opt /usr/lib/python3* /usr/local/lib/python3* \
    -name "$lib*" -print -quit 2>/dev/null || true)"
  if [ -n "$found" ]; then dirs+=("$(dirname "$found")"); else echo "✗ $lib not found" >&2; fi
done
LD_LIBRARY_PATH="$(printf '%s:' "${dirs[@]}" | tr -s ':')${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/nvidia-smi.csv" 2>&1 || true
ldd "$bin" | grep -E 'cuda|cublas|curand|nvrtc|nccl|not found' || true
timeout "${GPU_CHECK_TIMEOUT:-420}" "$bin" --device cuda --out "$out/gpu-check.json"
