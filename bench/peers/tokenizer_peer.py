#!/usr/bin/env python3
"""The Hugging Face side of bench/tokenizer.py: tokenizers' Tokenizer on the same corpus.
  tokenizer_peer.py TOKENIZER_JSON CORPUS ROUNDS
Each round times encode_batch of the whole corpus (tokenizers' own threads), then the same
with its parallelism off (one thread, still one call: no Python per text), then decode_batch (one thread).
Prints one JSON line per round, as bench/tokenizer.c does."""
import json
import os
import struct
import sys
import time

path, corpus, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(corpus, "rb").read()
texts, at = [], 0
while at + 4 <= len(data):
    (n,) = struct.unpack_from("<I", data, at)
    at += 4
    texts.append(data[at:at + n].decode("utf-8"))
    at += n

import tokenizers  # noqa: E402  (after reading: TOKENIZERS_PARALLELISM is read at first use)

tok = tokenizers.Tokenizer.from_file(path)
for _ in range(rounds):
    t0 = time.perf_counter()
    enc = tok.encode_batch(texts, add_special_tokens=False)
    batch_s = time.perf_counter() - t0
    tokens = sum(len(e.ids) for e in enc)
    # one thread: tokenizers' encode_batch runs serially with parallelism off
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    t0 = time.perf_counter()
    single = tok.encode_batch(texts, add_special_tokens=False)
    single_s = time.perf_counter() - t0
    ids = [e.ids for e in single]
    t0 = time.perf_counter()
    tok.decode_batch(ids, skip_special_tokens=False)
    decode_s = time.perf_counter() - t0
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    print(json.dumps({"batch_s": batch_s, "single_s": single_s, "decode_s": decode_s, "tokens": tokens,
                      "texts": len(texts)}), flush=True)
