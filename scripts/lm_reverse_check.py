#!/usr/bin/env python3
"""The reverse round trip of issue 16: transformers loads directories that accel trained and
saved, and reproduces accel's logits.

Run through scripts/lm_reverse_check, which makes the directories with
`ACCEL_LM_EXPORT_DIR=DIR build/tests/lm/test_lm --gtest_filter=LM.TrainedModelExportsForTransformers`
and runs this script with the lm venv's python (scripts/lm_fixtures makes it).

Usage: lm_reverse_check.py DIR
Also, for each DIR/<fixture>-adapter/ (a LoRA adapter accel trained and saved in PEFT's
format, accel's logits in DIR/<fixture>-adapter.reference.safetensors): peft's
PeftModel.from_pretrained loads it onto tests/fixtures/lm/<fixture> and must give accel's
logits within the same bound; DIR/<fixture>-lora-merged (the merged plain directory) is
checked with transformers like the others.
For each DIR/<fixture>/ holding accel_reference.safetensors (input_ids, attention_mask,
logits: accel's, after a few SGD steps): AutoModelForCausalLM.from_pretrained(DIR/<fixture>)
offline, eager attention, fp32, eval mode; its logits on the same inputs are compared with
accel's at the real positions (attention_mask 1): max |a - b| / max |b| <= 1e-4. One line per
model; exit 1 on any failure (or when there is no model to check).
"""

import os
import sys

for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(var, "1")  # never the hub
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
import safetensors.torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

BOUND = 1e-4


def check(d):
    ref = safetensors.torch.load_file(os.path.join(d, "accel_reference.safetensors"))
    model, info = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32,
                                                       output_loading_info=True)
    # every tensor used, none made up: a missing one would be freshly initialised, silently
    bad = {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise ValueError(f"loading info: {bad}")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits
    want = ref["logits"]
    if logits.shape != want.shape:
        raise ValueError(f"logits shape {tuple(logits.shape)}, accel's {tuple(want.shape)}")
    real = ref["attention_mask"].bool().unsqueeze(-1).expand_as(want)
    a, b = logits[real], want[real]
    rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
    rel_all = ((logits - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    return type(model).__name__, rel, rel_all


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "lm")


def check_adapter(root, name):
    import warnings
    import peft
    base_name = name[:-len("-adapter")]
    ref = safetensors.torch.load_file(os.path.join(root, name + ".reference.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(os.path.join(FIXTURES, base_name), attn_implementation="eager",
                                                dtype=torch.float32)
    with warnings.catch_warnings():  # peft 0.21 calls an API that transformers 5 deprecates
        warnings.simplefilter("ignore", FutureWarning)
        model = peft.PeftModel.from_pretrained(base, os.path.join(root, name)).eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits
    want = ref["logits"]
    real = ref["attention_mask"].bool().unsqueeze(-1).expand_as(want)
    a, b = logits[real], want[real]
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    torch.manual_seed(0)
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    root = sys.argv[1]
    names = sorted(n for n in os.listdir(root)
                   if os.path.isfile(os.path.join(root, n, "accel_reference.safetensors")))
    if not names:
        print(f"lm_reverse_check: no <fixture>/accel_reference.safetensors under {root}", file=sys.stderr)
        return 1
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; eager attention, fp32, eval mode")
    failed = 0
    for name in names:
        try:
            cls, rel, rel_all = check(os.path.join(root, name))
        except Exception as e:  # a directory transformers cannot load is a failure, named
            print(f"[ {name} ] FAILED: {type(e).__name__}: {e}")
            failed += 1
            continue
        ok = rel <= BOUND
        failed += not ok
        print(f"[ {name} ] {cls} from accel's directory: logits max relative difference "
              f"{rel:.3g} at real positions ({rel_all:.3g} all) {'ok' if ok else 'FAILED'} (bound {BOUND:g})")
    print(f"lm_reverse_check: {len(names) - failed}/{len(names)} models match accel's logits")
    # LoRA adapters accel wrote: peft loads each onto its base fixture
    adapters = sorted(n for n in os.listdir(root) if n.endswith("-adapter") and os.path.isdir(os.path.join(root, n)))
    for name in adapters:
        try:
            rel = check_adapter(root, name)
        except Exception as e:
            print(f"[ {name} ] FAILED: {type(e).__name__}: {e}")
            failed += 1
            continue
        ok = rel <= BOUND
        failed += not ok
        print(f"[ {name} ] peft.PeftModel.from_pretrained(fixture, accel's adapter): logits max relative difference "
              f"{rel:.3g} at real positions {'ok' if ok else 'FAILED'} (bound {BOUND:g})")
    if not adapters:
        print(f"lm_reverse_check: no <fixture>-adapter directories under {root}", file=sys.stderr)
        return 1
    print(f"lm_reverse_check: {len(adapters)} adapters checked with peft")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
