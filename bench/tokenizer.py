#!/usr/bin/env python3
"""tokenizer: tokenizer throughput, accel against Hugging Face `tokenizers` in the same run.

The same tokenizer.json (tests/fixtures/tokenizers: byte-level BPE as GPT-2, Llama 3 and
Qwen2 publish it, and BPE with byte fallback as Llama 2 and Gemma do) encodes the same corpus
on both sides: the fixtures' multilingual corpus (English, code, Chinese and ten other
scripts, emoji, whitespace runs; its valid UTF-8 strings) repeated with a per-copy prefix to
--texts texts, without special tokens. accel's side is build/bench/tokenizer_c (the C ABI);
Hugging Face's is bench/peers/tokenizer_peer.py (tokenizers 0.23.3 in the lm venv that
scripts/lm_fixtures makes). Each side runs in its own process for --rounds rounds; the
sides alternate and a figure is the median over rounds. Three measurements per tokenizer:

  batch   the whole corpus in one call: accel_tokenizer_encode_batch against tokenizers'
          encode_batch, each with its own threads (all the machine's cores)
  single  one thread: accel_tokenizer_encode per text (a C loop) against encode_batch with
          TOKENIZERS_PARALLELISM=false (one Python call, Rust's serial loop)
  decode  one thread: accel_tokenizer_decode per text against decode_batch, serial

vs_hf_tokenizers = accel's tokens per second / Hugging Face's (higher is better), per
measurement; the headline is `batch`.

  bench/tokenizer.py [--build-dir build] [--python PY] [--rounds 5] [--texts 12000]
                     [--family gpt2 llama3 ...]
Prints one JSON line per tokenizer and measurement ("bench":"tokenizer"); progress on stderr.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests/fixtures/tokenizers"


def log(msg):
    print(f"tokenizer: {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    default_py = pathlib.Path(os.environ.get("ACCEL_CACHE", pathlib.Path.home() / ".cache/accel")) / "lm-venv/bin/python"
    ap.add_argument("--python", default=str(default_py))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--texts", type=int, default=12000)
    ap.add_argument("--family", nargs="*", default=["gpt2", "llama3", "qwen2", "llama2", "gemma"])
    args = ap.parse_args()
    exe = pathlib.Path(args.build_dir) / "bench/tokenizer_c"
    if not exe.exists():
        sys.exit(f"tokenizer: {exe} is missing: build with ninja -C {args.build_dir}")
    if not pathlib.Path(args.python).exists():
        sys.exit(f"tokenizer: no Python with tokenizers at {args.python} (scripts/lm_fixtures makes the lm venv)")
    base = [e["text"] for e in json.load(open(FIXTURES / "corpus.json", encoding="utf-8")) if "text" in e]
    texts = [f"#{i // len(base)} {base[i % len(base)]}" for i in range(args.texts)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="true")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp) / "corpus.bin"
        with open(corpus, "wb") as f:
            for t in texts:
                b = t.encode("utf-8")
                f.write(struct.pack("<I", len(b)) + b)
        mb = corpus.stat().st_size / 1e6
        log(f"{len(texts)} texts, {mb:.2f} MB; {args.rounds} rounds per side; {os.cpu_count()} CPUs")
        for fam in args.family:
            tj = FIXTURES / fam / "tokenizer.json"
            sides = {"accel": [], "hf": []}
            for r in range(args.rounds):
                order = ["accel", "hf"] if r % 2 == 0 else ["hf", "accel"]
                for side in order:
                    if side == "accel":
                        rows = run([str(exe), str(FIXTURES / fam), str(corpus), "2"], env)
                    else:
                        rows = run([args.python, str(ROOT / "bench/peers/tokenizer_peer.py"), str(tj), str(corpus), "2"], env)
                    sides[side].append(rows[-1])  # the second round: caches warm on both sides
            ta, th = sides["accel"][0]["tokens"], sides["hf"][0]["tokens"]
            if ta != th:
                sys.exit(f"tokenizer: {fam}: accel made {ta} tokens, tokenizers {th}")
            for what in ("batch", "single", "decode"):
                a = statistics.median(x[f"{what}_s"] for x in sides["accel"])
                h = statistics.median(x[f"{what}_s"] for x in sides["hf"])
                row = {"bench": "tokenizer", "family": fam, "measure": what, "texts": len(texts), "tokens": ta,
                       "accel_tokens_per_s": round(ta / a), "hf_tokens_per_s": round(th / h),
                       "accel_s": round(a, 5), "hf_s": round(h, 5), "vs_hf_tokenizers": round(h / a, 3),
                       "threads": os.cpu_count() if what == "batch" else 1, "rounds": args.rounds,
                       "cpu": platform.processor() or platform.machine()}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
