#!/usr/bin/env python3
"""lm_step: causal-LM training throughput, accel against PyTorch eager + transformers.

The same configuration runs on both sides: a model made from one config.json (random
weights), AdamW (lr 1e-4), batches of random token ids with labels = the ids, the same
precision and intra-op thread count. accel's side is build/bench/lm_step_c (the C ABI:
accel_lm_forward, accel_backward, accel_step); PyTorch's is bench/peers/lm_step_peer.py
(AutoModelForCausalLM.from_config, torch.optim.AdamW, transformers' loss) in the lm venv that
scripts/lm_fixtures makes (torch 2.15.0, transformers 5.24.0 from PyPI). Each side runs in a
process of its own: W untimed steps, then N timed ones; its figure for the round is the median
step. Rounds alternate the sides (the first side rotates), and a side's figure is the median
of its rounds. tokens_vs_pytorch = accel's tokens per second / PyTorch's (target >= 1).

First, the estimate-memory error figures: build/bench/lm_memory_c trains 12 tiny
configurations on the simulator through the C ABI and compares accel_estimate_memory with the
measured per-rank peak (one line per configuration, "ratio" = estimated / measured, and a
summary with the mean and worst |ratio - 1|; target: worst <= 0.10). Then the cost of
gradient checkpointing in step time: lm_step_c with and without it on each model in fp32
(rounds alternating), "ratio" = the step time with / without. Neither needs the venv.

  bench/lm_step.py [--build-dir build] [--python PY] [--rounds 3] [--steps 3] [--warmup 1]
                   [--threads N] [--quick] [--model gpt2-small|llama-tiny|qwen2-tiny|gemma2-tiny ...]

Prints one JSON line per configuration ("bench":"lm_step") on stdout; progress on stderr.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# name: (config.json, batch, seq, precisions)
MODELS = {
    # GPT-2 small's shape (124M parameters): transformers' GPT2Config defaults, no dropout
    "gpt2-small": ({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                    "n_head": 12, "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                    "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
                    "tie_word_embeddings": True},
                   1, 128, ("no", "bf16")),
    # a tiny Llama (GQA, SwiGLU, RoPE): about 5M parameters
    "llama-tiny": ({"model_type": "llama", "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 704,
                    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "initializer_range": 0.02, "tie_word_embeddings": False,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                   8, 128, ("no",)),
    # the same size in Qwen2's shape (issue 36): q/k/v biases, GQA 8:2, untied
    "qwen2-tiny": ({"model_type": "qwen2", "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 704,
                    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                    "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "initializer_range": 0.02, "tie_word_embeddings": False, "use_sliding_window": False,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
                   8, 128, ("no",)),
    # and in Gemma 2's (issue 36): (1 + w) norms on both sub-layers, GeGLU, soft-capped scores
    # and logits (transformers' defaults, 50 and 30), alternating sliding (64) and full layers, tied
    "gemma2-tiny": ({"model_type": "gemma2", "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 704,
                     "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
                     "query_pre_attn_scalar": 32, "sliding_window": 64, "max_position_embeddings": 512,
                     "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "initializer_range": 0.02,
                     "tie_word_embeddings": True,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                    8, 128, ("no",)),
}


def log(msg):
    print(f"lm_step: {msg}", file=sys.stderr, flush=True)


def default_python():
    cache = os.environ.get("ACCEL_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                          os.path.expanduser("~/.cache"), "accel")
    return os.path.join(cache, "lm-venv", "bin", "python")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.environ.get("ACCEL_BUILD_DIR", "build"))
    ap.add_argument("--python", default=default_python(), help="a Python with torch and transformers (the lm venv)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="1 round of 2 steps")
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    a, _ = ap.parse_known_args()  # scripts/bench passes its own extra arguments to every benchmark
    if a.quick:
        a.rounds, a.steps = 1, 2
    failed = 0
    mem = pathlib.Path(a.build_dir) / "bench" / "lm_memory_c"
    if mem.exists():
        with tempfile.TemporaryDirectory() as tmp:
            log("estimate-memory against the simulator (12 configurations)")
            p = subprocess.run([str(mem), tmp], stdout=subprocess.PIPE, text=True)
            for line in p.stdout.splitlines():
                print(line, flush=True)
            if p.returncode != 0:
                log(f"lm_memory_c failed (status {p.returncode}): an estimate off by more than 10%, or a run failed")
                failed += 1
    else:
        log(f"{mem} is missing (ninja -C {a.build_dir}): no estimate-memory figures")
        failed += 1
    exe = pathlib.Path(a.build_dir) / "bench" / "lm_step_c"
    if not exe.exists():
        log(f"{exe} is missing (ninja -C {a.build_dir})")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        configs = {}  # each model's config.json, written once for both comparisons
        for name in a.model or list(MODELS):
            configs[name] = os.path.join(tmp, name + ".json")
            with open(configs[name], "w") as f:
                json.dump(MODELS[name][0], f)
        for name in a.model or list(MODELS):
            _, batch, seq, _ = MODELS[name]
            path = configs[name]
            common = [str(exe), path, "--batch", str(batch), "--seq", str(seq), "--steps", str(a.steps), "--warmup",
                      str(a.warmup), "--threads", str(a.threads)]
            per = {False: [], True: []}
            try:
                for r in range(a.rounds):
                    for ckpt in ([False, True] if r % 2 == 0 else [True, False]):
                        res = run(common + (["--checkpointing"] if ckpt else []))
                        per[ckpt].append(statistics.median(res["step_ms"]))
                        log(f"{name} checkpointing={ckpt} round {r + 1}/{a.rounds}: {per[ckpt][-1]:.1f} ms/step")
            except RuntimeError as e:
                log(str(e))
                failed += 1
                continue
            without, with_ = statistics.median(per[False]), statistics.median(per[True])
            print(json.dumps({"bench": "lm_step", "case": "gradient_checkpointing", "model": name, "batch": batch,
                              "seq": seq, "precision": "no", "threads": a.threads, "rounds": a.rounds,
                              "steps": a.steps, "step_ms_without": round(without, 2), "step_ms_with": round(with_, 2),
                              "ratio": round(with_ / without, 3)}), flush=True)
        if not os.path.exists(a.python):
            log(f"no Python with torch and transformers at {a.python}: scripts/lm_fixtures makes the lm venv "
                "(or pass --python)")
            return 1
        for name in a.model or list(MODELS):
            _, batch, seq, precisions = MODELS[name]
            path = configs[name]
            for precision in precisions:
                common = [path, "--batch", str(batch), "--seq", str(seq), "--steps", str(a.steps), "--warmup",
                          str(a.warmup), "--threads", str(a.threads), "--precision", precision]
                sides = {"accel": [str(exe)] + common,
                         "pytorch": [a.python, str(ROOT / "bench" / "peers" / "lm_step_peer.py")] + common}
                per = {"accel": [], "pytorch": []}
                info = {}
                try:
                    for r in range(a.rounds):
                        order = ["accel", "pytorch"] if r % 2 == 0 else ["pytorch", "accel"]
                        for side in order:
                            res = run(sides[side])
                            info[side] = res
                            per[side].append(statistics.median(res["step_ms"]))
                            log(f"{name} {precision} round {r + 1}/{a.rounds} {side}: {per[side][-1]:.1f} ms/step")
                except RuntimeError as e:
                    log(str(e))
                    failed += 1
                    continue
                tokens = batch * seq
                accel_ms, torch_ms = statistics.median(per["accel"]), statistics.median(per["pytorch"])
                print(json.dumps({
                    "bench": "lm_step", "model": name, "params": info["accel"]["params"], "batch": batch, "seq": seq,
                    "precision": precision, "threads": a.threads, "optimizer": "adamw", "rounds": a.rounds,
                    "steps": a.steps, "accel_step_ms": round(accel_ms, 2), "pytorch_step_ms": round(torch_ms, 2),
                    "accel_tokens_per_s": round(tokens * 1e3 / accel_ms, 1),
                    "pytorch_tokens_per_s": round(tokens * 1e3 / torch_ms, 1),
                    "tokens_vs_pytorch": round(torch_ms / accel_ms, 3),
                    "same_params": info["accel"]["params"] == info["pytorch"]["params"],
                    "torch": info["pytorch"]["torch"], "transformers": info["pytorch"]["transformers"],
                    "machine": platform.machine(), "cpus": os.cpu_count()}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
