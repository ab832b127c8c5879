"""Concurrent streamed chats against `agent serve`; one JSON line per client count.

Usage: serve_throughput.py BASE_URL PARALLEL CLIENTS... (see serve-throughput.sh)
"""

import json
import sys
import threading
import time

import openai

url, parallel, counts = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3:]]
client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=1800)
TOPICS = ["a lighthouse", "a river", "a robot", "a garden", "a train", "a storm", "a violin", "a mountain"]
TOKENS = 64
ROUNDS = 2


def one(i, r, out):
    started = time.monotonic()
    first = None
    text = ""
    usage = None
    stream = client.chat.completions.create(
        model="bench",
        messages=[{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]} (round {r})."}],
        max_tokens=TOKENS,
        temperature=0.7,
        seed=i * 100 + r,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.monotonic()
            text += chunk.choices[0].delta.content
    out.append(
        {"tokens": usage.completion_tokens, "ttft": (first or time.monotonic()) - started, "total": time.monotonic() - started}
    )


# Warm-up: page the weights in.
one(0, 99, [])
for n in counts:
    done = []
    started = time.monotonic()

    def client_loop(i):
        for r in range(ROUNDS):
            one(i, r, done)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    tokens = sum(d["tokens"] for d in done)
    print(json.dumps({
        "parallel": parallel,
        "clients": n,
        "requests": len(done),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "mean_ttft_s": round(sum(d["ttft"] for d in done) / len(done), 2),
        "mean_request_s": round(sum(d["total"] for d in done) / len(done), 2),
    }), flush=True)
