"""The measurements of `agent perf model`, made with llama-cpp-python.

Same GGUF file, same threads (all cores), same context (8,192), flash attention left to
llama.cpp, same prompts: the agent's real system prompt and the hello-world instruction,
a 10-turn episode whose observations are built like `observation()` in
src/llm/speed_bench.rs, a counting prompt for decode and a ~1,000-token prompt.
llama-cpp-python keeps the previous prompt's tokens in its context and evaluates only the
part after the longest common prefix, as our backend does.
"""

import json
import os
import sys
import time

from llama_cpp import Llama


def observation(turn):
    out = f'<tool_output tool="bash" exit_code="0">\n$ ls -la /app/step{turn}\n'
    for i in range(8):
        size = 1000 + 37 * i + 101 * turn
        minute = (turn * 7 + i) % 60
        out += f"-rw-r--r-- 1 root root {size:>6} Dec  2 14:{minute:02} file_{turn}_{i}.txt\n"
    return out + "</tool_output>\nContinue with the task."


def long_prompt(words):
    text = ["the", "container", "runs", "every", "command", "of", "the", "agent", "and", "reports", "its", "output"]
    out = "Summarise the following log in one sentence.\n"
    for i in range(words):
        out += text[i % len(text)] + ("\n" if i % 16 == 15 else " ")
    return out


class Meter:
    """Wraps Llama: renders the chat, counts reused and evaluated prompt tokens."""

    def __init__(self, path):
        t = time.perf_counter()
        self.llm = Llama(model_path=path, n_ctx=8192, n_threads=os.cpu_count(), n_batch=512, verbose=False)
        self.load_secs = time.perf_counter() - t

    def call(self, messages, max_tokens):
        # The chat handler renders with the GGUF's template, like llama.cpp's own server.
        before = list(self.llm._input_ids)
        tokens = self.llm.tokenize(self.render(messages).encode(), add_bos=False, special=True)
        cached = 0
        for a, b in zip(before, tokens):
            if a != b:
                break
            cached += 1
        cached = min(cached, len(tokens) - 1)
        start = time.perf_counter()
        first = None
        n = 0
        text = ""
        for out in self.llm.create_completion(tokens, max_tokens=max_tokens, temperature=0.0, stream=True):
            if first is None:
                first = time.perf_counter() - start
            n += 1
            text += out["choices"][0]["text"]
        total = time.perf_counter() - start
        first = first if first is not None else total
        decode = total - first
        return text, {
            "prompt_tokens": len(tokens),
            "prompt_tokens_cached": cached,
            "prompt_tokens_computed": len(tokens) - cached,
            "completion_tokens": n,
            "time_to_first_token_secs": first,
            "prompt_tokens_per_sec": (len(tokens) - cached) / first if first > 0 else None,
            "decode_tokens_per_sec": (n - 1) / decode if n > 1 and decode > 0 else None,
        }

    def render(self, messages):
        # SmolLM2's template is ChatML; this is what its GGUF template renders.
        out = ""
        if messages[0]["role"] != "system":
            out += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        for m in messages:
            out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return out + "<|im_start|>assistant\n"


def main():
    model, prompt_file, json_out = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    with open(prompt_file) as f:
        spec = json.load(f)
    meter = Meter(model)
    messages = [{"role": "system", "content": spec["system_prompt"]}, {"role": "user", "content": spec["instruction"]}]
    episode = []
    for turn in range(1, 11):
        reply, stats = meter.call(messages, 48)
        print(f"  turn {turn}: {stats['prompt_tokens']} prompt tokens, {stats['prompt_tokens_computed']} computed, "
              f"first token after {stats['time_to_first_token_secs']:.2f}s", file=sys.stderr)
        episode.append(stats)
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation(turn)}]
    count = "Count from 1 to 300, writing every number in words, separated by commas."
    _, decode = meter.call([{"role": "user", "content": count}], 128)
    _, prompt = meter.call([{"role": "user", "content": long_prompt(900)}], 1)
    report = {"backend": "llama-cpp-python", "load_secs": meter.load_secs, "first_turn_cold": episode[0],
              "episode": episode, "decode": decode, "prompt": prompt}
    later = [s["prompt_tokens_computed"] for s in episode[1:]]
    print(f"model: llama-cpp-python {model}")
    print(f"decode           {decode['decode_tokens_per_sec']:8.1f} tokens/s ({decode['completion_tokens']} tokens)")
    print(f"prompt           {prompt['prompt_tokens_per_sec']:8.1f} tokens/s ({prompt['prompt_tokens']} tokens)")
    print(f"first turn, cold {episode[0]['time_to_first_token_secs']:8.2f} s to the first token "
          f"({episode[0]['prompt_tokens']} prompt tokens; loading took {meter.load_secs:.2f} s)")
    print(f"episode: {sum(s['prompt_tokens'] for s in episode)} prompt tokens sent, "
          f"{sum(s['prompt_tokens_computed'] for s in episode)} recomputed; {sum(later) // len(later)} per turn after the first")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
