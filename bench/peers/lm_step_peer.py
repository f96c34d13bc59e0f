#!/usr/bin/env python3
"""lm_step's PyTorch side (bench/lm_step.py drives it): the same causal-LM training steps as
bench/lm_step.c in PyTorch eager with transformers, from the same config.json: a model made
by AutoModelForCausalLM.from_config (transformers' default attention), torch.optim.AdamW
(lr 1e-4, PyTorch's defaults otherwise), and per step: the forward with labels = the ids
(transformers' shifted loss), backward, step, zero_grad(set_to_none=True).

  lm_step_peer.py CONFIG.json [--batch B] [--seq T] [--steps N] [--warmup W] [--threads K]
                  [--precision no|bf16] [--checkpointing]

Prints {"side":"pytorch","params":..,"torch":..,"transformers":..,"step_ms":[...]}.
"""
import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
import transformers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--precision", default="no", choices=["no", "bf16"])
    ap.add_argument("--checkpointing", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(1)
    cfg = transformers.AutoConfig.from_pretrained(a.config)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    model.train()
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(2)
    ms = []
    for s in range(a.warmup + a.steps):
        ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"side": "pytorch", "params": params, "torch": torch.__version__,
                      "transformers": transformers.__version__, "step_ms": [round(m, 3) for m in ms]}))


if __name__ == "__main__":
    main()
