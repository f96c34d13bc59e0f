"""Memory estimates: estimate_memory (accel_estimate_memory) and its MemoryEstimate; no
Accelerator needed."""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence, Union

from . import _lib
from ._errors import _check
from ._ffi import ffi
from ._options import Attention, DType, Offload, OptimizerKind, Precision, Quantization, Strategy, _enum
from ._util import _cpath, _fill


class MemoryEstimate(NamedTuple):
    """What estimate_memory returns (accel_memory_estimate): bytes per GPU."""
    parameters: int            # the model's parameters
    trainable_parameters: int  # those trained (the adapters under LoRA)
    seq_len: int               # the sequence length used
    attention: Union[Attention, int]  # the attention kernel assumed (EAGER or FUSED)
    weights: int               # working weights, ZeRO's master shards, a LoRA base
    gradients: int             # the gradients the strategy holds at the step
    optimizer_state: int       # the optimizer's state on this GPU
    activations: int           # saved for backward at the end of the forward
    temporaries: int           # the rest of the peak (logits' gradient, recomputed block, ...)
    total: int                 # the peak of a training step (device memory)
    host: int = 0              # the peak of host memory (offload: state, master, the step's copies)
    transfer_bytes: int = 0    # bytes between device and host per optimizer step (offload)
    gradient_transfer_bytes: int = 0  # of which the gradients' copies, beside the backward


def estimate_memory(model: Union[str, "os.PathLike[str]"], *, mixed_precision: Union[Precision, str] = "no",
                    weights_dtype: Union[DType, str] = "float32", optimizer: Union[OptimizerKind, str] = "adamw",
                    strategy: Union[Strategy, str] = "no", world_size: int = 1, micro_batch: int = 1,
                    seq_len: int = 0, gradient_checkpointing: bool = False, lora_rank: int = 0,
                    lora_target_modules: Union[str, Sequence[str], None] = None,
                    attention: Union[Attention, str, None] = None, offload: Union[Offload, str] = "none",
                    quantization: Union[Quantization, str] = "none", double_quant: bool = False) -> MemoryEstimate:
    """The memory per GPU of training a causal LM (accel_estimate_memory; no Accelerator
    needed): weights, gradients, optimizer state, activations and the peak, in bytes.

    model: a named shape ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-7b",
    "llama-13b", "llama-70b", "tiny-llama"), a config.json or a directory holding one.
    mixed_precision: "no", "bf16" or "fp16" ("auto" depends on a device: InvalidArgumentError).
    optimizer: "sgd", "sgd_momentum", "adamw", "adafactor" or "lamb". world_size > 1 needs a
    strategy. seq_len 0: min(1024, max_position_embeddings). lora_rank > 0: LoRA adapters of
    that rank on lora_target_modules (None: PEFT's default for the family). attention:
    "eager", "fused" or None (this build's kernel). offload: "none", "optimizer" (the
    optimizer's state and ZeRO's master in host memory: `host` and `transfer_bytes`, of which
    `gradient_transfer_bytes` run beside the backward) or "parameters" (ZeRO-3: its shard too).
    quantization: "none", "nf4", "fp4" or "int8" (the LoRA base's linear weights; needs
    lora_rank), double_quant for NF4/FP4's absmax. Raises IOError for a model that is
    neither a named shape nor a readable config, InvalidArgumentError for a bad option,
    UnsupportedError for what prepare refuses (LAMB under ZeRO, ...)."""
    opts = ffi.new("accel_memory_estimate_options *")
    _check(_lib.lib.accel_memory_estimate_options_init(opts, _lib.lib.ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION))
    _fill(opts, mixed_precision=_enum(Precision, mixed_precision, "mixed_precision"))
    _fill(opts, weights_dtype=_enum(DType, weights_dtype, "weights_dtype"))
    _fill(opts, optimizer=_enum(OptimizerKind, optimizer, "optimizer"))
    _fill(opts, strategy=_enum(Strategy, strategy, "strategy"))
    _fill(opts, world_size=world_size)
    _fill(opts, micro_batch=micro_batch)
    _fill(opts, seq_len=seq_len)
    opts.gradient_checkpointing = 1 if gradient_checkpointing else 0
    _fill(opts, lora_rank=lora_rank)
    keep = ffi.NULL
    if lora_target_modules is not None:
        names = [lora_target_modules] if isinstance(lora_target_modules, str) else list(lora_target_modules)
        keep = ffi.new("char[]", _cpath(",".join(names), "lora_target_modules"))
    opts.lora_target_modules = keep
    _fill(opts, attention=Attention.AUTO if attention is None else _enum(Attention, attention, "attention"))
    _fill(opts, offload=_enum(Offload, offload, "offload"))
    _fill(opts, quantization=_enum(Quantization, quantization, "quantization"))
    opts.double_quant = 1 if double_quant else 0
    out = ffi.new("accel_memory_estimate *")
    out.version = _lib.lib.ACCEL_MEMORY_ESTIMATE_VERSION
    _check(_lib.lib.accel_estimate_memory(_cpath(model, "model"), opts, out))  # accel_last_error(NULL)
    try:
        kernel: Union[Attention, int] = Attention(out.attention)
    except ValueError:  # a kernel this binding does not know
        kernel = int(out.attention)
    return MemoryEstimate(int(out.parameters), int(out.trainable_parameters), int(out.seq_len), kernel,
                          int(out.weights), int(out.gradients), int(out.optimizer_state), int(out.activations),
                          int(out.temporaries), int(out.total), int(out.host), int(out.transfer_bytes),
                          int(out.gradient_transfer_bytes))
