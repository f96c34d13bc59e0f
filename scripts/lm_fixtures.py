#!/usr/bin/env python3
"""Writes the language-model fixtures of issue 16 (tests/fixtures/lm/, format in its README.md).

Run it through scripts/lm_fixtures, which makes the pinned venv (torch, transformers, peft,
safetensors from PyPI) and sets the environment (offline, one thread, CPU). Nothing is
fetched from a model hub: every model is built from a config with a fixed seed.

For each fixture <out>/<name>/:
  config.json, generation_config.json, model.safetensors (or model.safetensors.index.json
  and its shards): exactly what model.save_pretrained(dir, safe_serialization=True) writes;
  reference.safetensors: input_ids, attention_mask, labels, logits, loss and
  grad.<parameter name> for every parameter (model.named_parameters(), so a tied lm_head
  appears once, under the embedding's name);
  manifest.json: the sha256 of every other file, the versions and the seeds.

For each LoRA fixture <out>/<base>-lora/ (issue 16 item 4): a PEFT adapter on the base
fixture, with random A and B (init_lora_weights=False, so the adapter changes the logits):
  adapter_config.json, adapter_model.safetensors: exactly what PeftModel.save_pretrained writes;
  reference.safetensors: the batch, the logits and loss with the adapter, and grad.<key> for
  every adapter tensor under its saved key;
  (reference.safetensors also holds merged_logits: the logits of merge_and_unload's model)
  manifest.json as above.

<out>/adafactor/adafactor.safetensors (issue 16 item 6): transformers' Adafactor under three
configurations, 10 steps on llama-tiny's weights with its reference gradients every step;
the weights of layer 0 and the final norm after step 10 as "<config>/10/<parameter>".

The output is deterministic: two runs write byte-identical files (--check verifies it
against an existing directory). The script checks itself: each saved directory is reloaded
with AutoModelForCausalLM.from_pretrained and must give the reference's logits bit for bit.
"""

import argparse
import copy
import filecmp
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile

for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(var, "1")  # never the hub, even when run without the wrapper
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers import (MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,  # noqa: E402
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig  # noqa: E402
from transformers import SmolLM3Config, SmolLM3ForCausalLM  # noqa: E402

# The batch: B = 3 rows of T = 12 tokens, right padding; row 1 has no padding.
BATCH, SEQ = 3, 12
LENGTHS = (9, 12, 5)
PAD_ID = 0  # the id written at padding positions of input_ids (masked out; labels -100 there)
INPUT_SEED = 1234
# Weights: the family's own initialisation (initializer_range 0.2, so attention scores and
# rotary positions matter), then every 1-D parameter (biases, norm weights) perturbed with
# N(0, 0.1) so that none is all zeros or all ones. Seeds per model below.
INIT_RANGE = 0.2
PERTURB_STD = 0.1
SHARD_SIZE = "40KB"  # llama-tiny-sharded: ~107 KB of weights in 3 shards
VOCAB = 128


def gpt2_tiny():
    return GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=INIT_RANGE,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
        tie_word_embeddings=True, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)


def llama_tiny(tied):
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
        hidden_act="silu", initializer_range=INIT_RANGE, attention_dropout=0.0,
        attention_bias=False, mlp_bias=False, tie_word_embeddings=tied,
        bos_token_id=1, eos_token_id=2)


# RoPE scaling (issue 36): llama-tiny with each rope_type of transformers' ROPE_INIT_FUNCTIONS
# that accel reads, parameters chosen so that the tiny model's 4 frequencies (head_dim 8,
# theta 100: wavelengths 6.3, 20, 63 and 199 positions) and its 12 positions fall on every
# branch of each formula: llama3's high, medium and low frequencies; yarn's ramp inside the
# dimensions, with its attention factor; dynamic NTK past max_position_embeddings (8);
# longrope's long factors past original_max_position_embeddings (8), with its attention factor.
ROPE_SCALINGS = {
    "linear": ({"rope_type": "linear", "rope_theta": 100.0, "factor": 4.0}, 64),
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 100.0, "factor": 2.0}, 8),
    "yarn": ({"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "original_max_position_embeddings": 16,
              "beta_fast": 8.0, "beta_slow": 1.0}, 64),
    "llama3": ({"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, 64),
    "longrope": ({"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [1.0, 1.25, 1.5, 2.0],
                  "long_factor": [1.0, 2.0, 4.0, 8.0], "original_max_position_embeddings": 8}, 64),
}


def llama_rope(kind):
    # smaller than llama-tiny (one layer, intermediate 32, tied embeddings: ~100 KB a fixture),
    # with its attention shape (head_dim 8), which is what RoPE acts on
    params, max_pos = ROPE_SCALINGS[kind]
    config = llama_tiny(True)
    config.num_hidden_layers = 1
    config.intermediate_size = 32
    config.max_position_embeddings = max_pos
    config.rope_parameters = copy.deepcopy(params)
    config.standardize_rope_params()
    config.validate_rope()
    return config


# The Llama-shaped families (issue 36 item 2), llama-tiny's shape with each family's own
# parts visible in the logits: Qwen2's q/k/v biases and a sliding layer (layer 1: from
# max_window_layers on), Qwen3's q/k norms (its head_dim given: its default is 128), Mistral's
# sliding window on every layer, Phi-3's fused projections with a sliding window. Windows of
# 4-6 positions, so that rows of 9 and 12 tokens lose keys to them.
def family_kwargs(**extra):
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu",
              initializer_range=INIT_RANGE, attention_dropout=0.0, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=1, eos_token_id=2,
              pad_token_id=None)
    kw.update(extra)
    return kw


def qwen2_tiny():
    return Qwen2Config(**family_kwargs(use_sliding_window=True, sliding_window=4, max_window_layers=1))


def qwen3_tiny():
    return Qwen3Config(**family_kwargs(head_dim=8, attention_bias=False))


def mistral_tiny():
    return MistralConfig(**family_kwargs(sliding_window=5))


def phi3_tiny():
    return Phi3Config(**family_kwargs(sliding_window=6, original_max_position_embeddings=64, resid_pdrop=0.0,
                                      embd_pdrop=0.0))


def smollm3_tiny():
    # SmolLM3: layer 1 without RoPE (no_rope_layers), and it slides (window 4: SmolLM3's
    # sliding layers are its NoPE layers when use_sliding_window)
    return SmolLM3Config(**family_kwargs(no_rope_layers=[1, 0], use_sliding_window=True, sliding_window=4,
                                         tie_word_embeddings=True))


# Gemma 2 and 3 (text): the same shape with Gemma's parts visible: (1 + w) norms on both
# sub-layers, scaled embeddings, GeGLU, query_pre_attn_scalar 16 (not head_dim), soft-capping
# small enough to bend these logits and scores (Gemma 2: 2 on the scores, 5 on the logits;
# Gemma 3: 5 on the logits), a sliding layer then a full one (window 4); Gemma 3's q/k norms
# and its two RoPEs (full layers: linear, factor 2, theta 1000; sliding layers: theta 10).
def gemma_kwargs(**extra):
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6,
              hidden_activation="gelu_pytorch_tanh", initializer_range=INIT_RANGE, attention_dropout=0.0,
              tie_word_embeddings=True, query_pre_attn_scalar=16, sliding_window=4, bos_token_id=1, eos_token_id=2,
              pad_token_id=None, layer_types=["sliding_attention", "full_attention"])
    kw.update(extra)
    return kw


def gemma2_tiny():
    return Gemma2Config(**gemma_kwargs(attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))


def gemma3_tiny():
    return Gemma3TextConfig(**gemma_kwargs(final_logit_softcapping=5.0, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}))


# name: (model class, config, weight seed, max_shard_size or None)
FIXTURES = {
    "gpt2-tiny": (GPT2LMHeadModel, gpt2_tiny(), 16001, None),
    "llama-tiny": (LlamaForCausalLM, llama_tiny(False), 16002, None),
    "llama-tiny-tied": (LlamaForCausalLM, llama_tiny(True), 16003, None),
    "llama-tiny-sharded": (LlamaForCausalLM, llama_tiny(False), 16002, SHARD_SIZE),  # = llama-tiny
}
for _i, _kind in enumerate(ROPE_SCALINGS):
    FIXTURES["llama-tiny-rope-" + _kind] = (LlamaForCausalLM, llama_rope(_kind), 16010 + _i, None)
FIXTURES["qwen2-tiny"] = (Qwen2ForCausalLM, qwen2_tiny(), 16020, None)
FIXTURES["qwen3-tiny"] = (Qwen3ForCausalLM, qwen3_tiny(), 16021, None)
FIXTURES["mistral-tiny"] = (MistralForCausalLM, mistral_tiny(), 16022, None)
FIXTURES["phi3-tiny"] = (Phi3ForCausalLM, phi3_tiny(), 16023, None)
FIXTURES["gemma2-tiny"] = (Gemma2ForCausalLM, gemma2_tiny(), 16024, None)
FIXTURES["gemma3-tiny"] = (Gemma3ForCausalLM, gemma3_tiny(), 16025, None)
FIXTURES["smollm3-tiny"] = (SmolLM3ForCausalLM, smollm3_tiny(), 16026, None)


def setup_determinism():
    transformers.utils.logging.set_verbosity_error()  # no progress bars or notices in the output
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)


def build_model(cls, config, seed):
    config = copy.deepcopy(config)
    # eager attention: the textbook softmax(QK^T/sqrt(d) + mask)V, the same on every machine
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * PERTURB_STD)
    for name, module in model.named_modules():  # every dropout 0, whatever the config says
        if isinstance(module, torch.nn.Dropout):
            assert module.p == 0.0, f"{name}: dropout {module.p}"
    model.eval()
    return model


def make_inputs():
    g = torch.Generator().manual_seed(INPUT_SEED)
    # ids 3..VOCAB-2: not the pad id, not the bos/eos ids of either family
    input_ids = torch.randint(3, VOCAB - 1, (BATCH, SEQ), generator=g, dtype=torch.int64)
    attention_mask = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    for row, n in enumerate(LENGTHS):
        attention_mask[row, :n] = 1
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD_ID)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return input_ids, attention_mask, labels


def reference(model, input_ids, attention_mask, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    # the loss convention, recomputed by hand: shift by one, ignore -100, mean over targets
    shift_logits = out.logits[:, :-1, :].reshape(-1, out.logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1)
    keep = shift_labels != -100
    manual = torch.nn.functional.cross_entropy(shift_logits[keep], shift_labels[keep], reduction="sum") / keep.sum()
    assert torch.allclose(manual, out.loss, rtol=1e-6, atol=0), (manual.item(), out.loss.item())
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "logits": out.logits.detach(),
        "loss": out.loss.detach().reshape(()),
    }
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} has no gradient"
        tensors["grad." + name] = p.grad.detach()
    for k, v in tensors.items():
        assert v.dtype in (torch.int64, torch.float32), (k, v.dtype)
        tensors[k] = v.contiguous().clone()
    return tensors


# name: (base fixture, target modules, r, lora_alpha, seed). GPT-2's Conv1D layers take
# fan_in_fan_out (PEFT's flag for weights stored [in, out]).
LORA_FIXTURES = {
    "gpt2-tiny-lora": ("gpt2-tiny", ["c_attn", "c_proj", "c_fc"], 4, 8, 17001),
    "llama-tiny-lora": ("llama-tiny", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                        4, 8, 17002),
    "qwen2-tiny-lora": ("qwen2-tiny", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                        4, 8, 17003),
    "phi3-tiny-lora": ("phi3-tiny", ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], 4, 8, 17004),
    "gemma2-tiny-lora": ("gemma2-tiny", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                         4, 8, 17005),
}


def write_lora_fixture(name, out, inputs, vers):
    import warnings
    import peft
    base_name, targets, r, alpha, seed = LORA_FIXTURES[name]
    cls, config, base_seed, _ = FIXTURES[base_name]
    model = build_model(cls, config, base_seed)
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets, init_lora_weights=False,
                          fan_in_fan_out=base_name.startswith("gpt2"), task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft 0.21 calls an API that transformers 5 deprecates
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        m = peft.get_peft_model(model, cfg)
    m.eval()
    input_ids, attention_mask, labels = inputs
    m.zero_grad(set_to_none=True)
    res = m(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    res.loss.backward()
    ref = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
           "logits": res.logits.detach().contiguous().clone(), "loss": res.loss.detach().reshape(()).clone()}
    for n, p in m.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, n
            key = n.replace(".default", "")  # the key PeftModel.save_pretrained writes
            ref["grad." + key] = p.grad.detach().contiguous().clone()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    m.save_pretrained(d, safe_serialization=True)
    cfg_path = os.path.join(d, "adapter_config.json")
    with open(cfg_path) as f:
        ac = json.load(f)
    ac["base_model_name_or_path"] = "../" + base_name  # relative to the adapter: no hub, no absolute path
    with open(cfg_path, "w") as f:
        json.dump(ac, f, indent=2, sort_keys=True)
        f.write("\n")
    with safetensors.safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as st:
        keys = set(st.keys())
    assert keys == {k[len("grad."):] for k in ref if k.startswith("grad.")}, sorted(keys)
    os.remove(os.path.join(d, "README.md"))  # peft's model card template: not needed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        merged = copy.deepcopy(m).merge_and_unload().eval()
    with torch.no_grad():
        ref["merged_logits"] = merged(input_ids=input_ids, attention_mask=attention_mask).logits.contiguous().clone()
    safetensors.torch.save_file(ref, os.path.join(d, "reference.safetensors"))
    # self-check: peft reloads the adapter onto a fresh base and gives the logits bit for bit
    fresh = build_model(cls, config, base_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        again = peft.PeftModel.from_pretrained(fresh, d).eval()
    with torch.no_grad():
        logits = again(input_ids=input_ids, attention_mask=attention_mask).logits
    assert torch.equal(logits, ref["logits"]), f"{name}: reloaded adapter logits differ"
    manifest = {
        "fixture": name, "generator": "scripts/lm_fixtures.py", "versions": vers, "base": base_name,
        "seeds": {"adapter": seed, "base": base_seed, "inputs": INPUT_SEED},
        "lora": {"r": r, "lora_alpha": alpha, "target_modules": targets, "init_lora_weights": False},
        "files": {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d))},
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    n = sum(t.numel() for k, t in ref.items() if k.startswith("grad."))
    print(f"{name:20s} PEFT LoRA r={r} alpha={alpha}  {len(keys)} tensors, {n} params  loss {ref['loss'].item():.6f}")


# Adafactor (issue 16 item 6): transformers' Adafactor run for 10 steps on llama-tiny's
# weights, each step with the fixture's reference gradients, under these configurations.
ADAFACTOR_CONFIGS = {
    "relative": {},  # transformers' defaults: relative step, parameter scaling, no momentum
    "warmup": {"warmup_init": True},
    "manual": {"lr": 1e-2, "relative_step": False, "scale_parameter": False, "beta1": 0.9, "weight_decay": 0.01,
               "clip_threshold": 0.5, "decay_rate": -0.6},
}
ADAFACTOR_STEPS = (10,)
ADAFACTOR_KEEP = ("model.layers.0.", "model.norm.")  # the weights recorded (every one is updated)


def write_adafactor_fixture(name, out, inputs, vers):
    from transformers.optimization import Adafactor
    cls, config, seed, _ = FIXTURES["llama-tiny"]
    ref = safetensors.torch.load_file(os.path.join(out, "llama-tiny", "reference.safetensors")) \
        if os.path.exists(os.path.join(out, "llama-tiny", "reference.safetensors")) else None
    base = build_model(cls, config, seed)
    if ref is None:
        ref = reference(base, *inputs)
    tensors = {}
    for cfg_name, kwargs in ADAFACTOR_CONFIGS.items():
        model = build_model(cls, config, seed)
        params = dict(model.named_parameters())
        opt = Adafactor(list(params.values()), **kwargs)
        for step in range(1, max(ADAFACTOR_STEPS) + 1):
            for n, p in params.items():
                p.grad = ref["grad." + n].clone()
            opt.step()
            if step in ADAFACTOR_STEPS:
                for n, p in params.items():
                    if n.startswith(ADAFACTOR_KEEP):  # a matrix of each kind and the vectors: small
                        tensors[f"{cfg_name}/{step}/{n}"] = p.detach().contiguous().clone()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    safetensors.torch.save_file(tensors, os.path.join(d, "adafactor.safetensors"))
    manifest = {
        "fixture": name, "generator": "scripts/lm_fixtures.py", "versions": vers, "base": "llama-tiny",
        "what": "transformers.optimization.Adafactor on llama-tiny's weights; every step's gradients are "
                "llama-tiny/reference.safetensors' grad.<name>; weights after the listed steps",
        "configs": ADAFACTOR_CONFIGS, "steps": list(ADAFACTOR_STEPS),
        "files": {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d))},
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"{name:20s} Adafactor, {len(ADAFACTOR_CONFIGS)} configurations x steps {ADAFACTOR_STEPS}")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions():
    import peft
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "safetensors": safetensors.__version__,
    }


def saved_keys(d):
    keys = set()
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    for f in files:
        with safetensors.safe_open(os.path.join(d, f), "pt") as st:
            keys |= set(st.keys())
    return keys, files


def self_check(name, d, model, ref):
    # 1. the saved tensors are exactly the parameters (no buffers such as rotary inv_freq or
    #    GPT-2's causal-mask bias, no tied lm_head), so grad.<name> covers every saved tensor
    keys, files = saved_keys(d)
    params = {n for n, _ in model.named_parameters()}
    assert keys == params, f"{name}: saved {sorted(keys ^ params)} differ from the parameters"
    if FIXTURES[name][3]:
        assert len(files) >= 2, f"{name}: the index lists {len(files)} shard(s)"
    # 2. the saved weights are the ones that produced the reference
    reloaded = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
    reloaded.eval()
    with torch.no_grad():
        logits = reloaded(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits
    assert torch.equal(logits, ref["logits"]), f"{name}: reloaded logits differ by {(logits - ref['logits']).abs().max().item()}"
    # 3. the default attention (sdpa) agrees closely: the reference is not an eager artefact
    sdpa = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = sdpa(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits
    real = ref["attention_mask"].bool()
    assert torch.allclose(logits[real], ref["logits"][real], rtol=1e-5, atol=1e-5), name
    # 4. padding changes nothing at the real positions: each row alone, unpadded, and with
    #    explicit position ids 0..T-1 (the default), gives the same logits there. (Not for
    #    the RoPE types whose frequencies depend on how far a forward's positions reach,
    #    dynamic and longrope: a row alone reaches less far than the padded batch.)
    rope = getattr(model.config, "rope_parameters", None) or {}
    length_dependent = rope.get("rope_type") in ("dynamic", "longrope")
    with torch.no_grad():
        for row, n in enumerate(LENGTHS):
            if length_dependent:
                break
            alone = reloaded(input_ids=ref["input_ids"][row:row + 1, :n]).logits[0]
            assert torch.allclose(alone, ref["logits"][row, :n], rtol=1e-5, atol=1e-5), (name, row)
        positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
        explicit = reloaded(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], position_ids=positions).logits
        assert torch.equal(explicit, ref["logits"]), name
    return files


def peft_smoke(model, input_ids, attention_mask, labels):
    """peft works with these pins (issue 16's LoRA tests use it): a LoRA forward/backward."""
    import warnings
    import peft
    with warnings.catch_warnings():  # peft 0.21 calls an API that transformers 5 deprecates
        warnings.simplefilter("ignore", FutureWarning)
        m = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
        m(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    assert all(p.grad is not None for n, p in m.named_parameters() if "lora_" in n)


def write_fixture(name, out, inputs, vers):
    cls, config, seed, shard = FIXTURES[name]
    model = build_model(cls, config, seed)
    ref = reference(model, *inputs)
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, safe_serialization=True, **kwargs)
    safetensors.torch.save_file(ref, os.path.join(d, "reference.safetensors"))
    files = self_check(name, d, model, ref)
    if name == "llama-tiny":
        peft_smoke(model, *inputs)
    manifest = {
        "fixture": name,
        "generator": "scripts/lm_fixtures.py",
        "versions": vers,
        "seeds": {"weights": seed, "inputs": INPUT_SEED},
        "model_class": cls.__name__,
        "attn_implementation": "eager",
        "max_shard_size": shard,
        "weight_files": files,
        "position_ids": "not given: the model's default, 0..T-1 in every row",
        "files": {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d))},
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    n_params = sum(p.numel() for p in model.parameters())
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name:20s} {cls.__name__:17s} params {n_params:6d}  loss {ref['loss'].item():.6f}  "
          f"{len(files)} weight file(s)  {size / 1024:.1f} KiB")


def compare_dirs(a, b, names):
    bad = []
    for name in names:
        da, db = os.path.join(a, name), os.path.join(b, name)
        fa = sorted(os.listdir(da)) if os.path.isdir(da) else []
        fb = sorted(os.listdir(db)) if os.path.isdir(db) else []
        if fa != fb:
            bad.append(f"{name}: files {fa} != {fb}")
            continue
        bad += [f"{name}/{f} differs" for f in fa if not filecmp.cmp(os.path.join(da, f), os.path.join(db, f), shallow=False)]
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the fixture directory (tests/fixtures/lm)")
    ap.add_argument("--check", action="store_true",
                    help="write into a temporary directory and compare with --out byte for byte; write nothing")
    ap.add_argument("--only", action="append", choices=sorted(FIXTURES) + sorted(LORA_FIXTURES) + ["adafactor"],
                    help="write only these fixtures")
    args = ap.parse_args()
    setup_determinism()
    vers = versions()
    print("lm_fixtures: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    inputs = make_inputs()
    names = args.only or list(FIXTURES) + list(LORA_FIXTURES) + ["adafactor"]

    def write(name, out):
        if name == "adafactor":
            write_adafactor_fixture(name, out, inputs, vers)
        elif name in LORA_FIXTURES:
            write_lora_fixture(name, out, inputs, vers)
        else:
            write_fixture(name, out, inputs, vers)

    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                write(name, tmp)
            bad = compare_dirs(tmp, args.out, names)
        if bad:
            print("lm_fixtures: the fixtures differ from a fresh run:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"lm_fixtures: {args.out} matches a fresh run byte for byte")
        return 0
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        write(name, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
