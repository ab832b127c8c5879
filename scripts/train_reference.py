#!/usr/bin/env python3
"""PyTorch + PEFT reference for the LoRA trainer's CPU figures.

Builds a randomly initialised Qwen3-shaped model (transformers Qwen3ForCausalLM, f32),
wraps it with PEFT LoRA (alpha = 2r, dropout 0, on q/k/v/o/gate/up/down projections),
and times training steps on random token batches:
  --mode step    forward (causal-LM loss, labels = input ids) + backward + AdamW (lr 1e-4)
  --mode fwdbwd  forward + backward only (no optimizer step)
Prints one JSON object (and writes it to --json when given). Run through
scripts/train-reference.sh, which sets up the virtual environment.
"""
import argparse
import inspect
import json
import os
import platform
import resource
import statistics
import sys
import time
import warnings

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, intermediate_size=128, vocab_size=1024, lora_r=8),
    "100m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 head_dim=64, intermediate_size=2048, vocab_size=32768, lora_r=16),
}
# PEFT calls a transformers method that v5 deprecates; harmless.
warnings.filterwarnings("ignore", category=FutureWarning)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ROPE_THETA = 1e6


def build(shape, seq, attn):
    s = dict(SHAPES[shape])
    r = s.pop("lora_r")
    kw = dict(s, max_position_embeddings=max(seq, 4096), tie_word_embeddings=True, rms_norm_eps=1e-6,
              attention_dropout=0.0, use_cache=False)
    # transformers >= 5 takes rope_parameters; 4.x takes rope_theta.
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        kw["rope_theta"] = ROPE_THETA
    config = Qwen3Config(**kw)
    config._attn_implementation = attn
    model = Qwen3ForCausalLM(config).to(torch.float32)
    params = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    lora = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=TARGETS, bias="none",
                      task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, config, r, params, trainable


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--mode", choices=["step", "fwdbwd"], default="step")
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                    help="transformers attention implementation (default sdpa, transformers' own default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, config, r, params, trainable = build(a.shape, a.seq, a.attn)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    gen = torch.Generator().manual_seed(a.seed + 1)

    def one_step():
        ids = torch.randint(0, config.vocab_size, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if a.mode == "step":
            opt.step()
        return time.perf_counter() - t0, loss.item()

    load_start = os.getloadavg()
    for _ in range(a.warmup):
        one_step()
    times, losses = [], []
    for i in range(a.steps):
        t, l = one_step()
        times.append(t)
        losses.append(l)
        print(f"step {i + 1}/{a.steps}: {t:.3f} s, loss {l:.4f}", file=sys.stderr, flush=True)
    med = statistics.median(times)
    out = dict(
        shape=a.shape, mode=a.mode, attn=a.attn, dtype="f32", lora_r=r, lora_alpha=2 * r,
        lora_targets=TARGETS, params=params, trainable_params=trainable,
        batch=a.batch, seq=a.seq, threads=torch.get_num_threads(), steps=a.steps, warmup=a.warmup,
        step_s_median=round(med, 4), step_s_all=[round(t, 4) for t in times],
        tokens_per_s=round(a.batch * a.seq / med, 1), losses=[round(l, 4) for l in losses],
        peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
        torch=torch.__version__, transformers=transformers.__version__, peft=peft.__version__,
        python=platform.python_version(), cpu=platform.processor() or platform.machine(),
        nproc=os.cpu_count(),
    )
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
