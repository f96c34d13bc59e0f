#!/usr/bin/env python3
"""Writes examples/data/chat/ for examples/c/finetune_lm.c (standard library only):
arithmetic.jsonl, 256 conversations in the chat "messages" format (a system prompt, a
question about a sum or a difference of two numbers below 50, the answer written out), from a
fixed seed; and the tokenizer: a copy of tests/fixtures/tokenizers/qwen2 (a byte-level BPE
with Qwen2's pre-tokenizer, NFC and ChatML tokens, trained by scripts/tokenizer_fixtures.py),
with its ChatML chat_template."""
import json
import pathlib
import random
import shutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "examples/data/chat"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2026)
    lines = []
    for _ in range(256):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        if rng.random() < 0.5:
            q, ans = f"What is {a} plus {b}?", f"{a} + {b} = {a + b}."
        else:
            a, b = max(a, b), min(a, b)
            q, ans = f"What is {a} minus {b}?", f"{a} - {b} = {a - b}."
        msgs = [{"role": "system", "content": "You are a calculator. Answer with the equation."},
                {"role": "user", "content": q}, {"role": "assistant", "content": ans}]
        lines.append(json.dumps({"messages": msgs}, ensure_ascii=False))
    (OUT / "arithmetic.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(ROOT / "tests/fixtures/tokenizers/qwen2" / f, OUT / f)


if __name__ == "__main__":
    main()
