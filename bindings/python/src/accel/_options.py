"""Options: the enums an argument names (a member, an int or a case-insensitive name, see _enum),
the tracker writers (_log_writers) and the accel_options struct an Accelerator is made with
(_options, shared with accel.sim.run)."""

from __future__ import annotations

import enum
from typing import Any, List, Optional, Sequence, Union

from . import _lib
from ._errors import InvalidArgumentError, Status, _check
from ._ffi import ffi
from ._util import _fill


# ------------------------------------------------------------------------------------------
# Enums
# ------------------------------------------------------------------------------------------


class DType(enum.IntEnum):
    """accel_dtype: a tensor's element type."""

    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    INT64 = 3
    INT32 = 4
    UINT8 = 5
    FLOAT64 = 6
    INT8 = 7


class Quantization(enum.IntEnum):
    """accel_quantization: how Model.from_pretrained / from_config quantize a causal LM's block
    linear weights at load (QLoRA: bitsandbytes' formats, byte for byte). A quantized base
    trains through LoRA adapters only (an optimizer without them: InvalidStateError) and
    save_pretrained refuses it (InvalidArgumentError; save the adapters)."""

    NONE = 0  # the weights in the model's dtype
    NF4 = 1   # 4-bit NormalFloat, one float32 absmax per 64 values (bnb_4bit_quant_type="nf4")
    FP4 = 2   # 4-bit float, the same blocks (bnb_4bit_quant_type="fp4")
    INT8 = 3  # LLM.int8's row-wise int8 (load_in_8bit)


class Precision(enum.IntEnum):
    """accel_precision: mixed_precision="no" | "bf16" | "fp16" | "auto" (bf16 where the device
    computes it natively, else no; resolved when the Accelerator is made)."""

    NO = 0
    BF16 = 1
    FP16 = 2
    AUTO = 3


class Device(enum.IntEnum):
    """accel_device: AUTO (CUDA when available, else the CPU), CPU, CUDA."""

    AUTO = 0
    CPU = 1
    CUDA = 2


class Strategy(enum.IntEnum):
    """accel_strategy: how several processes share the work (DDP, ZeRO 1-3; FSDP's aliases)."""

    NO = 0
    DDP = 1
    ZERO1 = 2
    ZERO2 = 3
    ZERO3 = 4
    SHARD_GRAD_OP = 3  # FSDP's names (aliases)
    FULL_SHARD = 4


class Backend(enum.IntEnum):
    """accel_backend: how the processes of a launched world talk."""

    AUTO = 0
    GLOO = 1
    NCCL = 2
    SIM = 3


class Offload(enum.IntEnum):
    """accel_offload: what lives in host memory instead of the device's (offload="none" |
    "optimizer"). OPTIMIZER is ZeRO-Offload: the optimizer's state and the fp32 master weights in
    host memory, each step on the CPU; the same weights, bit for bit, as without."""

    NONE = 0        # everything on the device
    OPTIMIZER = 1   # the optimizer's state and the master weights in host memory
    PARAMETERS = 2  # ZeRO-3 only: that and each rank's shard of the weights, moved per unit to the device


class Activation(enum.IntEnum):
    """accel_activation: the MLP's activation between linear layers."""

    RELU = 0
    GELU = 1
    TANH = 2
    SIGMOID = 3


class Schedule(enum.IntEnum):
    """accel_schedule: the learning-rate schedule's shape after warm-up."""

    CONSTANT = 0
    LINEAR = 1
    COSINE = 2


class ReduceOp(enum.IntEnum):
    """accel_reduce_op: the element-wise reduction of Accelerator.reduce."""

    SUM = 0
    MEAN = 1
    MAX = 2
    MIN = 3
    PROD = 4


class OptimizerKind(enum.IntEnum):
    """accel_optimizer_kind: the optimizer estimate_memory assumes (its state per parameter)."""

    SGD = 0
    SGD_MOMENTUM = 1
    ADAMW = 2
    ADAFACTOR = 3
    LAMB = 4


class Attention(enum.IntEnum):
    """The attention kernel estimate_memory assumes (accel_memory_estimate_options.attention):
    AUTO (this build's: fused with libtorch >= 2.1, else eager), EAGER (the T x T
    probabilities are saved for backward), FUSED (a GPU's flash or memory-efficient attention)."""

    AUTO = 0
    EAGER = 1
    FUSED = 2


class LogWriter(enum.IntFlag):
    """accel_log_writer: the files init_trackers writes (flags: LogWriter.JSONL | LogWriter.CSV)."""

    JSONL = 1        # LOG_DIR/metrics.jsonl, appended to
    CSV = 2          # LOG_DIR/metrics.csv, appended to
    TENSORBOARD = 4  # LOG_DIR/events.out.tfevents.TIME.HOST.PID, new for each init_trackers


class Loss(enum.IntEnum):
    """accel_loss: the loss Accelerator.train_micro_batches computes for each micro-batch."""

    MSE = 0            # mse_loss(model(x), y)
    CROSS_ENTROPY = 1  # cross_entropy(model(x), y)
    CAUSAL_LM = 2      # a causal LM's next-token loss; labels: the batch's targets, else its inputs


class Side(enum.IntEnum):
    """accel_side: where a tokenizer's truncation drops ids and where a batch's padding goes
    (Tokenizer.encode's truncation_side; encode_batch's, DataLoader.for_lm's and for_sft's
    padding_side: "right" or "left")."""

    RIGHT = 0  # the end (the default)
    LEFT = 1   # the start (padding: generation from a batch of prompts)


class SpecialToken(enum.IntEnum):
    """accel_special_token: a tokenizer's special tokens (Tokenizer.special_id)."""

    BOS = 0  # beginning of sequence
    EOS = 1  # end of sequence (generation's stop)
    PAD = 2  # padding
    UNK = 3  # unknown


class ChatFormat(enum.IntEnum):
    """accel_chat_format: the chat template Tokenizer.apply_chat renders and DataLoader.for_sft
    renders "messages" lines with ("auto", "chatml", "llama3", "gemma", "phi3", "mistral")."""

    AUTO = 0     # the tokenizer's chat_template (tokenizer_config.json), recognised by its markers
    CHATML = 1   # <|im_start|>role\n...<|im_end|> (Qwen2, Qwen2.5, Qwen3, SmolLM2/3...)
    LLAMA3 = 2   # <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
    GEMMA = 3    # <start_of_turn>user|model\n...<end_of_turn>
    PHI3 = 4     # <|user|>\n...<|end|>
    MISTRAL = 5  # [INST] ... [/INST] (Mistral-7B-Instruct, Llama 2 chat)


_ALIASES = {"fp32": "no", "none": "no", "float32": "no", "bfloat16": "bf16", "float16": "fp16",
            "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "double": "float64",
            "float": "float32", "half": "float16", "long": "int64", "int": "int32"}


def _enum(cls: Any, value: Any, what: str) -> Any:
    """An enum member from a member, an int or a case-insensitive name ("bf16", "ddp")."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        names = {m.lower(): m for m in cls.__members__}
        if key not in names and key in _ALIASES:
            key = _ALIASES[key]
        if key in names:
            return cls[names[key]]
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{what} must be one of {', '.join(n.lower() for n in cls.__members__)}; got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            pass
    raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what}: {value!r} is no {cls.__name__}")


# ------------------------------------------------------------------------------------------
# Option structs
# ------------------------------------------------------------------------------------------


def _log_writers(writers: Union[LogWriter, int, str, Sequence[Union[LogWriter, int, str]], None]) -> int:
    """accel_tracker_options.writers from None (0: ACCEL_LOG_WITH, else jsonl), a LogWriter or
    int of flags, a name ("jsonl", "csv", "tensorboard", "all"; comma-separated as in
    ACCEL_LOG_WITH) or an iterable of names and flags."""
    if writers is None:
        return 0
    if isinstance(writers, (str, int)):
        items: List[Any] = [writers]
    elif isinstance(writers, (bytes, bytearray)) or not hasattr(writers, "__iter__"):
        items = [writers]  # refused below
    else:
        items = list(writers)
    flags = 0
    for item in items:
        if isinstance(item, str):
            for name in item.split(","):
                key = name.strip().lower()
                if key == "all":
                    flags |= int(LogWriter.JSONL | LogWriter.CSV | LogWriter.TENSORBOARD)
                elif key.upper() in LogWriter.__members__:
                    flags |= int(LogWriter[key.upper()])
                else:
                    raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                               f"writers: {name.strip()!r} is not one of jsonl, csv, tensorboard, all")
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 0xFFFFFFFF:
            flags |= int(item)  # bits outside the three: the library names them
        else:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"writers: {item!r} is no LogWriter")
    if not flags:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"writers: {writers!r} names no writer (None: ACCEL_LOG_WITH, else jsonl)")
    return flags


def _options(mixed_precision: Union[Precision, str, None] = None, gradient_accumulation_steps: int = 1,
             cpu: bool = False, seed: int = 0, strategy: Union[Strategy, str, None] = None,
             backend: Union[Backend, str, None] = None, timeout: Optional[float] = None, num_threads: int = 0,
             device: Union[Device, str, None] = None, device_index: int = 0,
             loss_scale_init: Optional[float] = None, loss_scale_growth_factor: Optional[float] = None,
             loss_scale_backoff_factor: Optional[float] = None, loss_scale_growth_interval: Optional[int] = None,
             bucket_bytes: Optional[int] = None, offload: Union[Offload, str, None] = None) -> Any:
    """An accel_options filled by accel_options_init, then the arguments that were given."""
    opts = ffi.new("accel_options *")
    _check(_lib.lib.accel_options_init(opts, _lib.lib.ACCEL_OPTIONS_VERSION))
    if mixed_precision is not None:
        _fill(opts, mixed_precision=_enum(Precision, mixed_precision, "mixed_precision"))
    _fill(opts, gradient_accumulation_steps=gradient_accumulation_steps)
    _fill(opts, seed=seed)
    if cpu:
        opts.device = _lib.lib.ACCEL_DEVICE_CPU
    elif device is not None:
        _fill(opts, device=_enum(Device, device, "device"))
    _fill(opts, device_index=device_index)
    if loss_scale_init is not None:
        _fill(opts, loss_scale_init=loss_scale_init)
    if loss_scale_growth_factor is not None:
        _fill(opts, loss_scale_growth_factor=loss_scale_growth_factor)
    if loss_scale_backoff_factor is not None:
        _fill(opts, loss_scale_backoff_factor=loss_scale_backoff_factor)
    if loss_scale_growth_interval is not None:
        _fill(opts, loss_scale_growth_interval=loss_scale_growth_interval)
    _fill(opts, num_threads=num_threads)
    if strategy is not None:
        _fill(opts, strategy=_enum(Strategy, strategy, "strategy"))
    if bucket_bytes is not None:
        _fill(opts, bucket_bytes=bucket_bytes)
    if backend is not None:
        _fill(opts, backend=_enum(Backend, backend, "backend"))
    if timeout is not None:
        _fill(opts, timeout_seconds=timeout)
    if offload is not None:
        _fill(opts, offload=_enum(Offload, offload, "offload"))
    return opts
