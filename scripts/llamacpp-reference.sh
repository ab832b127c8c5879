#!/usr/bin/env bash
# The llama.cpp reference for `agent perf model`: the same measurements through
# llama-cpp-python (PyPI, built from source for AVX2 like our own llama.cpp build), on
# the same GGUF file and the same prompts. Usage: scripts/llamacpp-reference.sh [JSON_OUT]
# The virtual environment (~10 min to build on 2 cores) is kept in $LLAMA_REF_VENV.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
venv="${LLAMA_REF_VENV:-$HOME/.cache/agent/llama-ref-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  python3 -m venv "$venv"
  # The native build picks AVX-512/AMX kernels that crash on some VMs (see .cargo/config.toml).
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
    "$venv/bin/pip" install --quiet "llama-cpp-python==0.3.36"
fi
model="$("$AGENT_BIN" model pull smollm2-135m --quiet)"
# The exact system prompt and instruction `agent perf model` uses.
prompt_file="$(mktemp)"
trap 'rm -f "$prompt_file"' EXIT
"$AGENT_BIN" perf model --print-prompt > "$prompt_file"
exec "$venv/bin/python" scripts/llamacpp_reference.py "$model" "$prompt_file" "${1:-}"
