#!/usr/bin/env python3
"""Writes examples/data/kjv-genesis-exodus.txt.gz and kjv-proverbs.txt.gz: the King James
Version's books of Genesis and Exodus (the language-model example's pretraining text) and of
Proverbs (its LoRA fine-tuning text), as plain prose: one paragraph per chapter, verses
joined with spaces, no chapter headings or verse numbers.

The text comes from Debian's bible-kjv-text package through its `bible` program
(`apt install bible-kjv`); nothing is downloaded at run time. The KJV (1611, the 1769
Oxford standard text as that package ships it) is in the public domain.

Usage: scripts/kjv_texts.py [OUT_DIR]   (default examples/data)
"""
import gzip
import os
import re
import shutil
import subprocess
import sys


def book(spec):
    out = subprocess.run(["bible", "-l0", spec], capture_output=True, text=True, check=True).stdout
    chapters, cur = [], []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            cur.append(m.group(1).strip())
        elif cur:  # a chapter heading ("Genesis 12") ends the chapter before it
            chapters.append(" ".join(cur))
            cur = []
    if cur:
        chapters.append(" ".join(cur))
    return "\n\n".join(chapters) + "\n"


def write(path, text):
    # a fixed mtime and no name in the header: the same bytes on every run
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as f:
        f.write(text.encode("utf-8"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "data")
    if shutil.which("bible") is None:
        print("kjv_texts: the `bible` program is missing (Debian: apt install bible-kjv)", file=sys.stderr)
        return 1
    texts = {"kjv-genesis-exodus.txt.gz": book("gen1:1-gen50:26") + "\n" + book("exo1:1-exo40:38"),
             "kjv-proverbs.txt.gz": book("pro1:1-pro31:31")}
    for name, text in texts.items():
        write(os.path.join(out, name), text)
        print(f"kjv_texts: {name}: {len(text)} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
