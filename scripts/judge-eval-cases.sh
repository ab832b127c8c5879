#!/usr/bin/env bash
# Regenerates the judge-eval suite's trajectories (assets/judge-eval/trajectories/) by
# running each scripted episode in assets/judge-eval/scripts/ through the real agent loop
# in a real container: the observations are what the tools really printed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
instruction='Write a shell script /usr/local/bin/wordfreq that reads text on standard input and prints the three most frequent words (case-insensitive), one per line as "COUNT WORD", most frequent first. Make it executable.'
for script in assets/judge-eval/scripts/*.yaml; do
  name="$(basename "$script" .yaml)"
  turns=12
  # This case is about being stopped by the turn limit while on track.
  [ "$name" = out-of-turns-on-track ] && turns=4
  out="assets/judge-eval/trajectories/$name.jsonl"
  rm -f "$out"
  "$AGENT_BIN" run --image agent-base:bookworm --no-network --max-turns "$turns" \
    --model "scripted:$script" --trajectory "$out" "$instruction" >/dev/null || true
  echo "$name: $(tail -n 1 "$out" | sed 's/.*"reason":"\([a-z_]*\)".*/\1/')"
done
