"""Models and what trains them: Model (the MLP, TorchScript, causal LMs with LoRA), its
outputs, the optimizers (SGD, AdamW, LAMB, Adafactor) and the learning-rate Scheduler."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union, overload, TYPE_CHECKING

from . import _lib
from ._errors import InvalidArgumentError, Status, _check
from ._ffi import ffi
from ._handle import _Args, _Child
from ._options import Activation, DType, Quantization, Schedule, _enum
from ._tensor import ArrayLike, Tensor, _pin_all, _unpin_all
from ._util import _cpath, _fill, _int

if TYPE_CHECKING:
    import numpy as np
    from ._context import Accelerator  # bound at run time by _context (annotations only)


class Model(_Child):
    """A model: the built-in MLP (Model.mlp) or a TorchScript module (Model.load_torchscript).
    Callable: `logits = model(x)` runs the forward (x: a Tensor or anything accel.tensor takes)."""

    _order = 3
    _destroy = "model"
    _copy_hint = ("save it with acc.save_state(dir) and load that into a new model with acc.load_state(dir); "
                  "acc.save_model(model, path) writes its weights (a causal LM: model.save_pretrained(dir), "
                  "loaded by accel.Model.from_pretrained(acc, dir)); acc.inference(model) makes an inference copy")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use accel.Model.mlp(accelerator, layer_sizes), accel.Model.load_torchscript(accelerator, path), "
                        "accel.Model.from_pretrained(accelerator, dir) or accel.Model.from_config(accelerator, config)")

    @classmethod
    def mlp(cls, accelerator: "Accelerator", layer_sizes: Sequence[int], *,
            activation: Union[Activation, str] = "relu", dropout: float = 0.0, bias: bool = True) -> "Model":
        """The built-in multi-layer perceptron (accel_model_create_mlp): Linear layers of the given
        sizes (input, hidden..., output) with `activation` (and dropout) between them."""
        opts = ffi.new("accel_mlp_options *")
        _check(_lib.lib.accel_mlp_options_init(opts, _lib.lib.ACCEL_MLP_OPTIONS_VERSION))
        values = [_int(s, "layer_sizes") for s in layer_sizes]
        try:
            sizes = ffi.new("int64_t[]", values or [0])
        except OverflowError as exc:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"layer_sizes: {values} do not fit int64_t ({exc})") from None
        opts.layer_sizes = sizes
        opts.num_layer_sizes = len(layer_sizes)
        _fill(opts, activation=_enum(Activation, activation, "activation"))
        _fill(opts, dropout=dropout)
        opts.bias = 1 if bias else 0
        return cls._make(accelerator, _lib.lib.accel_model_create_mlp, opts)

    @classmethod
    def load_torchscript(cls, accelerator: "Accelerator", path: Union[str, "os.PathLike[str]"]) -> "Model":
        """Loads a module saved by torch.jit.save (accel_model_load_torchscript)."""
        return cls._make(accelerator, _lib.lib.accel_model_load_torchscript, _cpath(path))

    @staticmethod
    def _lm_options(dtype: Union[DType, str], gradient_checkpointing: bool, quantization: Union[Quantization, str],
                    double_quant: bool) -> Any:
        opts = ffi.new("accel_lm_options *")
        _check(_lib.lib.accel_lm_options_init(opts, _lib.lib.ACCEL_LM_OPTIONS_VERSION))
        _fill(opts, dtype=_enum(DType, dtype, "dtype"))
        opts.gradient_checkpointing = 1 if gradient_checkpointing else 0
        _fill(opts, quantization=_enum(Quantization, quantization, "quantization"))
        opts.double_quant = 1 if double_quant else 0
        return opts

    @classmethod
    def from_pretrained(cls, accelerator: "Accelerator", directory: Union[str, "os.PathLike[str]"], *,
                        dtype: Union[DType, str] = "float32", gradient_checkpointing: bool = False,
                        quantization: Union[Quantization, str] = "none", double_quant: bool = False) -> "Model":
        """A GPT-2 or Llama causal LM from a Hugging Face directory (config.json and
        model.safetensors or a sharded index), as transformers' from_pretrained
        (accel_model_load_pretrained). dtype: "float32" or "bfloat16" parameters.
        quantization: "none", "nf4", "fp4" or "int8" (or accel.Quantization): the blocks' linear
        weights quantized at load as bitsandbytes does (QLoRA); such a model trains through LoRA
        adapters only (an optimizer without them: InvalidStateError) and save_pretrained refuses
        it. double_quant: NF4's/FP4's absmax quantized again (bnb_4bit_use_double_quant)."""
        opts = cls._lm_options(dtype, gradient_checkpointing, quantization, double_quant)
        return cls._make(accelerator, _lib.lib.accel_model_load_pretrained, _cpath(directory, "directory"), opts)

    @classmethod
    def from_config(cls, accelerator: "Accelerator", config: Union[str, "os.PathLike[str]"], *,
                    dtype: Union[DType, str] = "float32", gradient_checkpointing: bool = False,
                    quantization: Union[Quantization, str] = "none", double_quant: bool = False) -> "Model":
        """A causal LM with random weights from a config.json (the file or its directory), drawn
        from the Accelerator's seed as transformers initialises them (accel_model_create_lm).
        quantization and double_quant: as from_pretrained's."""
        opts = cls._lm_options(dtype, gradient_checkpointing, quantization, double_quant)
        return cls._make(accelerator, _lib.lib.accel_model_create_lm, _cpath(config, "config"), opts)

    @classmethod
    def _make(cls, acc: "Accelerator", create: Callable[..., int], *args: Any) -> "Model":
        m = object.__new__(cls)
        _Child.__init__(m, acc, create, *args)
        m._training = True
        return m

    @overload
    def __call__(self, *inputs: ArrayLike) -> Tensor: ...
    @overload
    def __call__(self, *, input_ids: ArrayLike, attention_mask: Optional[ArrayLike] = None,
                 labels: Optional[ArrayLike] = None) -> "CausalLMOutput": ...

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        """model(x): the forward (see forward). A causal LM also takes transformers' keywords:
        model(input_ids=..., attention_mask=..., labels=...) returns a CausalLMOutput (see lm)."""
        if kwargs:
            if inputs:
                raise TypeError("pass the inputs either positionally or as input_ids=, attention_mask=, labels=")
            return self.lm(**kwargs)
        return self.forward(*inputs)

    def lm(self, input_ids: ArrayLike, attention_mask: Optional[ArrayLike] = None,
           labels: Optional[ArrayLike] = None) -> "CausalLMOutput":
        """A causal LM's forward and loss (accel_lm_forward): logits [batch, seq, vocab]; with
        labels (input_ids with -100 where padded; shifted here, as in transformers) the mean
        loss over the real targets and their number. Backpropagated with
        Accelerator.backward, the loss is a token mean: the step's gradients are those of the
        mean over every real target of the global batch (all micro-batches, all processes)."""
        acc = self._acc
        logits = ffi.new("accel_tensor **")
        loss = ffi.new("accel_tensor **")
        tokens = ffi.new("int64_t *")
        args = [input_ids, attention_mask, labels]
        with acc._lock:
            ctx, h = self._p()
            with _Args([a for a in args if a is not None], convert=range(3)) as handles:
                it = iter(handles)
                c = [next(it) if a is not None else ffi.NULL for a in args]
                st = _lib.lib.accel_lm_forward(ctx, h, c[0], c[1], c[2], logits,
                                          loss if labels is not None else ffi.NULL,
                                          tokens if labels is not None else ffi.NULL)
            _check(st, ctx)
            out_logits = Tensor._wrap(logits[0], acc)
            if labels is None:
                return CausalLMOutput(None, out_logits, 0)
            return CausalLMOutput(Tensor._wrap(loss[0], acc), out_logits, int(tokens[0]))

    def generate(self, input_ids: ArrayLike, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
                 eos_token_id: Optional[int] = None, seed: int = 0, use_cache: bool = True, *,
                 attention_mask: Optional[ArrayLike] = None) -> Tensor:
        """Continues the prompts input_ids ([batch, seq]) with a causal LM: greedy with
        temperature 0, else sampling (top_k: among the k most likely). Returns the prompts
        followed by the new tokens (int64 [batch, seq + n]). Call eval() first (dropout).

        Without attention_mask the prompts have no padding (accel_lm_generate). With it
        ([batch, seq], int64 or int32: 1 for a token, 0 for padding; a numpy bool array
        becomes uint8, which the library refuses) they are a batch
        padded on the LEFT (accel_lm_generate_padded; Tokenizer.encode_batch(...,
        padding_side="left")), and every row continues as its prompt alone would, as
        transformers' generate with an attention mask: model.generate(**batch._asdict(), ...).
        InvalidArgumentError for right padding, a row without tokens, a mask of another shape."""
        opts = ffi.new("accel_generate_options *")
        _check(_lib.lib.accel_generate_options_init(opts, _lib.lib.ACCEL_GENERATE_OPTIONS_VERSION))
        _fill(opts, max_new_tokens=max_new_tokens)
        _fill(opts, temperature=temperature)
        _fill(opts, top_k=top_k)
        _fill(opts, eos_token_id=-1 if eos_token_id is None else eos_token_id)
        _fill(opts, seed=seed)
        opts.use_cache = 1 if use_cache else 0
        out = ffi.new("accel_tensor **")
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            if attention_mask is None:
                with _Args((input_ids,), convert=(0,)) as (ids,):
                    st = _lib.lib.accel_lm_generate(ctx, h, ids, opts, out)
            else:
                with _Args((input_ids, attention_mask), convert=(0, 1)) as (ids, mask):
                    st = _lib.lib.accel_lm_generate_padded(ctx, h, ids, mask, opts, out)
            _check(st, ctx)
            return Tensor._wrap(out[0])

    def add_lora(self, r: int = 8, lora_alpha: float = 8.0, lora_dropout: float = 0.0,
                 target_modules: Union[str, Sequence[str], None] = None, use_rslora: bool = False) -> "Model":
        """Adds LoRA adapters (accel_model_add_lora; PEFT's LoraConfig names): the base weights
        freeze and the model's parameters become the adapters. target_modules: names such as
        ["q_proj", "v_proj"], or "all-linear"; None: PEFT's default for the family. Call it
        before making the optimizer and before prepare. Returns the model."""
        opts = ffi.new("accel_lora_options *")
        _check(_lib.lib.accel_lora_options_init(opts, _lib.lib.ACCEL_LORA_OPTIONS_VERSION))
        _fill(opts, r=r)
        _fill(opts, alpha=lora_alpha)
        _fill(opts, dropout=lora_dropout)
        opts.use_rslora = 1 if use_rslora else 0
        keep = ffi.NULL
        if target_modules is not None:
            names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
            keep = ffi.new("char[]", _cpath(",".join(names), "target_modules"))
        opts.target_modules = keep
        self._call(_lib.lib.accel_model_add_lora, opts)
        return self

    def load_adapter(self, directory: Union[str, "os.PathLike[str]"]) -> "Model":
        """Loads a PEFT LoRA adapter directory onto this base model (accel_model_load_adapter),
        as peft.PeftModel.from_pretrained(base, directory). Returns the model."""
        self._call(_lib.lib.accel_model_load_adapter, _cpath(directory, "directory"))
        return self

    def save_adapter(self, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the LoRA adapters as a PEFT adapter directory (accel_save_adapter; every
        process calls it). Returns the path."""
        path = os.fspath(save_directory)
        self._call(_lib.lib.accel_save_adapter, _cpath(path))
        return path

    def save_pretrained(self, save_directory: Union[str, "os.PathLike[str]"]) -> str:
        """Writes a causal LM as a Hugging Face directory (config.json, model.safetensors) that
        transformers loads (accel_save_pretrained; every process calls it). Returns the path."""
        return self._acc.save_pretrained(self, save_directory)

    def forward(self, *inputs: ArrayLike) -> Tensor:
        """accel_model_forward; the output remembers this model's Accelerator (for the losses)."""
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            out = acc._out_a
            if len(inputs) == 1 and type(inputs[0]) is Tensor:  # the training loop's case, kept lean
                arr = acc._in_1
                arr[0] = _pin_all(inputs)[0]
                try:
                    st = _lib.lib.accel_model_forward(ctx, h, arr, 1, out)
                finally:
                    _unpin_all(inputs)
            else:
                with _Args(inputs, convert=range(len(inputs))) as handles:
                    arr = ffi.new("accel_tensor *[]", handles or [ffi.NULL])
                    st = _lib.lib.accel_model_forward(ctx, h, arr, len(handles), out)
            _check(st, ctx)
            return Tensor._wrap(out[0], acc)

    def train(self, mode: bool = True) -> "Model":
        """Training mode (dropout on, graphs recorded) or, with mode=False, evaluation mode."""
        self._call(_lib.lib.accel_model_set_training, 1 if mode else 0)
        self._training = bool(mode)
        return self

    def eval(self) -> "Model":
        """Evaluation mode (dropout off, no graph recorded): train(False)."""
        return self.train(False)

    @property
    def training(self) -> bool:
        """True in training mode (models start in it)."""
        return self._training

    def _counts(self) -> Tuple[int, int]:
        nt = ffi.new("size_t *")
        ne = ffi.new("int64_t *")
        self._call(_lib.lib.accel_model_num_parameters, nt, ne, with_ctx=False)
        return int(nt[0]), int(ne[0])

    @property
    def num_parameters(self) -> int:
        """The number of scalar parameters."""
        return self._counts()[1]

    @property
    def num_parameter_tensors(self) -> int:
        """The number of parameter tensors."""
        return self._counts()[0]

    def parameter_names(self) -> List[str]:
        """The parameters' names in order ("layers.0.weight", ...)."""
        out = ffi.new("const char **")
        names = []
        for i in range(self.num_parameter_tensors):
            self._call(_lib.lib.accel_model_parameter_name, i, out, with_ctx=False)
            names.append(ffi.string(out[0]).decode())
        return names

    def parameter(self, index: int) -> Tensor:
        """A host copy of parameter `index` (fp32 master weights). Under ZeRO a collective."""
        out = ffi.new("accel_tensor **")
        self._call(_lib.lib.accel_model_parameter, _int(index, "index"), out)
        return Tensor._wrap(out[0])

    def parameter_grad(self, index: int) -> Tensor:
        """A host copy of parameter `index`'s gradient (fp32) as the next step will apply it:
        unscaled, averaged over the processes (gathered under ZeRO: a collective). Read it
        after the accumulation's last backward and before step."""
        out = ffi.new("accel_tensor **")
        self._call(_lib.lib.accel_model_parameter_grad, _int(index, "index"), out)
        return Tensor._wrap(out[0])

    def named_parameters(self) -> List[Tuple[str, "np.ndarray"]]:
        """(name, numpy copy) for every parameter tensor, e.g. ("layers.0.weight", array)."""
        result = []
        for i, name in enumerate(self.parameter_names()):
            with self.parameter(i) as t:
                result.append((name, t.numpy()))
        return result

    def parameters(self) -> List["np.ndarray"]:
        """numpy copies of the parameters (reading, not training: the optimizer owns them)."""
        return [a for _, a in self.named_parameters()]

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the weights as safetensors (or TorchScript for a path ending in .pt)."""
        return self._acc.save_model(self, path)


class CausalLMOutput(NamedTuple):
    """What Model.lm returns (transformers' CausalLMOutput fields)."""
    loss: Optional[Tensor]   # the mean over the real targets (None without labels)
    logits: Tensor           # [batch, seq, vocab], fp32
    num_tokens: int          # the real targets the loss averages (0 without labels)


class StepResult(NamedTuple):
    """What accel_step did (accel_step_result)."""
    stepped: bool          # the optimizer really stepped
    skipped: bool          # an fp16 step skipped for inf/NaN gradients
    sync_step: bool        # a gradient-synchronising (real or skipped) step
    loss_scale: float      # the loss scale after the call (1 unless fp16)
    optimizer_steps: int   # real optimizer steps so far
    micro_steps: int       # backward calls counted so far


class Optimizer(_Child):
    """An optimizer over all the parameters of a model. Make one with accel.SGD, accel.AdamW or
    accel.LAMB. step() calls accel_step; zero_grad() is a no-op (accel_step zeroes the gradients)."""

    _order = 1
    _destroy = "optimizer"

    def _create(self, model: Model, kind: str, fields: Dict[str, float]) -> None:
        if not isinstance(model, Model):
            raise TypeError(f"an optimizer takes an accel.Model, got {type(model).__name__}")
        opts = ffi.new(f"accel_{kind}_options *")
        init = {"sgd": _lib.lib.accel_sgd_options_init, "adamw": _lib.lib.accel_adamw_options_init,
                "lamb": _lib.lib.accel_lamb_options_init, "adafactor": _lib.lib.accel_adafactor_options_init,}[kind]
        create = {"sgd": _lib.lib.accel_optimizer_create_sgd, "adamw": _lib.lib.accel_optimizer_create_adamw,
                  "lamb": _lib.lib.accel_optimizer_create_lamb, "adafactor": _lib.lib.accel_optimizer_create_adafactor,}[kind]
        _check(init(opts, getattr(_lib.lib, f"ACCEL_{kind.upper()}_OPTIONS_VERSION")))
        _fill(opts, **fields)
        _Child.__init__(self, model._acc, create, model, opts, parent=model)
        self.model = model

    def step(self) -> StepResult:
        """accel_step (Accelerator.step): ends a micro-batch; on a real step the optimizer steps,
        the scheduler advances and the gradients are zeroed."""
        with self._acc._lock:
            self._p()
            return self._acc.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """A no-op, accepted for Accelerate/torch code: accel_step already zeroes the gradients."""

    @property
    def lr(self) -> float:
        """The current learning rate (accel_optimizer_lr)."""
        return float(self._get(_lib.lib.accel_optimizer_lr, "double *"))


class SGD(Optimizer):
    """torch.optim.SGD's arguments (accel_optimizer_create_sgd)."""

    def __init__(self, model: Model, lr: float = 0.01, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        self._create(model, "sgd", {"lr": lr, "momentum": momentum, "dampening": dampening,
                                    "weight_decay": weight_decay, "nesterov": 1 if nesterov else 0})


class AdamW(Optimizer):
    """torch.optim.AdamW's arguments (accel_optimizer_create_adamw); weight decay is decoupled."""

    def __init__(self, model: Model, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        self._create(model, "adamw", {"lr": lr, "beta1": betas[0], "beta2": betas[1],
                                      "eps": eps, "weight_decay": weight_decay})


class LAMB(Optimizer):
    """LAMB (accel_optimizer_create_lamb): AdamW's update rescaled per tensor by the trust ratio.
    Not under ZeRO (prepare raises UnsupportedError)."""

    def __init__(self, model: Model, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01) -> None:
        self._create(model, "lamb", {"lr": lr, "beta1": betas[0], "beta2": betas[1],
                                     "eps": eps, "weight_decay": weight_decay})


class Adafactor(Optimizer):
    """Adafactor (accel_optimizer_create_adafactor) with transformers' Adafactor arguments and
    defaults: factored second moments, relative step sizes unless lr is given with
    relative_step=False. Not under ZeRO (prepare raises UnsupportedError)."""

    def __init__(self, model: Model, lr: Optional[float] = None, eps: Tuple[float, float] = (1e-30, 1e-3),
                 clip_threshold: float = 1.0, decay_rate: float = -0.8, beta1: Optional[float] = None,
                 weight_decay: float = 0.0, scale_parameter: bool = True, relative_step: bool = True,
                 warmup_init: bool = False) -> None:
        self._create(model, "adafactor", {
            "lr": 0.0 if lr is None else lr, "eps1": eps[0], "eps2": eps[1],
            "clip_threshold": clip_threshold, "decay_rate": decay_rate,
            "beta1": 0.0 if beta1 is None else float(beta1), "weight_decay": weight_decay,
            "scale_parameter": 1 if scale_parameter else 0, "relative_step": 1 if relative_step else 0,
            "warmup_init": 1 if warmup_init else 0})


class Scheduler(_Child):
    """A learning-rate schedule (constant, linear or cosine, with linear warm-up) driving an
    optimizer. It advances inside accel_step on real optimizer steps: step() is a no-op."""

    _order = 0
    _destroy = "scheduler"

    def __init__(self, optimizer: Optimizer, kind: Union[Schedule, str] = "constant", warmup_steps: int = 0,
                 total_steps: int = 0, min_lr_ratio: float = 0.0) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"a scheduler takes an accel.Optimizer, got {type(optimizer).__name__}")
        opts = ffi.new("accel_scheduler_options *")
        _check(_lib.lib.accel_scheduler_options_init(opts, _lib.lib.ACCEL_SCHEDULER_OPTIONS_VERSION))
        _fill(opts, kind=_enum(Schedule, kind, "kind"))
        _fill(opts, warmup_steps=warmup_steps)
        _fill(opts, total_steps=total_steps)
        _fill(opts, min_lr_ratio=min_lr_ratio)
        _Child.__init__(self, optimizer._acc, _lib.lib.accel_scheduler_create, optimizer, opts, parent=optimizer)
        self.optimizer = optimizer

    def step(self) -> None:
        """A no-op, accepted for Accelerate/transformers code: accel_step advances the scheduler."""

    @property
    def steps(self) -> int:
        """Real optimizer steps taken (accel_scheduler_steps)."""
        return int(self._get(_lib.lib.accel_scheduler_steps, "int64_t *"))

    def get_last_lr(self) -> List[float]:
        """[the optimizer's current lr], as torch's schedulers return it."""
        return [self.optimizer.lr]


def get_constant_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int = 0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then the base lr."""
    return Scheduler(optimizer, "constant", num_warmup_steps, 0)


def get_linear_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    min_lr_ratio: float = 0.0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then linear decay to min_lr_ratio * lr."""
    return Scheduler(optimizer, "linear", num_warmup_steps, num_training_steps, min_lr_ratio)


def get_cosine_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    min_lr_ratio: float = 0.0) -> Scheduler:
    """transformers' function of the same name: linear warm-up, then half a cosine to min_lr_ratio * lr."""
    return Scheduler(optimizer, "cosine", num_warmup_steps, num_training_steps, min_lr_ratio)
