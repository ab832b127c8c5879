#!/usr/bin/env bash
# Training throughput, ours against PyTorch + PEFT on the same shapes, batch and threads
# (f32, 2 threads, LoRA on all seven projections, forward + backward + AdamW):
#   tiny: hidden 64, 2 layers, vocab 1024, LoRA r=8, batch 8 × 128 tokens
#   100m: hidden 768, 12 layers, vocab 32768 (100.7M parameters), LoRA r=16, batch 4 × 512 tokens
# Writes runs/train-bench.json (ours) and runs/train-reference.json (PyTorch). About
# 5 minutes, most of it the 100m shape; run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# All targets, as scripts/setup.sh: a `--bin`-only build resolves features differently and
# would compile mistral.rs a second time.
cargo build --quiet --workspace --all-targets
mkdir -p runs
THREADS=${THREADS:-2}
for mode in step fwdbwd; do
  "$AGENT_BIN" perf train --shape tiny --mode "$mode" --batch 8 --seq 128 --threads "$THREADS" --steps 5 --warmup 1 \
    --json "runs/train-bench-tiny-$mode.json" >/dev/null
  "$AGENT_BIN" perf train --shape 100m --mode "$mode" --batch 4 --seq 512 --threads "$THREADS" --steps 3 --warmup 1 \
    --json "runs/train-bench-100m-$mode.json" >/dev/null
done
python3 - <<'PY'
import json, glob
rows = {p.split('train-bench-')[1][:-5]: json.load(open(p)) for p in sorted(glob.glob('runs/train-bench-*-*.json'))}
json.dump(rows, open('runs/train-bench.json', 'w'), indent=2)
for k, r in rows.items():
    print(f"ours  {k:12s} {r['tokens_per_sec']:9.1f} tokens/s  ({r['median_step_secs']:.3f} s/step)")
PY
if [ -z "${SKIP_REFERENCE:-}" ]; then
  scripts/train-reference.sh
fi
