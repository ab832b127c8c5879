#!/bin/bash
# Written by `agent tasks synth`: runs tests/test_outputs.py and writes the weighted
# share of passing tests (tests/test_weights.json; equal weights without it) to
# /logs/verifier/reward.txt, as Harbor reads it.
mkdir -p /logs/verifier
cd /tests || exit 1
python3 -m pytest -rA -p no:cacheprovider test_outputs.py > /logs/verifier/pytest.log 2>&1
status=$?
cat /logs/verifier/pytest.log
python3 - <<'PY'
import json, re
out = open("/logs/verifier/pytest.log", encoding="utf-8", errors="replace").read()
passed = set(re.findall(r"^PASSED \S*::(\w+)", out, re.M))
ran = passed | set(re.findall(r"^(?:FAILED|ERROR) \S*::(\w+)", out, re.M))
try:
    weights = json.load(open("/tests/test_weights.json"))
except (OSError, ValueError):
    weights = {name: 1.0 for name in ran}
total = sum(weights.values())
score = sum(w for name, w in weights.items() if name in passed) / total if total > 0 else 0.0
open("/logs/verifier/reward.txt", "w").write("%.4f\n" % score)
print("reward: %.4f" % score)
PY
exit $status
