#!/usr/bin/env python3
"""Writes the quantization fixtures of issue 37 (tests/fixtures/quant/) with bitsandbytes on the CPU.

Run it through `scripts/lm_fixtures --quant`, which makes the pinned venv (torch, transformers,
peft, bitsandbytes from PyPI) and sets the environment (offline, one thread, CPU).

<out>/bytes.safetensors: for each case "<case>", its input "<case>.input" and what
bitsandbytes makes of it:
  "<case>.<nf4|fp4>.packed", ".absmax", ".dequant": quantize_4bit(blocksize=64,
      compress_statistics=False) and dequantize_4bit back to the input's dtype. The dequantized
      values are bitsandbytes' reference arithmetic (backends/default/ops.py
      _dequantize_4bit_compute, the CUDA kernel's: blocks of 64 over the flattened weight): its
      0.50 CPU kernel gives the same bytes when a row's length is a multiple of 64 (checked
      here) and takes the wrong block's absmax otherwise (rows of 80 or 96 values here);
  "<case>.<nf4|fp4>dq.packed", ".absmax" (uint8), ".absmax2", ".offset", ".dequant": the same
      with double quantization (compress_statistics=True: the absmax quantized in blocks of
      256 with the dynamic map); no ".dequant" for the large case (many_f32);
  "<case>.int8.CB", ".SCB": Int8Params' quantization (LLM.int8: the weight in fp16, row-wise
      absmax, round(w * 127 / absmax)) for 2-D cases;
  "dynamic_code": the 256-entry map of the double quantization as bitsandbytes leaves it.

<out>/qlora-llama/: one QLoRA training step on a small Llama whose linear modules take 64
inputs (bitsandbytes' CPU dequantization is right only for rows that are whole blocks, see
above; llama-tiny's are 32) loaded by transformers with BitsAndBytesConfig(load_in_4bit, nf4,
double quantization, compute dtype float32) and a peft LoRA (r 4, alpha 8, every linear
module, random A and B):
  base/: the base (config.json, model.safetensors in bfloat16, loaded as float32);
  adapter_config.json, adapter_model.safetensors: the adapter before the step (PeftModel's
      save_pretrained);
  reference.safetensors: the batch (tests/fixtures/lm/llama-tiny's), "logits", "loss", "grad.<key>" and
      "after.<key>" (the adapter after one torch.optim.AdamW step, lr 1e-2, weight decay 0.01),
      and "base.<module>.packed/.absmax/.absmax2/.offset" for every quantized weight
      (transformers' own quantization at load);
  manifest.json: versions, seeds, sha256 of the other files.

The output is deterministic: two runs write byte-identical files.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import warnings

for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(var, "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import logging  # noqa: E402

logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # its optional CPU gemm kernel package

import torch  # noqa: E402
import safetensors.torch  # noqa: E402
import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute  # noqa: E402

SEED = 37
BASE_SEED = 3700
ADAPTER_SEED = 3737
LR, WEIGHT_DECAY = 1e-2, 0.01


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cases():
    g = torch.Generator().manual_seed(SEED)
    out = {}
    out["normal_f32"] = torch.randn(64, 96, generator=g)
    out["odd_f32"] = torch.randn(7, 13, generator=g) * 0.05  # 91 values: a block of 27, an odd count
    out["bf16"] = (torch.randn(48, 80, generator=g) * 3).to(torch.bfloat16)
    out["many_f32"] = torch.randn(300, 130, generator=g) * 0.02  # 610 blocks: 3 nested blocks
    # edge blocks of 64: zeros; huge and tiny magnitudes; denormals; each NF4 and FP4 level and the
    # midpoints between them (ties), times an absmax; +-absmax only; a single non-zero value
    nf4 = F.get_4bit_type("nf4", device="cpu")
    fp4 = torch.sort(F.get_4bit_type("fp4", device="cpu")).values
    rows = [torch.zeros(64)]
    big = torch.randn(64, generator=g)
    big[3] = 1e30
    rows.append(big)
    rows.append(torch.randn(64, generator=g) * 1e-30)
    rows.append(torch.randn(64, generator=g) * 1e-40)  # denormal floats
    for code in (nf4, fp4):
        mids = (code[:-1] + code[1:]) / 2
        rows.append(torch.cat([code, mids, code * 0.999, code * -0.5, torch.tensor([1.0])]) * 2.5)
    rows.append(torch.tensor([1.5, -1.5] * 32))
    single = torch.zeros(64)
    single[17] = -0.25
    rows.append(single)
    out["edge_f32"] = torch.stack(rows)
    out["vector_f32"] = torch.randn(200, generator=g)  # 1-D: 3 full blocks and 8
    return out


def bytes_fixture(out_dir):
    tensors = {}
    for name, x in cases().items():
        tensors[name + ".input"] = x.contiguous()
        for qt in ("nf4", "fp4"):
            for dq in (False, True):
                key = f"{name}.{qt}{'dq' if dq else ''}"
                packed, st = F.quantize_4bit(x.clone(), blocksize=64, compress_statistics=dq, quant_type=qt)
                tensors[key + ".packed"] = packed.reshape(-1).contiguous()
                tensors[key + ".absmax"] = st.absmax.contiguous()
                if dq:
                    tensors[key + ".absmax2"] = st.state2.absmax.contiguous()
                    tensors[key + ".offset"] = st.offset.reshape(1).float().contiguous()
                if x.numel() < 20000:  # (the large case checks the nested blocks' bytes; its dequant is not stored)
                    absmax = st.absmax
                    if dq:  # as functional.dequantize_4bit does before its kernel
                        absmax = F.dequantize_blockwise(st.absmax, st.state2) + st.offset
                    ref = _dequantize_4bit_compute(packed.reshape(-1), absmax.float(), st.code, 64, x.shape, x.dtype)
                    kernel = F.dequantize_4bit(packed, st)
                    if x.shape[-1] % 64 == 0:
                        assert torch.equal(kernel, ref), f"{key}: the CPU kernel and the reference differ"
                    tensors[key + ".dequant"] = ref.contiguous()
        if x.dim() == 2 and name != "edge_f32":  # an all-zero row divides by zero in bitsandbytes
            p = bnb.nn.Int8Params(x.clone(), requires_grad=False, has_fp16_weights=False)
            p = p._quantize("cpu")
            tensors[name + ".int8.CB"] = p.CB.contiguous()
            tensors[name + ".int8.SCB"] = p.SCB.contiguous()
    # the dynamic map the double quantization used (bitsandbytes sets its first entry to -1 in place)
    tensors["dynamic_code"] = F.name2qmap["dynamic"].clone().contiguous()
    safetensors.torch.save_file(tensors, os.path.join(out_dir, "bytes.safetensors"))


def qlora_fixture(out_dir, lm_dir):
    import peft
    import transformers
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from transformers import LlamaConfig, LlamaForCausalLM

    d = os.path.join(out_dir, "qlora-llama")
    shutil.rmtree(d, ignore_errors=True)
    base = os.path.join(d, "base")
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
                         hidden_act="silu", initializer_range=0.2, tie_word_embeddings=False, bos_token_id=1,
                         eos_token_id=2)
    config._attn_implementation = "eager"
    torch.manual_seed(BASE_SEED)
    plain = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for _, p in sorted(plain.named_parameters()):
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.1)
    plain.save_pretrained(base, safe_serialization=True)
    os.remove(os.path.join(base, "generation_config.json"))
    qc = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                            bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(base, quantization_config=qc, device_map="cpu", dtype=torch.float32)
    model.config._attn_implementation = "eager"
    ref = safetensors.torch.load_file(os.path.join(lm_dir, "llama-tiny", "reference.safetensors"))
    torch.manual_seed(ADAPTER_SEED)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False,
                          task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = peft.get_peft_model(model, cfg)
    m.train()
    m.save_pretrained(d, safe_serialization=True)
    os.remove(os.path.join(d, "README.md"))
    cfg_path = os.path.join(d, "adapter_config.json")
    with open(cfg_path) as f:
        ac = json.load(f)
    ac["base_model_name_or_path"] = "base"
    with open(cfg_path, "w") as f:
        json.dump(ac, f, indent=2, sort_keys=True)
        f.write("\n")
    out = {k: ref[k] for k in ("input_ids", "attention_mask", "labels")}
    for name, mod in m.named_modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            st = mod.weight.quant_state
            key = "base." + name.replace("base_model.model.", "").replace(".base_layer", "")
            out[key + ".packed"] = mod.weight.data.reshape(-1).contiguous()
            out[key + ".absmax"] = st.absmax.contiguous()
            out[key + ".absmax2"] = st.state2.absmax.contiguous()
            out[key + ".offset"] = st.offset.reshape(1).float().contiguous()
    params = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([p for _, p in params], lr=LR, weight_decay=WEIGHT_DECAY)
    res = m(input_ids=out["input_ids"], attention_mask=out["attention_mask"], labels=out["labels"])
    res.loss.backward()
    out["logits"] = res.logits.detach().contiguous().clone()
    out["loss"] = res.loss.detach().reshape(()).clone()
    for n, p in params:
        key = n.replace("base_model.model.", "").replace(".default", "")
        out["grad." + key] = p.grad.detach().contiguous().clone()
    opt.step()
    for n, p in params:
        key = n.replace("base_model.model.", "").replace(".default", "")
        out["after." + key] = p.detach().contiguous().clone()
    safetensors.torch.save_file(out, os.path.join(d, "reference.safetensors"))
    vers = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "bitsandbytes": bnb.__version__, "python": platform.python_version()}
    manifest = {"fixture": "qlora-llama", "generator": "scripts/quant_fixtures.py", "versions": vers,
                "base": "base/ (a Llama of hidden size 64, 2 layers)", "seeds": {"base": BASE_SEED, "adapter": ADAPTER_SEED},
                "quantization": {"quant_type": "nf4", "double_quant": True, "compute_dtype": "float32",
                                 "blocksize": 64},
                "lora": {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "init_lora_weights": False},
                "optimizer": {"AdamW": {"lr": LR, "weight_decay": WEIGHT_DECAY}},
                "files": {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f != "base"}}
    manifest["files"].update({"base/" + f: sha256(os.path.join(base, f)) for f in sorted(os.listdir(base))})
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/quant")
    ap.add_argument("--lm", default="tests/fixtures/lm", help="the LM fixtures (llama-tiny is the QLoRA base)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    bytes_fixture(args.out)
    qlora_fixture(args.out, args.lm)
    print(f"quant_fixtures: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
