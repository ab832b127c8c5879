#!/usr/bin/env bash
# The real-model training demonstration (issue 31): the built-in Qwen2.5-Coder-0.5B GGUF
# trained with LoRA by `agent train` on 2 CPU cores, rollouts through llama.cpp over the
# quantised file with the adapter set after every update, on generated level-1 tasks;
# success measured on a held-out split (no shared instance or template parameter) before
# and after. Writes OUT/run/{eval.json,metrics.jsonl,reward.svg,adapter/...}.
#
#   scripts/train-real-demo.sh            # a fresh run (OUT is replaced)
#   scripts/train-real-demo.sh --resume   # continue OUT/run from its newest checkpoint
#
# Knobs (environment): STEPS (20), EVAL (held-out rollouts each side, 64), TRAIN_N (64),
# HELD_N (32), WARM (another warm start than the preset's `oracle`: a transcript JSONL),
# PRESET (another preset file), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# Every target, as the test command builds them: a bin-only build resolves features
# differently and would compile mistral.rs a second time.
AGENT_SETUP_ALL_TARGETS=1 scripts/setup.sh
"$AGENT_BIN" model pull qwen2.5-coder-0.5b >/dev/null
OUT=${OUT:-runs/train-real-0.5b}
STEPS=${STEPS:-20}
EVAL=${EVAL:-64}
resume=()
if [ "${1:-}" = "--resume" ]; then
  resume=(--resume)
else
  rm -rf "$OUT"
fi
mkdir -p "$OUT"
# Deterministic: the same seeds write the same tasks, so a resumed run sees the same sets.
"$AGENT_BIN" tasks generate --split train --seed 1 -n "${TRAIN_N:-64}" --level 1 "$OUT/tasks-train" >/dev/null
"$AGENT_BIN" tasks generate --split heldout --seed 2 -n "${HELD_N:-32}" --level 1 "$OUT/tasks-heldout" >/dev/null
warm=()
if [ -n "${WARM:-}" ]; then warm=(--warm-start "$WARM"); fi
"$AGENT_BIN" train --preset "${PRESET:-cpu-qwen2.5-coder-0.5b-lora}" --no-progress \
  --tasks "$OUT/tasks-train" --eval-tasks "$OUT/tasks-heldout" --eval-rollouts "$EVAL" \
  --steps "$STEPS" --out "$OUT/run" "${warm[@]}" "${resume[@]}"
cat "$OUT/run/eval.json"
