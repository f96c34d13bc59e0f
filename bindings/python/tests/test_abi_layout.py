"""The hand-written cdef against the C layout table printed by abi_layout_probe (built from the
real header): struct sizes, field offsets and sizes, enum constants, option versions and
defaults, and that every function exists and is called by the package."""

import os
import re
import subprocess

import pytest

import accel
from accel import _ffi
from accel._ffi import ffi


def _probe_path():
    tried = []
    env = os.environ.get("ACCEL_LAYOUT_PROBE")
    if env:
        if os.path.isfile(env):
            return env
        tried.append(f"ACCEL_LAYOUT_PROBE={env} (no such file)")
    libpath = os.environ.get("ACCEL_LIBRARY")
    if libpath:
        guess = os.path.join(os.path.dirname(libpath), "tests", "abi", "abi_layout_probe")
        if os.path.isfile(guess):
            return guess
        tried.append(f"{guess} (beside ACCEL_LIBRARY, where the meson build puts it)")
    else:
        tried.append("ACCEL_LIBRARY unset: no <dir of libaccel>/tests/abi/abi_layout_probe to look for")
    pytest.fail("abi_layout_probe not found; tried: " + "; ".join(tried) +
                ". Set ACCEL_LAYOUT_PROBE to the probe built from include/accel/accel.h "
                "(meson builds it as tests/abi/abi_layout_probe).", pytrace=False)


@pytest.fixture(scope="module")
def table():
    out = subprocess.run([_probe_path()], capture_output=True, text=True, check=True).stdout
    t = {"struct": {}, "field": {}, "const": {}, "version": {}, "default": {}, "function": []}
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "struct":
            m = re.match(r"(\w+) size=(\d+) align=(\d+)", rest)
            t["struct"][m.group(1)] = (int(m.group(2)), int(m.group(3)))
        elif kind == "field":
            m = re.match(r"(\w+)\.(\w+) offset=(\d+) size=(\d+) type=(.*)", rest)
            t["field"][(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
        elif kind == "const":
            m = re.match(r"(\w+)\.(\w+) (-?\d+)", rest)
            t["const"][m.group(2)] = (m.group(1), int(m.group(3)))
        elif kind == "version":
            name, n = rest.split()
            t["version"][name] = int(n)
        elif kind == "default":
            m = re.match(r"(\w+)\.(\w+) (.*)", rest)
            t["default"][(m.group(1), m.group(2))] = m.group(3)
        elif kind == "function":
            t["function"].append(rest.split()[0])
    assert t["struct"] and t["field"] and t["const"] and len(t["function"]) >= 81
    return t


def test_struct_sizes_and_alignment(table):
    for name, (size, align) in table["struct"].items():
        assert ffi.sizeof(name) == size, name
        assert ffi.alignof(name) == align, name


def test_field_offsets_and_sizes(table):
    for (struct, field), (offset, size) in table["field"].items():
        assert ffi.offsetof(struct, field) == offset, f"{struct}.{field}"
        assert ffi.sizeof(ffi.typeof(struct).fields[[f for f, _ in ffi.typeof(struct).fields].index(field)][1].type) == size
    # and the cdef has no field the header lacks
    for struct in table["struct"]:
        for field, _ in ffi.typeof(struct).fields:
            assert (struct, field) in table["field"], f"{struct}.{field} is not in the header"


_ENUMS = {"accel_status": (accel.Status, ("ACCEL_ERR_", "ACCEL_")), "accel_dtype": (accel.DType, ("ACCEL_",)),
          "accel_precision": (accel.Precision, ("ACCEL_PRECISION_",)),
          "accel_device": (accel.Device, ("ACCEL_DEVICE_",)), "accel_strategy": (accel.Strategy, ("ACCEL_STRATEGY_",)),
          "accel_backend": (accel.Backend, ("ACCEL_BACKEND_",)),
          "accel_activation": (accel.Activation, ("ACCEL_ACT_",)),
          "accel_schedule": (accel.Schedule, ("ACCEL_SCHEDULE_",)),
          "accel_reduce_op": (accel.ReduceOp, ("ACCEL_REDUCE_",)),
          "accel_optimizer_kind": (accel.OptimizerKind, ("ACCEL_OPTIMIZER_",)),
          "accel_log_writer": (accel.LogWriter, ("ACCEL_LOG_",)),
          "accel_loss": (accel.Loss, ("ACCEL_LOSS_",)),
          "accel_special_token": (accel.SpecialToken, ("ACCEL_TOKEN_",)),
          "accel_side": (accel.Side, ("ACCEL_SIDE_",)),
          "accel_chat_format": (accel.ChatFormat, ("ACCEL_CHAT_",)),
          "accel_quantization": (accel.Quantization, ("ACCEL_QUANT_",)),
          "accel_offload": (accel.Offload, ("ACCEL_OFFLOAD_",))}


def test_enum_constants(table):
    lib = accel.load_library()
    seen = {}
    for name, (enum, value) in table["const"].items():
        assert getattr(lib, name) == value, name  # the cdef
        cls, prefixes = _ENUMS[enum]  # the Python IntEnum
        short = next(name[len(p):] for p in prefixes if name.startswith(p))
        assert cls[short] == value, name
        seen.setdefault(cls, set()).add(short)
    for cls, names in seen.items():
        assert set(cls.__members__) == names, cls


def test_option_versions_and_defaults(table):
    lib = accel.load_library()
    for struct, version in table["version"].items():
        macro = "ACCEL_" + struct[len("accel_"):].upper() + "_VERSION"
        assert getattr(lib, macro) == version, macro
    inits = {"accel_options": lib.accel_options_init, "accel_mlp_options": lib.accel_mlp_options_init,
             "accel_sgd_options": lib.accel_sgd_options_init, "accel_adamw_options": lib.accel_adamw_options_init,
             "accel_lamb_options": lib.accel_lamb_options_init,
             "accel_scheduler_options": lib.accel_scheduler_options_init,
             "accel_dataloader_options": lib.accel_dataloader_options_init,
             "accel_sim_options": lib.accel_sim_options_init,
             "accel_project_options": lib.accel_project_options_init,
             "accel_lm_options": lib.accel_lm_options_init,
             "accel_lm_data_options": lib.accel_lm_data_options_init,
             "accel_lora_options": lib.accel_lora_options_init,
             "accel_adafactor_options": lib.accel_adafactor_options_init,
             "accel_generate_options": lib.accel_generate_options_init,
             "accel_memory_estimate_options": lib.accel_memory_estimate_options_init,
             "accel_tracker_options": lib.accel_tracker_options_init,
             "accel_inference_options": lib.accel_inference_options_init,
             "accel_encode_options": lib.accel_encode_options_init,
             "accel_sft_options": lib.accel_sft_options_init}
    structs = {}
    for struct, init in inits.items():
        s = ffi.new(struct + " *")
        assert init(s, table["version"][struct]) == 0
        assert s.version == table["version"][struct]
        structs[struct] = s
    for (struct, field), text in table["default"].items():
        value = getattr(structs[struct], field)
        if text == "NULL":
            assert value == ffi.NULL, f"{struct}.{field}"
        elif text.startswith('"'):
            assert ffi.string(value).decode() == text.strip('"'), f"{struct}.{field}"
        else:
            assert float(value) == float(text), f"{struct}.{field}"


def test_every_function_is_declared_and_called(table):
    lib = accel.load_library()
    pkg = os.path.dirname(accel.__file__)
    text = ""
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            src = open(os.path.join(pkg, name)).read()
            if name == "_ffi.py":
                src = src.replace(_ffi.CDEF, "")
            text += src
    missing = []
    for fn in table["function"]:
        getattr(lib, fn)  # declared in the cdef and exported by the library
        if f"lib.{fn}(" not in text and f"lib.{fn}," not in text:
            missing.append(fn)
    assert missing == []
    declared = set(re.findall(r"\b(accel_\w+)\(", _ffi.CDEF))
    assert declared == set(table["function"])


def test_chat_and_fine_tuning_declarations_are_in_the_table(table):
    # the generic checks above compare what the table holds: make sure it holds these (a probe
    # built from an older header would pass them vacuously)
    lib = accel.load_library()
    assert table["version"]["accel_lm_data_options"] == lib.ACCEL_LM_DATA_OPTIONS_VERSION == 2
    assert ("accel_lm_data_options", "padding_side") in table["field"]
    assert [f for f, _ in ffi.typeof("accel_chat_message").fields] == ["role", "content"]
    assert [f for f, _ in ffi.typeof("accel_sft_options").fields] == [
        "version", "chat_format", "completion_only_loss", "add_eos", "max_length", "packing", "padding_side",
        "pad_to_multiple_of", "pad_id"]
    assert {s for s in ("accel_chat_message", "accel_sft_options")} <= set(table["struct"])
    assert table["const"]["ACCEL_CHAT_MISTRAL"] == ("accel_chat_format", 5)
    assert set(accel.ChatFormat.__members__) == {"AUTO", "CHATML", "LLAMA3", "GEMMA", "PHI3", "MISTRAL"}
    for fn in ("accel_tokenizer_apply_chat", "accel_sft_options_init", "accel_sft_dataloader_create",
               "accel_dataloader_attention_mask", "accel_lm_generate_padded"):
        assert fn in table["function"], fn


def test_offload_declarations_are_in_the_table(table):
    # accel_options version 4 (offload), accel_sim_options version 2 (host_memory) and the
    # report's host side: present in the table, so the generic checks above cover them
    lib = accel.load_library()
    assert table["version"]["accel_options"] == lib.ACCEL_OPTIONS_VERSION == 4
    assert table["version"]["accel_sim_options"] == lib.ACCEL_SIM_OPTIONS_VERSION == 2
    assert [f for f, _ in ffi.typeof("accel_options").fields][-3:] == ["backend", "timeout_seconds", "offload"]
    assert [f for f, _ in ffi.typeof("accel_sim_options").fields][-2:] == ["engine_threads", "host_memory"]
    assert ("accel_options", "offload") in table["field"] and ("accel_sim_options", "host_memory") in table["field"]
    assert table["default"][("accel_options", "offload")] == "0"
    assert table["default"][("accel_sim_options", "host_memory")] == "NULL"
    assert table["const"]["ACCEL_OFFLOAD_NONE"] == ("accel_offload", 0)
    assert table["const"]["ACCEL_OFFLOAD_OPTIMIZER"] == ("accel_offload", 1)
    assert set(accel.Offload.__members__) == {"NONE", "OPTIMIZER", "PARAMETERS"}
    assert "accel_sim_report_rank_host" in table["function"]
    # version 3 of accel_options ends before offload, version 1 of accel_sim_options before
    # host_memory: their inits leave those bytes alone
    o = ffi.new("accel_options *")
    o.offload = 7
    assert lib.accel_options_init(o, 3) == 0 and o.version == 3 and o.offload == 7
    assert lib.accel_options_init(o, 4) == 0 and o.offload == lib.ACCEL_OFFLOAD_NONE
    assert lib.accel_options_init(o, 5) == lib.ACCEL_ERR_INVALID_ARGUMENT
    s = ffi.new("accel_sim_options *")
    keep = ffi.new("char[]", b"7GiB")
    s.host_memory = keep
    assert lib.accel_sim_options_init(s, 1) == 0 and s.version == 1 and s.host_memory == keep
    assert lib.accel_sim_options_init(s, 2) == 0 and s.host_memory == ffi.NULL
    assert lib.accel_sim_options_init(s, 3) == lib.ACCEL_ERR_INVALID_ARGUMENT
