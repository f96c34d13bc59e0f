"""Tokenizers through the Python binding against Hugging Face tokenizers and SentencePiece
(tests/fixtures/tokenizers, made by scripts/lm_fixtures --tokenizers; see its README): every
string of the corpus encodes to the same ids with and without special tokens and decodes to the
same text, batches pad and truncate on each side as tokenizers does, the .model files give
SentencePiece's ids, conversations render as transformers' apply_chat_template renders them and
fine-tuning batches from a JSONL file put their labels on the answers only. Then the arguments,
the errors and the lifetime."""
import json
import os
import shutil
import threading

import numpy as np
import pytest

import accel

from conftest import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures", "tokenizers")
FAMILIES = ["gpt2", "smollm2", "llama3", "qwen2", "llama2", "mistral", "phi3", "gemma"]
SENTENCEPIECE = [f for f in FAMILIES if os.path.exists(os.path.join(FIXTURES, f, "tokenizer.model"))]


def _read(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def corpus():
    """The corpus: str for a "text" entry, bytes (not UTF-8) for a "hex" one."""
    return [e["text"] if "text" in e else bytes.fromhex(e["hex"]) for e in _read("corpus.json")]


def _load(family, name=""):
    return accel.Tokenizer(os.path.join(FIXTURES, family, name) if name else os.path.join(FIXTURES, family))


def test_the_fixture_families_are_all_there():
    assert {"qwen2", "llama2", "gemma"} <= set(FAMILIES) and {"llama2", "gemma"} <= set(SENTENCEPIECE)


@pytest.mark.parametrize("family", FAMILIES)
def test_corpus_matches_hugging_face_tokenizers(family, corpus):
    exp = _read(family, "expected.json")
    assert len(exp["add_special"]) == len(corpus) == 305
    differing = []
    with _load(family) as tok:
        for i, text in enumerate(corpus):
            # replace_invalid_utf8: valid UTF-8 is unchanged by it; the "hex" strings become what
            # Hugging Face saw (bytes.decode("utf-8", "replace"))
            add = tok.encode(text, replace_invalid_utf8=True)
            plain = tok.encode(text, add_special_tokens=False, replace_invalid_utf8=True)
            want = exp["add_special"][i]
            got = (add, plain, tok.decode(want), tok.decode(want, skip_special_tokens=True))
            if got != (want, exp["plain"][i], exp["decode"][i], exp["decode_skip"][i]):
                differing.append((i, text, got, (want, exp["plain"][i], exp["decode"][i], exp["decode_skip"][i])))
    assert differing == [], f"{family}: {len(differing)} strings differ, the first: {differing[0]}"


@pytest.mark.parametrize("family", FAMILIES)
def test_batches_match_hugging_face_tokenizers(family, corpus):
    batch = _read(family, "expected.json")["batch"]
    texts = [corpus[i] for i in batch["texts"]]
    with _load(family) as tok:
        for case in batch["cases"]:
            ids, mask = tok.encode_batch(texts, max_length=batch["max_length"], pad_id=batch["pad_id"],
                                         padding_side=case["padding_side"], truncation_side=case["truncation_side"])
            where = f"padding {case['padding_side']}, truncation {case['truncation_side']}"
            assert ids.dtype == mask.dtype == accel.DType.INT64
            assert ids.shape == mask.shape == (len(texts), len(case["ids"][0])), where
            assert ids.tolist() == case["ids"], where
            assert mask.tolist() == case["mask"], where
            ids.close()
            mask.close()


@pytest.mark.parametrize("family", SENTENCEPIECE)
def test_sentencepiece_model_matches_sentencepiece(family, corpus):
    sp = _read(family, "expected.json")["sentencepiece"]
    differing = []
    with _load(family, "tokenizer.model") as tok:
        for i, text in enumerate(corpus):
            got = tok.encode(text, add_special_tokens=False, replace_invalid_utf8=True)
            back = tok.decode(sp["ids"][i], skip_special_tokens=True)
            if (got, back) != (sp["ids"][i], sp["decode"][i]):
                differing.append((i, text, got, sp["ids"][i], back, sp["decode"][i]))
    assert differing == [], f"{family}/tokenizer.model: {len(differing)} strings differ, the first: {differing[0]}"


# ---- the vocabulary ------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["qwen2", "llama2", "gemma", "phi3"])
def test_special_tokens_are_tokenizer_configs(family):
    cfg = _read(family, "tokenizer_config.json")
    with _load(family) as tok:
        for attr, key in (("bos_id", "bos_token"), ("eos_id", "eos_token"), ("pad_id", "pad_token"),
                          ("unk_id", "unk_token")):
            name = cfg.get(key)
            want = tok.token_to_id(name) if name else None
            assert getattr(tok, attr) == want, attr
            assert tok.special_id(attr[:3]) == want and tok.special_id(accel.SpecialToken[attr[:3].upper()]) == want
            if want is not None:
                assert tok.id_to_token(want) == name and tok.is_special(want)


def test_qwen2_special_ids():
    with _load("qwen2") as tok:
        assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id) == (None, 1200, 1201, None)
        assert tok.vocab_size == len(tok) == 1203
        assert tok.token_to_id("<|im_start|>") == 1202 and tok.is_special(1202)
        assert tok.token_to_id("no such token") is None and tok.token_to_id("") is None


def test_every_id_round_trips_through_its_token():
    with _load("qwen2") as tok:
        for i in range(tok.vocab_size):
            text = tok.id_to_token(i)
            assert isinstance(text, str) and tok.token_to_id(text) == i
        assert tok.token_to_id(tok.id_to_token(300).encode()) == 300  # bytes work too
        assert not tok.is_special(300)


# ---- encode --------------------------------------------------------------------------------

def test_encode_takes_str_and_bytes_and_keeps_nul_characters():
    with _load("qwen2") as tok:
        ids = tok.encode("Hello wörld")
        assert all(type(i) is int for i in ids)
        for same in ("Hello wörld".encode(), bytearray("Hello wörld".encode()), memoryview("Hello wörld".encode())):
            assert tok.encode(same) == ids
        with_nul = tok.encode("a\0b")  # NUL is text here, never the end of a C string
        assert len(with_nul) == 3 and tok.decode(with_nul) == "a\0b"
        assert tok.encode("") == [] and tok.decode([]) == ""


def test_encode_return_tensor_and_truncation():
    with _load("llama2") as tok:
        ids = tok.encode("hello world foo")
        assert ids[0] == tok.bos_id and len(ids) > 4
        t = tok.encode("hello world foo", return_tensor=True)
        assert isinstance(t, accel.Tensor) and t.dtype == accel.DType.INT64 and t.shape == (len(ids),)
        assert t.tolist() == ids and tok.decode(t) == tok.decode(ids)
        t.close()
        assert tok.encode("hello world foo", max_length=3) == ids[:3]
        assert tok.encode("hello world foo", max_length=3, truncation_side="left") == [ids[0]] + ids[-2:]
        assert tok.encode("hello world foo", max_length=None) == ids
        assert tok.encode("hello world foo", add_special_tokens=False) == ids[1:]


def test_decode_takes_lists_arrays_and_integer_tensors():
    with _load("gemma") as tok:
        ids = tok.encode("Decode me, please.")
        text = tok.decode(ids)
        assert tok.decode(np.array(ids, dtype=np.int64)) == text
        assert tok.decode(np.array(ids, dtype=np.int32)) == text
        assert tok.decode(tuple(np.int64(i) for i in ids)) == text
        with accel.tensor(np.array(ids, dtype=np.int32)) as t:
            assert tok.decode(t) == text
        assert tok.decode(ids, skip_special_tokens=True) == "Decode me, please."


def test_encode_batch_padding_and_batch_decode():
    with _load("llama2") as tok:
        texts = ["a", "hello world"]
        lengths = [len(tok.encode(t)) for t in texts]
        batch = tok.encode_batch(texts)
        assert isinstance(batch, accel.BatchEncoding)
        assert batch.input_ids.shape == (2, max(lengths))
        assert batch.attention_mask.numpy().sum(axis=1).tolist() == lengths
        assert tok.batch_decode(batch.input_ids, skip_special_tokens=True) == texts
        assert tok.batch_decode([tok.encode(t) for t in texts], skip_special_tokens=True) == texts
        assert tok.batch_decode(batch.input_ids.numpy(), skip_special_tokens=True) == texts
        left = tok.encode_batch(texts, padding_side="left", pad_id=7).input_ids.numpy()
        assert left[0, 0] == 7 and left[1, 0] == tok.bos_id
        wide = tok.encode_batch(texts, max_length=8, pad_to_max_length=True)
        assert wide.input_ids.shape == (2, 8) and wide.attention_mask.numpy().sum() == sum(lengths)
        assert tok.encode_batch(texts, pad_to_multiple_of=5).input_ids.shape == (2, 10)
        assert tok.encode_batch(["x"], padding_side=accel.Side.LEFT).input_ids.tolist() == [tok.encode("x")]
        # a generator is a sequence of texts too
        assert tok.encode_batch(t for t in texts).input_ids.tolist() == batch.input_ids.tolist()


def test_threads_share_one_tokenizer():
    with _load("qwen2") as tok:
        texts = [f"thread text {i} 你好 🙂" for i in range(64)]
        want = [tok.encode(t) for t in texts]
        got = {}
        errors = []

        def worker(k):
            try:
                for _ in range(5):
                    got[k] = [tok.encode(t) for t in texts]
                    assert tok.batch_decode(got[k]) == texts
                    assert tok.encode_batch(texts).input_ids.shape[0] == len(texts)
            except BaseException as exc:  # noqa: B902
                errors.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == [] and all(v == want for v in got.values())


# ---- errors --------------------------------------------------------------------------------

def test_invalid_utf8_is_refused_with_the_byte_offset():
    with _load("qwen2") as tok:
        with pytest.raises(accel.InvalidArgumentError, match="byte 3") as info:
            tok.encode(b"abc\xffdef")
        assert info.value.status == accel.Status.INVALID_ARGUMENT and isinstance(info.value, ValueError)
        assert "accel_tokenizer_encode" in info.value.message
        with pytest.raises(accel.InvalidArgumentError, match=r"texts\[1\].*byte 0"):
            tok.encode_batch(["fine", b"\xc3("])
        # a lone surrogate in a str is invalid UTF-8 for the library too (never a UnicodeEncodeError)
        with pytest.raises(accel.InvalidArgumentError, match="byte 1"):
            tok.encode("a\ud800b")
        assert tok.encode(b"abc\xffdef", replace_invalid_utf8=True) == tok.encode("abc\ufffddef")


def test_load_errors(tmp_path):
    with pytest.raises(accel.IOError) as info:
        accel.Tokenizer(tmp_path / "missing")
    assert info.value.status == accel.Status.IO and isinstance(info.value, OSError)
    assert "missing" in info.value.message
    with pytest.raises(accel.IOError, match="neither tokenizer.json nor tokenizer.model"):
        accel.Tokenizer.load(tmp_path)  # a directory without a tokenizer
    (tmp_path / "tokenizer.json").write_text("{")
    with pytest.raises(accel.FormatError) as info:
        accel.Tokenizer.from_pretrained(tmp_path)
    assert info.value.status == accel.Status.FORMAT and "tokenizer.json" in info.value.message
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    with pytest.raises(accel.UnsupportedError, match="WordPiece"):
        accel.Tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(accel.InvalidArgumentError, match="path is empty"):
        accel.Tokenizer("")


def test_ids_outside_the_vocabulary():
    with _load("qwen2") as tok:
        n = tok.vocab_size
        with pytest.raises(accel.InvalidArgumentError, match=rf"ids\[1\] = {n} is outside \[0, {n}\)") as info:
            tok.decode([0, n])
        assert info.value.status == accel.Status.INVALID_ARGUMENT
        with pytest.raises(accel.InvalidArgumentError, match=r"ids\[0\] = -1"):
            tok.decode([-1])
        for bad in (n, -1):
            with pytest.raises(accel.InvalidArgumentError, match="outside"):
                tok.id_to_token(bad)
            with pytest.raises(accel.InvalidArgumentError, match="outside"):
                tok.is_special(bad)


def test_bad_options_are_invalid_argument_errors():
    with _load("llama2") as tok:
        calls = {
            "max_length=-1": lambda: tok.encode("a", max_length=-1),
            "truncation_side='up'": lambda: tok.encode("a", truncation_side="up"),
            "padding_side=2": lambda: tok.encode_batch(["a"], padding_side=2),
            "pad_to_multiple_of=-2": lambda: tok.encode_batch(["a"], pad_to_multiple_of=-2),
            "pad_id=-2": lambda: tok.encode_batch(["a"], pad_id=-2),
            "pad_id outside": lambda: tok.encode_batch(["a"], pad_id=tok.vocab_size),
            "pad_to_max_length without max_length": lambda: tok.encode_batch(["a"], pad_to_max_length=True),
            "special_id('cls')": lambda: tok.special_id("cls"),
            "empty batch": lambda: tok.encode_batch([]),
        }
        for name, call in calls.items():
            with pytest.raises(accel.InvalidArgumentError) as info:
                call()
            assert info.value.status == accel.Status.INVALID_ARGUMENT, name


def test_use_after_close_raises_and_close_is_idempotent():
    tok = _load("gemma")
    with tok as same:
        assert same is tok and not tok.closed
    assert tok.closed and "closed" in repr(tok)
    for use in (lambda: tok.encode("a"), lambda: tok.encode_batch(["a"]), lambda: tok.decode([1]),
                lambda: tok.batch_decode([[1]]), lambda: tok.vocab_size, lambda: tok.bos_id,
                lambda: tok.token_to_id("a"), lambda: tok.id_to_token(0), lambda: tok.is_special(0),
                lambda: tok.special_id("eos")):
        with pytest.raises(accel.ClosedError, match="this Tokenizer is closed"):
            use()
    tok.close()
    with pytest.raises(accel.ClosedError):
        with tok:
            pass
    # what it returned stays usable: tensors and strings are copies
    tok2 = _load("gemma")
    t = tok2.encode("kept", return_tensor=True)
    token = tok2.id_to_token(tok2.bos_id)
    tok2.close()
    assert t.numel >= 2 and token == "<bos>"


# ---- chat templates ------------------------------------------------------------------------

CHAT_FAMILIES = ["qwen2", "smollm2", "llama3", "gemma", "phi3", "mistral"]


@pytest.fixture(scope="module")
def conversations():
    return _read("conversations.json")


def test_every_family_with_a_chat_template_has_chat_expectations():
    with_chat = [f for f in FAMILIES if "chat" in _read(f, "expected.json")]
    assert sorted(with_chat) == sorted(CHAT_FAMILIES)


@pytest.mark.parametrize("family", CHAT_FAMILIES)
def test_apply_chat_matches_transformers_templates(family, conversations):
    cases = _read(family, "expected.json")["chat"]
    rendered = refused = 0
    with _load(family) as tok:
        for c in cases:
            conv = conversations[c["conversation"]]
            where = f"{family}: conversation {c['conversation']}, add_generation_prompt={c['add_generation_prompt']}"
            if "error" in c:  # the template raises (Gemma: a system role; Mistral: roles not alternating)
                with pytest.raises(accel.InvalidArgumentError) as info:
                    tok.apply_chat(conv, add_generation_prompt=c["add_generation_prompt"])
                assert info.value.status == accel.Status.INVALID_ARGUMENT, where
                assert "accel_tokenizer_apply_chat" in info.value.message, where
                refused += 1
                continue
            text = tok.apply_chat(conv, add_generation_prompt=c["add_generation_prompt"])
            assert type(text) is str and text == c["text"], where
            assert tok.encode(text, add_special_tokens=False) == c["ids"], where
            # (role, content) pairs render the same as dicts
            pairs = [(m["role"], m["content"]) for m in conv]
            assert tok.apply_chat(pairs, add_generation_prompt=c["add_generation_prompt"]) == text, where
            rendered += 1
    assert rendered + refused == len(cases) >= 6 and rendered >= 4


def test_apply_chat_formats_messages_and_refusals(conversations, tmp_path):
    conv = conversations[0]
    with _load("gpt2") as tok:  # no chat_template: "auto" is refused, a named format renders
        with pytest.raises(accel.InvalidArgumentError, match="chat_template"):
            tok.apply_chat(conv)
        text = tok.apply_chat(conv, chat_format="chatml", add_generation_prompt=True)
        assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
        for same in (accel.ChatFormat.CHATML, "ChatML", 1):
            assert tok.apply_chat(conv, chat_format=same, add_generation_prompt=True) == text
    with _load("qwen2") as tok:
        want = tok.apply_chat(conv)
        assert tok.apply_chat(conv, chat_format=accel.ChatFormat.CHATML) == want
        # any iterable of messages; dicts may hold other keys; lists as pairs; bytes as contents
        assert tok.apply_chat(iter(conv)) == want
        assert tok.apply_chat([dict(m, name="x") for m in conv]) == want
        assert tok.apply_chat([[m["role"], m["content"]] for m in conv]) == want
        assert tok.apply_chat([(m["role"].encode(), m["content"].encode()) for m in conv]) == want
        assert tok.apply_chat(tuple(conv)) == want
        unicode = tok.apply_chat([("user", "和中文？ 👋\n\ttab")])
        assert "和中文？ 👋\n\ttab" in unicode
        assert tok.apply_chat([]) == ""
        # the library's refusals
        with pytest.raises(accel.InvalidArgumentError, match="BOS"):
            tok.apply_chat(conv, chat_format="llama3")  # Qwen2's tokenizer has no BOS
        with pytest.raises(accel.InvalidArgumentError, match=r"messages\[0\]\.content.*UTF-8"):
            tok.apply_chat([("user", b"a\xff")])
        with pytest.raises(accel.InvalidArgumentError, match="UTF-8"):
            tok.apply_chat([("user", "a\ud800b")])  # a lone surrogate: never a UnicodeEncodeError
    with _load("gemma") as tok:
        with pytest.raises(accel.InvalidArgumentError, match="system role"):
            tok.apply_chat([("system", "be brief"), ("user", "hi")])
    with _load("mistral") as tok:
        with pytest.raises(accel.InvalidArgumentError, match="alternate"):
            tok.apply_chat([("user", "a"), ("user", "b")])
    # a chat_template of none of the formats
    shutil.copy(os.path.join(FIXTURES, "qwen2", "tokenizer.json"), tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    with accel.Tokenizer(tmp_path) as tok:
        with pytest.raises(accel.UnsupportedError, match="none of the formats") as info:
            tok.apply_chat(conv)
        assert info.value.status == accel.Status.UNSUPPORTED
        assert tok.apply_chat(conv, chat_format="chatml") == _load("qwen2").apply_chat(conv)


# ---- fine-tuning data ----------------------------------------------------------------------

def _sft_file(tmp_path, conversations):
    """The C++ test's file (Tokenizer.FineTuningBatchesMaskThePrompts): two conversations (a
    blank line between), a prompt/completion line, a text line."""
    lines = [json.dumps({"messages": conversations[0]}), "", json.dumps({"messages": conversations[2]}),
             json.dumps({"prompt": "Question: what is 2 + 2?\nAnswer:", "completion": " 4"}),
             json.dumps({"text": "Plain text trains on every token."})]
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _rows(loader):
    """Every row of one epoch (no shuffling: in order) as (ids, labels, mask) lists."""
    rows = []
    for ids, labels in loader:
        mask = loader.attention_mask()
        assert mask.dtype == labels.dtype == ids.dtype == accel.DType.INT64
        assert mask.shape == labels.shape == ids.shape
        rows += list(zip(ids.tolist(), labels.tolist(), mask.tolist()))
    return rows


@pytest.mark.parametrize("side", ["right", "left"])
def test_sft_loader_puts_the_labels_on_the_answers(acc, tmp_path, conversations, side):
    path = _sft_file(tmp_path, conversations)
    with _load("qwen2") as tok:
        loader = accel.DataLoader.for_sft(acc, tok, path, batch_size=2, padding_side=side)
        assert len(loader) == 2 and loader.batch_size == 2
        rows = _rows(loader)
        assert len(rows) == 4

        def unmasked(r):
            return [v for v in rows[r][1] if v != -100]

        def real(r):
            return [i for i, m in zip(rows[r][0], rows[r][2]) if m]

        assert tok.decode(unmasked(0)) == conversations[0][1]["content"] + "<|im_end|>\n"
        assert tok.decode(unmasked(1)) == conversations[2][1]["content"] + "<|im_end|>\n"
        assert tok.decode(unmasked(2)) == " 4<|im_end|>"  # the completion and EOS (<|im_end|>)
        assert unmasked(3) == real(3)  # text: every token
        assert real(0) == tok.encode(tok.apply_chat(conversations[0]), add_special_tokens=False)
        for r, (ids, labels, mask) in enumerate(rows):
            n = len(real(r))
            width = len(ids)
            pad = range(n, width) if side == "right" else range(0, width - n)
            assert mask == [0 if k in pad else 1 for k in range(width)], f"row {r}"
            for k in pad:
                assert ids[k] == 1201 and labels[k] == -100, f"row {r} column {k}"  # Qwen's <|endoftext|>
        # the next epoch gives the same rows (no shuffling)
        assert _rows(loader) == rows


def test_sft_loader_options(acc, tmp_path, conversations):
    path = _sft_file(tmp_path, conversations)
    tok = _load("qwen2")
    # completion_only_loss off: every real token; max_length cuts
    every = _rows(accel.DataLoader.for_sft(acc, tok, path, batch_size=2, completion_only_loss=False, max_length=8))
    assert len(every) == 4
    for ids, labels, mask in every:
        assert len(ids) <= 8
        assert labels == [i if m else -100 for i, m in zip(ids, mask)]
    # packing: blocks of max_length real tokens, all the examples' tokens
    packed = _rows(accel.DataLoader.for_sft(acc, tok, path, batch_size=2, completion_only_loss=False,
                                            max_length=8, packing=True))
    counts = [sum(m) for _, _, m in packed]
    assert all(c == 8 for c in counts[:-1]) and sum(counts) > 40
    # add_eos off: the completion without <|im_end|>; pad_id and pad_to_multiple_of
    rows = _rows(accel.DataLoader.for_sft(acc, tok, path, batch_size=4, add_eos=False, pad_id=7,
                                          pad_to_multiple_of=16, chat_format=accel.ChatFormat.CHATML))
    width = len(rows[0][0])
    assert width % 16 == 0
    assert tok.decode([v for v in rows[2][1] if v != -100]) == " 4"
    pads = [i for ids, _, mask in rows for i, m in zip(ids, mask) if not m]
    assert pads and set(pads) == {7}
    # the loader keeps no reference to the tokenizer: closing it changes nothing
    loader = accel.DataLoader.for_sft(acc, tok, path, batch_size=2)
    tok.close()
    assert len(_rows(loader)) == 4


def test_sft_loader_errors_name_the_file_and_line(acc, tmp_path, conversations):
    tok = _load("qwen2")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nthis is not JSON\n')
    with pytest.raises(accel.FormatError, match="bad.jsonl:2") as info:
        accel.DataLoader.for_sft(acc, tok, bad)
    assert info.value.status == accel.Status.FORMAT and "accel_sft_dataloader_create" in info.value.message
    bad.write_text('{"text": "ok"}\n{"messages": 3}\n')
    with pytest.raises(accel.FormatError, match="bad.jsonl:2"):
        accel.DataLoader.for_sft(acc, tok, bad)
    bad.write_text('{"question": "none of the shapes"}\n')
    with pytest.raises(accel.FormatError, match="bad.jsonl:1"):
        accel.DataLoader.for_sft(acc, tok, bad)
    system = tmp_path / "sys.jsonl"
    system.write_text(json.dumps({"messages": conversations[1]}) + "\n")
    with _load("gemma") as gemma:
        with pytest.raises(accel.InvalidArgumentError, match="sys.jsonl:1.*system role|system role.*sys.jsonl:1"):
            accel.DataLoader.for_sft(acc, gemma, system)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(accel.InvalidArgumentError, match="no example"):
        accel.DataLoader.for_sft(acc, tok, tmp_path / "empty.jsonl")
    with pytest.raises(accel.IOError, match="missing.jsonl"):
        accel.DataLoader.for_sft(acc, tok, tmp_path / "missing.jsonl")
    good = _sft_file(tmp_path, conversations)
    for kwargs, text in (({"max_length": -1}, "max_length"), ({"packing": True}, "packing"),
                         ({"pad_to_multiple_of": -2}, "pad_to_multiple_of"), ({"pad_id": -2}, "pad_id"),
                         ({"pad_id": tok.vocab_size}, "pad_id"), ({"padding_side": "middle"}, "padding_side"),
                         ({"chat_format": "jinja"}, "chat_format"), ({"chat_format": 6}, "ChatFormat")):
        with pytest.raises(accel.InvalidArgumentError, match=text):
            accel.DataLoader.for_sft(acc, tok, good, **kwargs)


def test_sft_loader_trains_a_causal_lm(acc, tmp_path, conversations):
    # a Qwen2-shaped model over the tokenizer's 1,203 ids (random weights): the batches, their mask
    # and labels go to model(...) and to train_micro_batches, and the loss falls
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 1203,
              "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    path = _sft_file(tmp_path, conversations)
    with _load("qwen2") as tok:
        loader = accel.DataLoader.for_sft(acc, tok, path, batch_size=2, padding_side="left")
    model = accel.Model.from_config(acc, tmp_path)
    opt = accel.AdamW(model, lr=1e-2, weight_decay=0.0)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses = []
    for _ in range(6):
        for ids, labels in loader:
            out = model(input_ids=ids, attention_mask=loader.attention_mask(), labels=labels)
            assert out.num_tokens == int((labels.numpy()[:, 1:] != -100).sum())
            losses.append(out.loss.item())
            acc.backward(out.loss)
            opt.step()
    assert losses[-1] < losses[1]
    result = acc.train_micro_batches(model, loader, "causal_lm", max_micro_batches=2)
    assert result.micro_batches == 2 and np.isfinite(result.mean_loss)
