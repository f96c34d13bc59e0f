#!/usr/bin/env python3
"""Tokenizer fixtures (issue 36): tiny tokenizers of each family's kind, trained here, and the
ids Hugging Face `tokenizers` (and SentencePiece, for the .model files) gives for a
multilingual corpus. accel's tokenizer is checked against them (tests/lm/test_tokenizer.cpp).

Run through `scripts/lm_fixtures --tokenizers` (the lm venv, offline). Nothing is downloaded:
each tokenizer is trained on a corpus this script writes with a fixed seed, with the
pre-tokenizer, normalizer, decoder, post-processor and special tokens of the family's
published tokenizer.json (for the SentencePiece families: a SentencePiece BPE model with the
family's trainer settings, turned into tokenizer.json by transformers' own tokenizer class).

Writes OUT/corpus.json (the strings: text, or "hex" for bytes that are not UTF-8) and one
directory per tokenizer with its files and expected.json:
  {"add_special": [[ids]...], "plain": [[ids]...], "decode": [...], "decode_skip": [...],
   "batch": {...}}
"""
import argparse
import io
import json
import os
import random
import shutil
import sys

import sentencepiece as spm
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
import transformers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was for that with as on by at from this be are it an which or have has "
         "model training gradient tokenizer attention layer weight batch loss step rank process memory "
         "device kernel tensor optimizer learning rate checkpoint resume shard window rotary embedding "
         "I you we they don't can't won't it's we've I'll she'd they're HELLO World Python Rust Go "
         "naïve café résumé Zürich straße façade coöperate déjà-vu").split()
CHINESE = [
    "我们在一台机器上训练模型。", "分词器把文本变成模型训练时用的编号。", "今天的天气很好，我们去公园散步吧！",
    "深度学习需要大量的数据和计算资源。", "这个函数返回一个张量，形状是（批次，长度）。", "北京是中国的首都，上海是最大的城市。",
    "模型的参数在每个进程上都是一样的。", "请把梯度累积四步，然后再更新权重。", "人工智能正在改变世界",
    "中文、日本語、한국어：三种语言。", "他说：“你好，世界。”", "数字１２３和全角字母ＡＢＣ。",
]
OTHER = [
    "Привет, мир! Это тест токенизатора.", "Γειά σου Κόσμε", "مرحبا بالعالم، هذا اختبار.", "नमस्ते दुनिया, यह एक परीक्षण है।",
    "こんにちは世界、トークナイザーのテストです。", "안녕하세요 세계, 토크나이저 테스트입니다.", "Ünïcödé äöü ÄÖÜ ß ẞ",
    "İstanbul'da ISTANBUL'S ıi", "e\u0301 a\u0308 n\u0303 (combining marks, NFD)", "ﬁ ﬂ ① ㎏ Ⅻ (compatibility)",
    "שלום עולם", "Tiếng Việt có dấu", "ไทย ภาษา", "ελληνικά ΑΒΓ", "🙂 emoji at the start",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "🤖🧠⚡", "✅ done", "🚀🚀🚀", "🏳️‍🌈", "👩🏿‍💻 codes"]
CODE = [
    "def forward(self, x):\n    return self.linear(x).relu()\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "fn main() {\n    println!(\"{}\", 42);\n}\n",
    "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"rope_theta\": 500000.0}",
    "if err != nil {\n\t\treturn fmt.Errorf(\"open %s: %w\", path, err)\n\t}",
    "    x = torch.randn(2, 3)  # shape (2, 3)\n\n\n    y = x @ x.T",
    "<html><body><p class=\"x\">Hello &amp; welcome</p></body></html>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "$ accel launch -n 4 --backend sim ./train --epochs=3",
    "a_b-c.d/e\\f|g~h`i^j", "x+=1;y-=2;z*=3;w/=4", "0x7fff_ffff 1e-8 3.14159 -42 1,000,000.50",
]
SPACES = [
    "", " ", "  ", "   leading", "trailing   ", "a  b   c    d", "\t", "\t\ttabs\tand\tspaces  ", "\n", "\n\n\n",
    "line one\nline two\r\nline three\r\n", " \n \n ", "nbsp\u00a0here", "ideographic\u3000space", "line\u2028sep",
    "mixed \t\n\r\n  end", "     ", "word\n\n\n\nword", "\u200bzero width", "ends with newline\n",
]
NUMBERS = ["1234567890", "3.14159265358979", "2026-11-27", "phone: +1 (555) 123-4567", "v1.2.3", "10000000000000000000"]
INVALID = [b"abc\xffdef", b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80surrogate", b"\xc0\xafoverlong",
           b"ok \xe4\xb8\xad\xe6 cut", b"\x80\x81\x82", b"tail\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80five"]


def sentence(rng):
    n = rng.randint(3, 14)
    words = [rng.choice(WORDS) for _ in range(n)]
    s = " ".join(words)
    s = s[0].upper() + s[1:]
    return s + rng.choice([".", "!", "?", ",", ";", ":", "...", " --", ""])


def make_corpus(specials):
    """The parity corpus: a list of (text or None, bytes)."""
    rng = random.Random(36)
    items = []
    for _ in range(120):
        items.append(sentence(rng))
    for _ in range(20):
        items.append(" ".join(sentence(rng) for _ in range(rng.randint(2, 5))))
    items += CHINESE + OTHER + EMOJI + CODE + SPACES + NUMBERS
    for _ in range(30):  # random CJK, symbols and emoji: many are outside the tiny vocabularies
        cps = [rng.choice([rng.randint(0x4E00, 0x9FFF), rng.randint(0x1F300, 0x1F6FF), rng.randint(0x20, 0x7E),
                           rng.randint(0xA0, 0x24F), rng.randint(0x2000, 0x2BFF), rng.randint(0x20000, 0x2A6DF)])
               for _ in range(rng.randint(1, 12))]
        items.append("".join(chr(c) for c in cps))
    for _ in range(20):
        items.append(rng.choice(CODE) + " " + rng.choice(CHINESE) + rng.choice(EMOJI) + rng.choice(SPACES))
    for _ in range(30):  # the family's special tokens inside text, with and without spaces around
        sp = rng.choice(specials)
        items.append(rng.choice(["", " ", "Hi ", "x"]) + sp + rng.choice(["", " ", "\n", "word "]) + sentence(rng) +
                     rng.choice(["", sp, " " + sp + " "]))
    out = [(s, s.encode("utf-8")) for s in items]
    out += [(None, b) for b in INVALID]
    return out


def training_text(rng):
    lines = []
    for _ in range(3000):
        lines.append(sentence(rng))
    for _ in range(30):
        lines += CHINESE + OTHER + CODE + NUMBERS + EMOJI[:5]
    return lines


def byte_level_bpe(lines, pre, vocab_size, specials, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    return tok


def vocab_merges(tok):
    data = json.loads(tok.to_str())
    return data["model"]["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in data["model"]["merges"]]


def spm_model(lines, path, vocab_size, gemma):
    # The lines are given through an iterator and the model written through a writer, so the
    # trainer spec saved in the model names no path (two runs give the same bytes anywhere).
    writer = io.BytesIO()
    kw = dict(sentence_iterator=iter(lines), model_writer=writer, model_type="bpe", vocab_size=vocab_size,
              byte_fallback=True, character_coverage=0.9995, split_digits=True, allow_whitespace_only_pieces=True,
              remove_extra_whitespaces=False, normalization_rule_name="identity", num_threads=1,
              input_sentence_size=0, shuffle_input_sentence=False, seed_sentencepiece_size=100000,
              minloglevel=2)
    if gemma:  # Gemma's ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3; no dummy prefix
        kw.update(pad_id=0, eos_id=1, bos_id=2, unk_id=3, add_dummy_prefix=False, pad_piece="<pad>",
                  eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
                  user_defined_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"])
    else:      # Llama 2 / Mistral: <unk> 0, <s> 1, </s> 2; a dummy prefix
        kw.update(unk_id=0, bos_id=1, eos_id=2, pad_id=-1, add_dummy_prefix=True)
    spm.SentencePieceTrainer.train(**kw)
    with open(path + ".model", "wb") as f:
        f.write(writer.getvalue())


def from_spm(cls, d):
    """transformers' own conversion of a SentencePiece model (what from_pretrained does for a
    .model under another name: transformers 5 takes `tokenizer.model` for tiktoken's)."""
    kw = cls._convert_from_sentencepiece(os.path.join(d, "tokenizer.model"), {})
    return cls(**kw)


def build(name, d, lines):
    """Writes tokenizer files for family `name` into d; returns (hf tokenizer, specials in text)."""
    if name == "gpt2":
        base = byte_level_bpe(lines, pre_tokenizers.ByteLevel(add_prefix_space=False), 1200, ["<|endoftext|>"])
        vocab, merges = vocab_merges(base)
        t = transformers.GPT2Tokenizer(vocab=vocab, merges=merges)
        t.save_pretrained(d)
        return ["<|endoftext|>"]
    if name == "smollm2":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = byte_level_bpe(lines, pre, 1200, specials)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        t = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                                 eos_token="<|im_end|>", pad_token="<|im_end|>",
                                                 unk_token="<|endoftext|>")
        t.save_pretrained(d)
        return specials
    if name == "llama3":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        tok = byte_level_bpe(lines, pre, 1200, specials, ignore_merges=True)
        tok.decoder = decoders.ByteLevel()
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        t = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                                 eos_token="<|eot_id|>")
        t.save_pretrained(d)
        return specials
    if name == "qwen2":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre
        trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=[], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(lines, trainer)
        vocab, merges = vocab_merges(tok)
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        t = transformers.Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None,
                                        eos_token="<|im_end|>", pad_token="<|endoftext|>")
        t.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        t.save_pretrained(d)
        return specials
    if name in ("llama2", "phi3", "mistral"):
        spm_model(lines, os.path.join(d, "tokenizer"), 1000, gemma=False)
        t = from_spm(transformers.LlamaTokenizer, d)
        t.add_bos_token = True
        specials = ["<s>", "</s>", "<unk>"]
        if name == "phi3":  # Phi-3's chat tokens: special, rstrip (they eat the whitespace after them); no BOS
            chat = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
            t.add_special_tokens({"additional_special_tokens": [AddedToken(c, rstrip=True, normalized=False, special=True) for c in chat]})
            t.add_tokens([AddedToken("<|placeholder1|>", lstrip=True, normalized=False, special=False)])
            t.add_bos_token = False
            specials = specials + chat + ["<|placeholder1|>"]
        t.save_pretrained(d)
        if name == "mistral":  # the tokenizer.json of Mistral-7B-v0.1 and Llama-2 as published: the
            # prefix and the spaces done by normalizers (Prepend, Replace), no pre-tokenizer
            path = os.path.join(d, "tokenizer.json")
            data = json.load(open(path, encoding="utf-8"))
            data["normalizer"] = {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
            data["pre_tokenizer"] = None
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, indent=2)
        return specials
    if name == "gemma":
        spm_model(lines, os.path.join(d, "tokenizer"), 1000, gemma=True)
        t = from_spm(transformers.GemmaTokenizer, d)
        t.add_bos_token = True
        t.save_pretrained(d)
        return ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>"]
    raise SystemExit(f"unknown family {name}")


# Chat templates (tokenizer_config.json's chat_template) as the families publish them: ChatML
# (Qwen2/2.5 and SmolLM2 without their default system prompt), Llama 3 Instruct's, Gemma's,
# Phi-3's and Mistral-7B-Instruct-v0.1's. accel's built-in chat formats must render exactly
# what transformers' apply_chat_template renders with these.
CHAT_TEMPLATES = {
    "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "gemma": ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
              "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
              "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
              "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"),
    "phi3": ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
             "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
             "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
             "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"),
    "mistral": ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
                "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
}
FAMILY_CHAT = {"smollm2": "chatml", "qwen2": "chatml", "llama3": "llama3", "gemma": "gemma", "phi3": "phi3",
               "mistral": "mistral"}
CONVERSATIONS = [
    [{"role": "user", "content": "What is gradient accumulation?"},
     {"role": "assistant", "content": "Summing gradients over several micro-batches before one optimizer step."}],
    [{"role": "system", "content": "You answer briefly."},
     {"role": "user", "content": "  Translate 'bonjour' into English.  "},
     {"role": "assistant", "content": "Hello."},
     {"role": "user", "content": "和中文？"},
     {"role": "assistant", "content": "你好。 👋\n"}],
    [{"role": "user", "content": "Write a loop in C.\n"},
     {"role": "assistant", "content": "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}"},
     {"role": "user", "content": "Thanks!"}],
]


def chat_expected(name, d):
    """transformers' apply_chat_template with the family's template, for each conversation
    that the template accepts, with and without the generation prompt: the text, and its ids
    without special tokens."""
    t = transformers.AutoTokenizer.from_pretrained(d)
    # the ids are tokenizers' for tokenizer.json (transformers 5 rebuilds a LlamaTokenizer's
    # pipeline from its vocabulary, dropping the Prepend/Replace normalizers of the mistral layout)
    raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    out = []
    for i, conv in enumerate(CONVERSATIONS):
        for gen in (False, True):
            try:
                text = t.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            except Exception as e:  # the template refuses (Gemma, Mistral: no system role)
                out.append({"conversation": i, "add_generation_prompt": gen, "error": str(e)})
                continue
            ids = raw.encode(text, add_special_tokens=False).ids
            out.append({"conversation": i, "add_generation_prompt": gen, "text": text, "ids": ids})
    return out


FAMILIES = ["gpt2", "smollm2", "llama3", "qwen2", "llama2", "mistral", "phi3", "gemma"]


def expected(d, corpus):
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = [b.decode("utf-8", "replace") for _, b in corpus]
    add = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    out = {"tokenizers": tokenizers.__version__, "add_special": add, "plain": plain,
           "decode": tok.decode_batch(add, skip_special_tokens=False),
           "decode_skip": tok.decode_batch(add, skip_special_tokens=True)}
    # A batch with truncation and padding on each side, as tokenizers' enable_truncation and
    # enable_padding do them (pad id: the tokenizer config's pad token, else 0).
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    pad = cfg.get("pad_token")
    pad_id = tok.token_to_id(pad) if isinstance(pad, str) and tok.token_to_id(pad) is not None else 0
    batch_texts = texts[:12]
    out["batch"] = {"texts": list(range(12)), "pad_id": pad_id, "max_length": 9, "cases": []}
    for direction in ("right", "left"):
        for side in ("right", "left"):
            tok.enable_truncation(max_length=9, direction=side)
            tok.enable_padding(direction=direction, pad_id=pad_id, pad_token=pad or "[PAD]")
            enc = tok.encode_batch(batch_texts, add_special_tokens=True)
            out["batch"]["cases"].append({"padding_side": direction, "truncation_side": side,
                                          "ids": [e.ids for e in enc], "mask": [e.attention_mask for e in enc]})
            tok.no_truncation()
            tok.no_padding()
    model = os.path.join(d, "tokenizer.model")
    if os.path.exists(model):  # SentencePiece's own ids for the .model (no special tokens parsed in text)
        sp = spm.SentencePieceProcessor(model_file=model)
        out["sentencepiece"] = {"version": spm.__version__, "ids": [sp.encode(t) for t in texts],
                                "decode": [sp.decode(sp.encode(t)) for t in texts]}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only")
    args = ap.parse_args()
    lines = training_text(random.Random(7))
    os.makedirs(args.out, exist_ok=True)
    names = [args.only] if args.only else FAMILIES
    dirs = {}
    for name in names:
        d = os.path.join(args.out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        build(name, d, lines)
        dirs[name] = d
    corpus = make_corpus(sorted({s for n in FAMILIES for s in SPECIALS[n]}))
    with open(os.path.join(args.out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump([{"text": s} if s is not None else {"hex": b.hex()} for s, b in corpus], f, ensure_ascii=False, indent=0)
        f.write("\n")
    for name, d in dirs.items():
        if name in FAMILY_CHAT:  # the family's chat template, then what transformers renders with it
            cfg_path = os.path.join(d, "tokenizer_config.json")
            cfg = json.load(open(cfg_path, encoding="utf-8"))
            cfg["chat_template"] = CHAT_TEMPLATES[FAMILY_CHAT[name]]
            with open(cfg_path, "w", encoding="utf-8") as f:
                json.dump(cfg, f, ensure_ascii=False, indent=2, sort_keys=True)
                f.write("\n")
        exp = expected(d, corpus)
        if name in FAMILY_CHAT:
            exp["chat"] = chat_expected(name, d)
            with open(os.path.join(args.out, "conversations.json"), "w", encoding="utf-8") as f:
                json.dump(CONVERSATIONS, f, ensure_ascii=False, indent=1)
                f.write("\n")
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(exp, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        n_tokens = sum(len(x) for x in exp["add_special"])
        print(f"{name}: {len(corpus)} strings, {n_tokens} tokens", file=sys.stderr)


SPECIALS = {
    "gpt2": ["<|endoftext|>"], "smollm2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "llama3": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"], "qwen2": ["<|im_start|>", "<|im_end|>"],
    "llama2": ["<s>", "</s>"], "mistral": ["<s>", "</s>"], "phi3": ["<|user|>", "<|assistant|>", "<|end|>", "<|placeholder1|>"],
    "gemma": ["<start_of_turn>", "<end_of_turn>", "<bos>"],
}

if __name__ == "__main__":
    main()
