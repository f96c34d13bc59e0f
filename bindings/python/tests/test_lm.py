"""Language models through the Python binding: Hugging Face directories in and out, the
forward with its loss against transformers' fixtures (tests/fixtures/lm), the token-mean loss
across ranks, generation (from a left-padded batch too), the causal-LM loader's padding and
attention mask, and the errors."""
import json
import os
import shutil

import numpy as np
import pytest

import accel

from conftest import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures", "lm")
NO_SAFETENSORS = ("safetensors is not installed (pip install './bindings/python[test]'): "
                  "it reads the fixtures' reference tensors and the saved files")


def reference(name):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason=NO_SAFETENSORS)
    return safetensors_numpy.load_file(os.path.join(FIXTURES, name, "reference.safetensors"))


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_forward_matches_transformers(acc, name):
    ref = reference(name)
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, name))
    names = model.parameter_names()
    assert names[0] in ("transformer.wte.weight", "model.embed_tokens.weight")
    out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
    assert isinstance(out, accel.CausalLMOutput)
    logits = out.logits.numpy()
    assert logits.shape == ref["logits"].shape and logits.dtype == np.float32
    scale = np.abs(ref["logits"]).max()
    # 1e-4 of the largest logit: fp32's rounding over the tiny models' reductions, whatever
    # order this CPU's kernels add in (derived above LMFixture.MatchesTransformers, tests/lm/test_lm.cpp)
    assert np.abs(logits - ref["logits"]).max() / scale < 1e-4
    assert abs(out.loss.item() - float(ref["loss"])) / abs(float(ref["loss"])) < 1e-4
    # the loss averages the real targets: labels[:, 1:] that are not -100
    assert out.num_tokens == int((ref["labels"][:, 1:] != -100).sum())
    # without labels: logits only
    plain = model.lm(ref["input_ids"], ref["attention_mask"])
    assert plain.loss is None and plain.num_tokens == 0
    np.testing.assert_array_equal(plain.logits.numpy(), logits)


def test_train_save_and_reload(acc, tmp_path):
    ref = reference("llama-tiny")
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny"), gradient_checkpointing=True)
    opt = accel.AdamW(model, lr=1e-2)
    model, opt = acc.prepare(model, opt)
    losses = []
    for _ in range(5):
        out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
        losses.append(out.loss.item())
        acc.backward(out.loss)
        opt.step()
    assert losses[-1] < losses[0]
    saved = model.save_pretrained(tmp_path / "trained")
    assert sorted(os.listdir(saved)) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "trained" / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    model.eval()
    mine = model.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy()
    back = accel.Model.from_pretrained(acc, saved)
    back.eval()
    np.testing.assert_array_equal(back.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy(), mine)
    # saving again replaces its own directory
    model.save_pretrained(tmp_path / "trained")


def test_from_config_and_bf16(acc, tmp_path):
    shutil.copy(os.path.join(FIXTURES, "gpt2-tiny", "config.json"), tmp_path / "config.json")
    model = accel.Model.from_config(acc, tmp_path, dtype="bfloat16")
    assert model.num_parameters > 0
    model.save_pretrained(tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["dtype"] == "bfloat16"
    st = pytest.importorskip("safetensors.numpy", reason=NO_SAFETENSORS)
    header_len = int.from_bytes((tmp_path / "out" / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((tmp_path / "out" / "model.safetensors").read_bytes()[8:8 + header_len])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
    del st


def test_token_mean_across_ranks_and_micro_batches():
    ref = reference("gpt2-tiny")
    ids, mask, labels = ref["input_ids"], ref["attention_mask"], ref["labels"]

    def fn(acc):
        model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny"))
        opt = accel.SGD(model, lr=0.1)
        model, opt = acc.prepare(model, opt)
        r = acc.process_index
        # rank r, micro-batch m: one row of the fixture's batch (rows have different lengths)
        counts = []
        for m in range(2):
            row = (2 * r + m) % ids.shape[0]
            out = model(input_ids=ids[row:row + 1], attention_mask=mask[row:row + 1], labels=labels[row:row + 1])
            counts.append(out.num_tokens)
            acc.backward(out.loss)
            opt.step()
        return counts, model.parameters()[0]

    report = accel.sim.run(fn, world_size=2, strategy="ddp", gradient_accumulation_steps=2)
    (c0, w0), (c1, w1) = report.results
    np.testing.assert_array_equal(w0, w1)
    assert sum(c0) + sum(c1) > 0


def test_errors(acc, tmp_path):
    with pytest.raises(accel.IOError, match="not a directory"):
        accel.Model.from_pretrained(acc, tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.loads(open(os.path.join(FIXTURES, "gpt2-tiny", "config.json")).read())
    cfg["model_type"] = "mamba"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(accel.UnsupportedError, match="mamba"):
        accel.Model.from_config(acc, bad / "config.json")
    with pytest.raises(accel.InvalidArgumentError, match="dtype"):
        accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny"), dtype="int64")
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny"))
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    with pytest.raises(accel.InvalidArgumentError, match="refusing"):
        model.save_pretrained(keep)
    assert keep.read_text() == "mine"
    with pytest.raises(accel.InvalidArgumentError, match="out of range"):
        model(input_ids=np.array([[1, 100000]], dtype=np.int64))
    with pytest.raises(accel.InvalidArgumentError, match="shape"):
        model(input_ids=np.array([[1, 2]], dtype=np.int64), labels=np.array([[1, 2, 3]], dtype=np.int64))
    mlp = accel.Model.mlp(acc, [4, 2])
    with pytest.raises(accel.InvalidArgumentError, match="not a causal LM"):
        mlp.lm(np.array([[1, 2]], dtype=np.int64))
    with pytest.raises(accel.InvalidArgumentError, match="not a causal LM"):
        mlp.save_pretrained(tmp_path / "mlp")


def test_token_file_and_lm_loader(acc, tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 30, 40)
    tokens = rng.integers(0, 128, int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    path = tmp_path / "corpus.tok"
    accel.write_token_file(path, tokens, token_bytes=2)
    assert path.stat().st_size == 24 + 2 * len(tokens)
    back = accel.read_token_file(path).numpy()
    np.testing.assert_array_equal(back, tokens)
    loader = accel.DataLoader.for_lm(acc, back, offsets, batch_size=8, pad_to_multiple_of=8, shuffle=True, seed=1)
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny"))
    opt = accel.AdamW(model, lr=1e-2)
    model, opt, loader = acc.prepare(model, opt, loader)
    seen = 0
    for ids, labels in loader:
        i, l = ids.numpy(), labels.numpy()
        assert i.shape[1] % 8 == 0 and i.shape == l.shape
        assert (i[l == -100] == 0).all() and (i[l != -100] == l[l != -100]).all()
        real = (l != -100).sum(axis=1)
        assert i.shape[1] - 8 < real.max() <= i.shape[1]
        seen += int(real.sum())
        out = model(input_ids=ids, labels=labels)
        assert out.num_tokens == int(((l[:, 1:]) != -100).sum())
        acc.backward(out.loss)
        opt.step()
    assert seen == len(tokens)
    blocks = accel.DataLoader.for_lm(acc, tokens, block_size=16, batch_size=4)
    ids, labels = blocks.next_batch()
    np.testing.assert_array_equal(ids.numpy(), tokens[:64].reshape(4, 16))
    bad = offsets.copy()
    bad[1], bad[2] = bad[2], bad[1]
    with pytest.raises(accel.InvalidArgumentError, match="must not decrease"):
        accel.DataLoader.for_lm(acc, tokens, bad)
    with pytest.raises(accel.FormatError, match="not a token file"):
        (tmp_path / "notes.txt").write_text("mine")
        accel.read_token_file(tmp_path / "notes.txt")


def test_lora_matches_peft_and_round_trips(acc, tmp_path):
    ref = reference("llama-tiny-lora")
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny"))
    model.load_adapter(os.path.join(FIXTURES, "llama-tiny-lora"))
    names = model.parameter_names()
    assert len(names) == 28 and all(".lora_A." in n or ".lora_B." in n for n in names)
    model.eval()
    out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
    scale = np.abs(ref["logits"]).max()
    assert np.abs(out.logits.numpy() - ref["logits"]).max() / scale < 1e-4
    model.train()
    opt = accel.AdamW(model, lr=1e-2)
    model, opt = acc.prepare(model, opt)
    for _ in range(3):
        o = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
        acc.backward(o.loss)
        opt.step()
    model.eval()
    mine = model.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy()
    saved = model.save_adapter(tmp_path / "adapter")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8
    back = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).load_adapter(saved)
    back.eval()
    np.testing.assert_array_equal(back.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy(), mine)
    merged = model.save_pretrained(tmp_path / "merged")
    plain = accel.Model.from_pretrained(acc, merged)
    plain.eval()
    assert len(plain.parameter_names()) == 21  # embeddings, 2 x 9 block weights, norm, head
    got = plain.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy()
    assert np.abs(got - mine).max() / np.abs(mine).max() < 1e-5
    fresh = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny"))
    fresh.add_lora(r=2, lora_alpha=4, target_modules=["c_attn", "c_fc"])
    assert len(fresh.parameter_names()) == 8
    with pytest.raises(accel.InvalidArgumentError, match="matches no module"):
        accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny")).add_lora(target_modules="q_proj")
    with pytest.raises(accel.InvalidArgumentError, match="no LoRA adapters"):
        plain.save_adapter(tmp_path / "none")


def test_qlora_nf4_double_quant_forward_and_one_step(acc, tmp_path):
    ref = reference("llama-tiny")
    llama = os.path.join(FIXTURES, "llama-tiny")
    model = accel.Model.from_pretrained(acc, llama, quantization="nf4", double_quant=True)
    model.eval()
    logits = model.lm(ref["input_ids"], ref["attention_mask"]).logits.numpy()
    assert logits.shape == ref["logits"].shape and logits.dtype == np.float32
    assert np.isfinite(logits).all()
    # the quantization took effect: the logits moved from the float32 model's
    assert np.abs(logits - ref["logits"]).max() > 0
    model.train()
    with pytest.raises(accel.InvalidStateError, match="LoRA"):
        accel.AdamW(model, lr=1e-2)  # a quantized base trains through adapters only
    with pytest.raises(accel.InvalidArgumentError, match="quantized"):
        model.save_pretrained(tmp_path / "base")
    assert not (tmp_path / "base").exists()
    model.add_lora(r=2)
    names = model.parameter_names()
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    before = model.parameters()
    opt = accel.AdamW(model, lr=1e-2)
    model, opt = acc.prepare(model, opt)
    out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
    loss = out.loss.item()
    assert np.isfinite(loss)
    acc.backward(out.loss)
    opt.step()
    after = model.parameters()
    changed = [n for n, b, a in zip(names, before, after) if not np.array_equal(b, a)]
    assert any(".lora_B." in n for n in changed), changed
    assert all(np.isfinite(a).all() for a in after)


def test_quantization_is_checked(acc):
    llama = os.path.join(FIXTURES, "llama-tiny")
    with pytest.raises(accel.InvalidArgumentError, match="quantization"):
        accel.Model.from_pretrained(acc, llama, quantization="bogus")
    with pytest.raises(accel.InvalidArgumentError, match="quantization"):
        accel.Model.from_pretrained(acc, llama, quantization=42)
    with pytest.raises(accel.InvalidArgumentError, match="quantization"):
        accel.Model.from_config(acc, llama, quantization="bogus")
    # the library's own check: double quantization is NF4's and FP4's only
    with pytest.raises(accel.InvalidArgumentError, match="double_quant"):
        accel.Model.from_pretrained(acc, llama, quantization="int8", double_quant=True)
    # names are case-insensitive, and the enum works too
    assert accel.Model.from_pretrained(acc, llama, quantization="FP4").num_parameters > 0
    assert accel.Model.from_pretrained(acc, llama, quantization=accel.Quantization.INT8).num_parameters > 0


def test_adafactor(acc):
    ref = reference("llama-tiny")
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny"))
    opt = accel.Adafactor(model, lr=1e-2, relative_step=False, scale_parameter=False, beta1=0.9)
    sched = accel.get_constant_schedule_with_warmup(opt, num_warmup_steps=1)
    model, opt, sched = acc.prepare(model, opt, sched)
    losses = []
    for _ in range(4):
        out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], labels=ref["labels"])
        losses.append(out.loss.item())
        acc.backward(out.loss)
        opt.step()
    assert losses[-1] < losses[0]
    other = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "gpt2-tiny"))
    with pytest.raises(accel.InvalidArgumentError, match="relative_step"):
        accel.Adafactor(other, lr=1e-3)
    relative = accel.Adafactor(other)  # transformers' defaults: relative step sizes
    with pytest.raises(accel.InvalidArgumentError, match="relative_step"):
        accel.get_constant_schedule_with_warmup(relative, num_warmup_steps=1)


def test_generate(acc):
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).eval()
    prompt = np.array([[5, 17, 3, 99], [7, 8, 9, 10]], dtype=np.int64)
    out = model.generate(prompt, max_new_tokens=6).numpy()
    assert out.shape == (2, 10) and (out[:, :4] == prompt).all()
    again = model.generate(prompt, max_new_tokens=6, use_cache=False).numpy()
    np.testing.assert_array_equal(out, again)
    # greedy: the last token is the argmax of the logits before it
    logits = model.lm(out[:, :9]).logits.numpy()
    np.testing.assert_array_equal(logits[:, -1].argmax(-1), out[:, 9])
    sampled = model.generate(prompt, max_new_tokens=6, temperature=0.7, top_k=5, seed=3).numpy()
    np.testing.assert_array_equal(sampled, model.generate(prompt, max_new_tokens=6, temperature=0.7, top_k=5,
                                                          seed=3).numpy())
    with pytest.raises(accel.InvalidArgumentError, match="max_new_tokens"):
        model.generate(prompt, max_new_tokens=0)


def _left_padded(prompts, pad=0):
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = p
        mask[r, width - len(p):] = 1
    return ids, mask


def test_generate_from_a_left_padded_batch_continues_each_prompt_as_alone(acc):
    # Generation.PaddedBatchContinuesEachPromptAsAlone (tests/lm/test_lm.cpp) through the binding
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).eval()
    rng = np.random.default_rng(11)
    prompts = [rng.integers(3, 120, n) for n in (5, 2)]
    ids, mask = _left_padded(prompts)
    for use_cache in (True, False):
        out = model.generate(ids, max_new_tokens=6, attention_mask=mask, use_cache=use_cache)
        assert out.dtype == accel.DType.INT64 and out.shape == (2, ids.shape[1] + 6)
        got = out.numpy()
        np.testing.assert_array_equal(got[:, :ids.shape[1]], ids)  # the padded prompts, then the new tokens
        for r, p in enumerate(prompts):
            alone = model.generate(p[None, :], max_new_tokens=6, use_cache=use_cache).numpy()
            np.testing.assert_array_equal(got[r, ids.shape[1]:], alone[0, len(p):], err_msg=f"row {r}")
    # the mask as int32, a Tensor, a list, and a BatchEncoding's fields as keywords
    want = model.generate(ids, max_new_tokens=6, attention_mask=mask).numpy()
    for m in (mask.astype(np.int32), accel.tensor(mask), mask.tolist()):
        np.testing.assert_array_equal(model.generate(ids, max_new_tokens=6, attention_mask=m).numpy(), want)
    batch = accel.BatchEncoding(accel.tensor(ids), accel.tensor(mask))
    np.testing.assert_array_equal(model.generate(**batch._asdict(), max_new_tokens=6).numpy(), want)
    # a mask of ones is a batch without padding: generate's own result
    full = np.array([[5, 17, 3, 99], [7, 8, 9, 10]], np.int64)
    np.testing.assert_array_equal(model.generate(full, 4, attention_mask=np.ones_like(full)).numpy(),
                                  model.generate(full, 4).numpy())
    # sampling from a padded batch is reproducible from the seed
    sampled = model.generate(ids, 6, temperature=0.8, top_k=5, seed=3, attention_mask=mask).numpy()
    np.testing.assert_array_equal(sampled, model.generate(ids, 6, temperature=0.8, top_k=5, seed=3,
                                                          attention_mask=mask).numpy())


def test_generate_from_a_padded_batch_refuses_right_padding(acc):
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).eval()
    ids = np.ones((2, 3), np.int64)
    cases = [(np.array([[1, 1, 0], [1, 1, 1]]), r"row 0.*padding after a token"),
             (np.array([[1, 1, 1], [0, 0, 0]]), r"row 1.*no token"),
             (np.ones((2, 4), np.int64), "attention_mask"),
             (np.ones((2, 3), np.float32), "attention_mask"),
             # accel.tensor makes a numpy bool array uint8 (the C ABI has no bool dtype): refused
             (np.ones((2, 3), bool), "attention_mask must be int64, int32")]
    for mask, text in cases:
        with pytest.raises(accel.InvalidArgumentError, match=text) as info:
            model.generate(ids, max_new_tokens=2, attention_mask=mask)
        assert info.value.status == accel.Status.INVALID_ARGUMENT
        assert "accel_lm_generate_padded" in info.value.message
    with pytest.raises(accel.InvalidArgumentError, match="max_new_tokens"):
        model.generate(ids, max_new_tokens=0, attention_mask=np.ones((2, 3), np.int64))
    mlp = accel.Model.mlp(acc, [4, 2])
    with pytest.raises(accel.InvalidArgumentError, match="not a causal LM"):
        mlp.generate(ids, attention_mask=np.ones((2, 3), np.int64))


def test_lm_loader_pads_on_either_side_with_its_attention_mask(acc):
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 12, 10)
    tokens = rng.integers(1, 128, int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    model = accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).eval()
    seen = {}
    for side in ("right", "left", accel.Side.LEFT):
        loader = accel.DataLoader.for_lm(acc, tokens, offsets, batch_size=4, pad_id=0, padding_side=side)
        with pytest.raises(accel.InvalidStateError, match="no batch"):
            loader.attention_mask()  # before the first batch
        rows = []
        for ids, labels in loader:
            mask = loader.attention_mask()
            assert isinstance(mask, accel.Tensor) and mask.dtype == accel.DType.INT64 and mask.shape == ids.shape
            i, l, m = ids.numpy(), labels.numpy(), mask.numpy()
            np.testing.assert_array_equal(m, (l != -100).astype(np.int64))  # labels are -100 exactly at padding
            assert (i[m == 0] == 0).all()
            for r in range(m.shape[0]):
                n = int(m[r].sum())
                pad = np.arange(m.shape[1]) >= n if side == "right" else np.arange(m.shape[1]) < m.shape[1] - n
                np.testing.assert_array_equal(m[r], (~pad).astype(np.int64))
                rows.append(i[r][m[r] == 1].tolist())
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            assert out.num_tokens == int((l[:, 1:] != -100).sum()) and np.isfinite(out.loss.item())
        with pytest.raises(accel.InvalidStateError, match="no batch"):
            loader.attention_mask()  # after the end of the epoch
        seen[str(side)] = rows
        assert len({len(r) for r in rows}) > 1  # the batches had padding to place
    assert seen["right"] == seen["left"] == seen[str(accel.Side.LEFT)]  # the same sequences, in order
    assert [len(r) for r in seen["right"]] == lengths.tolist()
    with pytest.raises(accel.InvalidArgumentError, match="padding_side"):
        accel.DataLoader.for_lm(acc, tokens, offsets, padding_side="up")
    plain = accel.DataLoader(acc, np.ones((2, 2), np.float32), np.zeros(2, np.int64))
    plain.next_batch()
    with pytest.raises(accel.InvalidArgumentError, match="no attention mask"):
        plain.attention_mask()


LLAMA_7B = 6738415616  # parameters of Llama-2-7B (accel_estimate_memory's named shape "llama-7b")


def test_estimate_memory():
    e = accel.estimate_memory("llama-7b")
    assert isinstance(e, accel.MemoryEstimate)
    assert e.parameters == LLAMA_7B and e.trainable_parameters == LLAMA_7B
    # fp32 AdamW, one process: 4 bytes of weights, 4 of gradients, 8 of moments per parameter
    assert e.weights == 4 * LLAMA_7B and e.gradients == 4 * LLAMA_7B and e.optimizer_state == 8 * LLAMA_7B
    assert e.activations > 0 and e.total >= e.weights + e.gradients + e.optimizer_state + e.activations
    assert e.seq_len == 1024 and e.attention in (accel.Attention.EAGER, accel.Attention.FUSED)
    # LoRA on PEFT's default targets (q_proj, v_proj): A [r, 4096] + B [4096, r] per module and layer
    lora = accel.estimate_memory("llama-7b", lora_rank=16)
    assert lora.parameters == LLAMA_7B and lora.trainable_parameters == 32 * 2 * 16 * (4096 + 4096)
    assert lora.total < e.total
    same = accel.estimate_memory("llama-7b", lora_rank=16, lora_target_modules=["q_proj", "v_proj"])
    assert same == lora
    # ZeRO-3 over 64 processes with bf16 autocast: (4 + 2 + 2 + 8) / 64 bytes per parameter
    z3 = accel.estimate_memory("llama-7b", mixed_precision="bf16", strategy="zero3", world_size=64)
    assert abs((z3.weights + z3.gradients + z3.optimizer_state) / LLAMA_7B - 0.25) < 1e-6
    # the enums by value as well as by name; the kernel asked for is the one reported
    eager = accel.estimate_memory("llama-7b", optimizer=accel.OptimizerKind.ADAMW, attention="eager")
    fused = accel.estimate_memory("llama-7b", attention=accel.Attention.FUSED)
    assert eager.attention == accel.Attention.EAGER and fused.attention == accel.Attention.FUSED
    assert fused.activations < eager.activations
    sgd = accel.estimate_memory("llama-7b", optimizer="sgd", seq_len=512, micro_batch=2)
    assert sgd.optimizer_state == 0 and sgd.seq_len == 512
    # offload: the moments in host memory, 12 bytes a parameter moved per step (fp32)
    off = accel.estimate_memory("llama-7b", offload="optimizer")
    assert e.host == 0 and e.transfer_bytes == 0
    assert off.optimizer_state == 0 and off.host >= 8 * LLAMA_7B and off.transfer_bytes == 12 * LLAMA_7B
    assert off.gradient_transfer_bytes == 4 * LLAMA_7B
    assert off.total < e.total
    # an NF4 base (double quant) under LoRA: fewer weight bytes than the fp32 base
    nf4 = accel.estimate_memory("llama-7b", lora_rank=16, quantization="nf4", double_quant=True)
    assert nf4.weights < lora.weights / 4 and nf4.trainable_parameters == lora.trainable_parameters
    with pytest.raises(accel.InvalidArgumentError, match="LoRA adapters"):
        accel.estimate_memory("llama-7b", quantization=accel.Quantization.NF4)
    # a config.json (or its directory) gives the parameters the model really has
    tiny = accel.estimate_memory(os.path.join(FIXTURES, "llama-tiny"))
    assert tiny == accel.estimate_memory(os.path.join(FIXTURES, "llama-tiny", "config.json"))
    with accel.Accelerator(seed=0, num_threads=1, cpu=True) as acc:
        assert tiny.parameters == accel.Model.from_pretrained(acc, os.path.join(FIXTURES, "llama-tiny")).num_parameters


def test_estimate_memory_errors(tmp_path):
    with pytest.raises(accel.IOError, match="named shape"):
        accel.estimate_memory("llama-3b")
    with pytest.raises(accel.IOError):
        accel.estimate_memory(tmp_path / "missing")
    with pytest.raises(accel.InvalidArgumentError, match="strategy"):
        accel.estimate_memory("llama-7b", world_size=4)
    with pytest.raises(accel.UnsupportedError, match="LAMB"):
        accel.estimate_memory("llama-7b", optimizer="lamb", strategy="zero2", world_size=2)
    with pytest.raises(accel.InvalidArgumentError, match="optimizer"):
        accel.estimate_memory("llama-7b", optimizer="adam-ish")
    with pytest.raises(accel.InvalidArgumentError, match="attention"):
        accel.estimate_memory("llama-7b", attention="flash3")
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        accel.estimate_memory("llama\0-7b")
