#!/usr/bin/env bash
# The PyTorch + PEFT reference for the LoRA trainer's CPU figures (scripts/train_reference.py).
# What it measures: seconds per training step and tokens/s of a randomly initialised,
# Qwen3-shaped f32 model (transformers Qwen3ForCausalLM, sdpa attention) with PEFT LoRA
# (alpha 2r, dropout 0, q/k/v/o/gate/up/down projections) on random tokens, 2 threads:
#   tiny: hidden 64, 2 layers, vocab 1024, LoRA r=8,  batch 8 x seq 128
#   100m: hidden 768, 12 layers, vocab 32768, LoRA r=16 (100.7M params), batch 4 x seq 512
# each in mode `step` (forward + causal-LM loss + backward + AdamW lr 1e-4) and `fwdbwd`
# (no optimizer step); median of STEPS timed steps after WARMUP untimed ones.
# Usage: scripts/train-reference.sh [JSON_OUT]   (default runs/train-reference.json)
# Env: STEPS (5), WARMUP (1), THREADS (2), MODES ("step fwdbwd"), SHAPES ("tiny 100m").
# How long: the first run builds the venv (~3 min, ~2.5 GB downloaded, 4 GB on disk);
# then about 1.5 min on an idle 2-core machine (the 100m step is ~4-5 s).
# Measure on an idle machine only: 2 OpenMP threads on 2 busy cores stall at every barrier.
# Seen at load 5 (a cargo build alongside): 100m 51 s/step, tiny 3.2 s/step (0.1 s at 1 thread),
# and the run took 12.5 min. Each result records the load average before and after.
#
# Why the odd install: the CPU-only torch wheel lives on PyTorch's own index, which is not
# reachable here; PyPI's Linux torch wheel is the CUDA build. Its libraries are linked against
# the CUDA runtime, so `import torch` fails without the NVIDIA library wheels even on a CPU.
# We install torch with --no-deps plus only the NVIDIA wheels its shared objects load
# (cudart, cupti, nvrtc, cublas, cufft, cufile, cusparse, cusparseLt, nccl, nvshmem, cudnn);
# triton, cusolver, nvjitlink, cuda-bindings and cuda-toolkit are left out (not loaded on CPU).
# Everything is pinned and installed --no-deps, so pip never pulls the rest back in.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${AGENT_CACHE_DIR:-$HOME/.cache/agent}/torch-ref-venv"
out="${1:-runs/train-reference.json}"
STEPS="${STEPS:-5}" WARMUP="${WARMUP:-1}" THREADS="${THREADS:-2}"
MODES="${MODES:-step fwdbwd}" SHAPES="${SHAPES:-tiny 100m}"

pins=(
  torch==2.15.0 transformers==5.24.0 peft==0.21.2 accelerate==1.16.0
  # torch's own pure dependencies
  filelock==4.3.1 typing_extensions==4.16.0 setuptools==84.2.1 sympy==1.14.0 mpmath==1.3.0
  networkx==3.6.1 Jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
  # the NVIDIA libraries torch's shared objects link against (needed to import it at all)
  nvidia-cuda-runtime==13.2.86 nvidia-cuda-cupti==13.2.86 nvidia-cuda-nvrtc==13.2.86
  nvidia-cublas==13.4.1.3 nvidia-cufft==12.2.0.57 nvidia-cufile==1.17.1.22
  nvidia-cusparse==12.7.10.12 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7
  nvidia-nvshmem-cu13==3.7.2 nvidia-cudnn-cu13==9.26.0.51
  # transformers / peft / accelerate / huggingface_hub dependencies
  huggingface_hub==2.4.0 packaging==26.4 PyYAML==6.0.4 regex==2026.11.19 safetensors==0.8.0
  tokenizers==0.23.3 tqdm==4.70.1 psutil==7.2.2 typer==0.29.2 annotated-doc==0.0.7 click==8.5.1
  hf-xet==1.8.0 httpx2==2.16.2 httpcore2==2.16.2 pydantic==2.14.4 pydantic_core==2.50.5
  rich==15.0.0 shellingham==1.5.4 annotated-types==0.8.0 anyio==4.16.0 idna==3.20
  markdown-it-py==4.3.0 Pygments==2.21.0 truststore==0.10.5 typing-inspection==0.4.5
  h11==0.16.0 mdurl==0.1.2
)
stamp="$venv/.train-reference-pins"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ] \
  || ! "$venv/bin/python" -c 'import torch, transformers, peft' 2>/dev/null; then
  echo "setting up $venv (a few minutes)..." >&2
  start=$SECONDS
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "${pins[@]}"
  "$venv/bin/python" -c 'import torch, transformers, peft'
  echo "${pins[*]}" > "$stamp"
  echo "venv ready in $((SECONDS - start)) s" >&2
fi

mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
uptime | tee "$tmp/uptime" >&2
for shape in $SHAPES; do
  case "$shape" in
    tiny) bt=(--batch 8 --seq 128) ;;
    100m) bt=(--batch 4 --seq 512) ;;
    *) echo "unknown shape $shape" >&2; exit 2 ;;
  esac
  for mode in $MODES; do
    echo "== $shape $mode" >&2
    "$venv/bin/python" scripts/train_reference.py --shape "$shape" "${bt[@]}" --threads "$THREADS" \
      --steps "$STEPS" --warmup "$WARMUP" --mode "$mode" --json "$tmp/$shape-$mode.json" > /dev/null
  done
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
results = [json.load(open(os.path.join(tmp, f))) for f in sorted(os.listdir(tmp)) if f.endswith(".json")]
doc = {"uptime_before": open(os.path.join(tmp, "uptime")).read().strip(), "results": results}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(f"{'shape':6} {'mode':7} {'batch':>5} {'seq':>4} {'s/step':>8} {'tokens/s':>9}  load(1m) start/end")
for r in results:
    print(f"{r['shape']:6} {r['mode']:7} {r['batch']:>5} {r['seq']:>4} {r['step_s_median']:>8.3f} "
          f"{r['tokens_per_s']:>9.1f}  {r['loadavg_start'][0]:.2f}/{r['loadavg_end'][0]:.2f}")
print(f"wrote {out}")
PY
