"""Data: DataLoader (in-memory datasets, causal-LM token batches, fine-tuning batches from a
JSONL file) and packed token files."""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Union, TYPE_CHECKING

from . import _lib
from ._errors import _check
from ._ffi import ffi
from ._handle import _Args, _Child
from ._options import ChatFormat, Side, _enum
from ._tensor import ArrayLike, Tensor
from ._tokenizer import Tokenizer
from ._util import _cpath, _fill, _int, _overflow

if TYPE_CHECKING:
    from ._context import Accelerator  # bound at run time by _context (annotations only)


class DataLoader(_Child):
    """Batches of an in-memory dataset (inputs[i], targets[i]); both are copied at creation.

    Iterating runs ONE epoch: `for x, y in loader:` (or `for x in loader:` without targets);
    the next iteration is the next epoch. Breaking out leaves the position where it was."""

    _order = 2
    _destroy = "dataloader"

    def __init__(self, accelerator: "Accelerator", inputs: ArrayLike, targets: Optional[ArrayLike] = None, *,
                 batch_size: int = 1, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 even_batches: Optional[bool] = None, split_batches: Optional[bool] = None,
                 iterable: bool = False) -> None:
        """even_batches/split_batches left at None take the Accelerator's (Accelerate's arguments).
        iterable=True reads the samples as a stream, in their order, sharded as Accelerate shards
        an IterableDataset (IterableDatasetShard); it needs shuffle=False."""
        opts = self._options(accelerator, batch_size, shuffle, seed, drop_last, even_batches, split_batches,
                             iterable)
        with _Args((inputs, ffi.NULL if targets is None else targets), 
                   convert=(0,) if targets is None else (0, 1)) as (x, y):
            _Child.__init__(self, accelerator, _lib.lib.accel_dataloader_create, x, y, opts)
        self._has_targets = targets is not None
        self.batch_size = int(batch_size)

    @staticmethod
    def _options(accelerator: "Accelerator", batch_size: int, shuffle: bool, seed: int, drop_last: bool,
                 even_batches: Optional[bool], split_batches: Optional[bool], iterable: bool = False) -> Any:
        opts = ffi.new("accel_dataloader_options *")
        _check(_lib.lib.accel_dataloader_options_init(opts, _lib.lib.ACCEL_DATALOADER_OPTIONS_VERSION))
        _fill(opts, batch_size=batch_size)
        opts.shuffle = 1 if shuffle else 0
        _fill(opts, seed=seed)
        opts.drop_last = 1 if drop_last else 0
        opts.even_batches = 1 if (accelerator.even_batches if even_batches is None else even_batches) else 0
        opts.split_batches = 1 if (accelerator.split_batches if split_batches is None else split_batches) else 0
        opts.iterable = 1 if iterable else 0
        return opts

    @classmethod
    def for_lm(cls, accelerator: "Accelerator", tokens: ArrayLike, offsets: Optional[ArrayLike] = None, *,
               block_size: int = 0, max_length: int = 0, pad_id: int = 0, pad_to_multiple_of: int = 0,
               group_by_length: bool = False, padding_side: Union[Side, str] = "right", batch_size: int = 1,
               shuffle: bool = False, seed: int = 0, drop_last: bool = False, even_batches: Optional[bool] = None,
               split_batches: Optional[bool] = None, iterable: bool = False) -> "DataLoader":
        """Causal-LM batches (accel_lm_dataloader_create) over a 1-D token array: without
        offsets, fixed blocks of block_size tokens; with offsets ([sequences + 1], from 0 to
        len(tokens)), one sequence each, cut to max_length and batched with dynamic padding
        (to the longest of the batch, or a multiple of pad_to_multiple_of) on padding_side
        ("right" or "left"). Yields (input_ids, labels): labels are -100 at padding; pass both
        to model(input_ids=..., labels=...) (right padding needs no attention mask; with
        padding_side="left" pass attention_mask=loader.attention_mask() too). iterable=True:
        the sequences (or blocks) as a stream, as DataLoader's iterable (no shuffle, no
        group_by_length)."""
        lm = ffi.new("accel_lm_data_options *")
        _check(_lib.lib.accel_lm_data_options_init(lm, _lib.lib.ACCEL_LM_DATA_OPTIONS_VERSION))
        _fill(lm, block_size=block_size)
        _fill(lm, max_length=max_length)
        _fill(lm, pad_id=pad_id)
        _fill(lm, pad_to_multiple_of=pad_to_multiple_of)
        lm.group_by_length = 1 if group_by_length else 0
        _fill(lm, padding_side=_enum(Side, padding_side, "padding_side"))
        opts = cls._options(accelerator, batch_size, shuffle, seed, drop_last, even_batches, split_batches,
                            iterable)
        loader = object.__new__(cls)
        with _Args((tokens, ffi.NULL if offsets is None else offsets),
                   convert=(0,) if offsets is None else (0, 1)) as (t, o):
            _Child.__init__(loader, accelerator, _lib.lib.accel_lm_dataloader_create, t, o, lm, opts)
        loader._has_targets = True
        loader.batch_size = int(batch_size)
        return loader

    @classmethod
    def for_sft(cls, accelerator: "Accelerator", tokenizer: Tokenizer, path: Union[str, "os.PathLike[str]"], *,
                chat_format: Union[ChatFormat, str] = ChatFormat.AUTO, completion_only_loss: bool = True,
                add_eos: bool = True, max_length: Optional[int] = 0, packing: bool = False,
                padding_side: Union[Side, str] = "right", pad_to_multiple_of: Optional[int] = 0,
                pad_id: Optional[int] = None, batch_size: int = 1, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False, even_batches: Optional[bool] = None,
                split_batches: Optional[bool] = None, iterable: bool = False) -> "DataLoader":
        """Supervised fine-tuning batches from a JSONL file (accel_sft_dataloader_create), as
        TRL's SFTTrainer prepares them, tokenized once, here, with `tokenizer` (an
        accel.Tokenizer; the loader keeps no reference to it). Each non-blank line is an object
        with "messages" (a list of {"role", "content"}, rendered with chat_format as
        Tokenizer.apply_chat renders it), "prompt" and "completion", or "text".

        Yields (input_ids, labels), int64 [batch, T], padded to the batch's longest example
        (rounded up to a multiple of pad_to_multiple_of) on padding_side with pad_id (None:
        the tokenizer's padding token, else its EOS, else 0); labels are -100 on padding and,
        with completion_only_loss, everywhere but the completions and the assistant's turns
        (their end-of-turn token included). loader.attention_mask() is the batch's mask: pass
        model(input_ids=, attention_mask=, labels=), or train with
        acc.train_micro_batches(model, loader, "causal_lm"), which does. add_eos: "text" and
        prompt/completion examples end with the EOS token. max_length > 0 cuts each example
        (the end dropped); with packing=True the examples are concatenated and cut into blocks
        of max_length tokens. The loader options are DataLoader's.

        Errors: IOError for a missing file; FormatError naming the file and line ("data.jsonl:3")
        for a line that is not a JSON object, not UTF-8, or of none of the shapes;
        InvalidArgumentError for a file with no example, a conversation the chat format refuses
        (file and line named), negative max_length or pad_to_multiple_of, packing with
        max_length < 2, a pad_id outside the vocabulary; UnsupportedError for a chat_template
        of no known format. TypeError when tokenizer is not an accel.Tokenizer; ClosedError when
        it is closed."""
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"for_sft takes an accel.Tokenizer, got {type(tokenizer).__name__}")
        so = ffi.new("accel_sft_options *")
        _check(_lib.lib.accel_sft_options_init(so, _lib.lib.ACCEL_SFT_OPTIONS_VERSION))
        _fill(so, chat_format=_enum(ChatFormat, chat_format, "chat_format"))
        so.completion_only_loss = 1 if completion_only_loss else 0
        so.add_eos = 1 if add_eos else 0
        _fill(so, max_length=0 if max_length is None else max_length)
        so.packing = 1 if packing else 0
        _fill(so, padding_side=_enum(Side, padding_side, "padding_side"))
        _fill(so, pad_to_multiple_of=0 if pad_to_multiple_of is None else pad_to_multiple_of)
        if pad_id is not None:
            _fill(so, pad_id=pad_id)
        opts = cls._options(accelerator, batch_size, shuffle, seed, drop_last, even_batches, split_batches,
                            iterable)
        raw = _cpath(path)
        loader = object.__new__(cls)
        tok = tokenizer._acquire()  # pinned for the call: a close() from another thread waits for it
        try:
            _Child.__init__(loader, accelerator, _lib.lib.accel_sft_dataloader_create, tok, raw, so, opts)
        finally:
            tokenizer._release()
        loader._has_targets = True
        loader.batch_size = int(batch_size)
        return loader

    def next_batch(self) -> Any:
        """The next batch of the epoch ((x, y), or x without targets), or None at the end of the
        epoch (the loader then moves to the next epoch)."""
        acc = self._acc
        with acc._lock:
            ctx, h = self._p()
            xo, yo = acc._out_a, acc._out_b
            _check(_lib.lib.accel_dataloader_next(ctx, h, xo, yo), ctx)
            if xo[0] == ffi.NULL:
                return None
            x = Tensor._wrap(xo[0], acc)
            if not self._has_targets:
                return x
            return x, Tensor._wrap(yo[0], acc)

    def attention_mask(self) -> Tensor:
        """The attention mask of the batch the loader last returned (accel_dataloader_attention_mask):
        int64 [batch, T] on the Accelerator's device, 1 for a token, 0 for padding; what
        model(input_ids=, attention_mask=, labels=) takes beside the batch. For the causal-LM
        loaders (for_lm, for_sft); InvalidArgumentError for a loader of tensors (no mask),
        InvalidStateError before the first batch or after the end of an epoch (no batch).

            for input_ids, labels in loader:
                out = model(input_ids=input_ids, attention_mask=loader.attention_mask(), labels=labels)"""
        acc = self._acc
        out = ffi.new("accel_tensor **")
        with acc._lock:
            ctx, h = self._p()
            _check(_lib.lib.accel_dataloader_attention_mask(ctx, h, out), ctx)
            return Tensor._wrap(out[0], acc)

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches: (x, y), or x for a loader without targets."""
        self._p()
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def __len__(self) -> int:
        """Batches per epoch (this process's share once prepared)."""
        return int(self._get(_lib.lib.accel_dataloader_num_batches, "int64_t *"))

    @property
    def epoch(self) -> int:
        """The current epoch, 0-based (accel_dataloader_epoch)."""
        return int(self._get(_lib.lib.accel_dataloader_epoch, "int64_t *"))

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (>= 0) and rewinds to its first batch."""
        self._call(_lib.lib.accel_dataloader_set_epoch, _int(epoch, "epoch"), with_ctx=False)


def write_token_file(path: Union[str, "os.PathLike[str]"], tokens: ArrayLike, token_bytes: int = 2) -> None:
    """Writes a packed token file (accel_token_file_write): int64/int32 tokens as 2- or 4-byte
    unsigned integers after a small header. Replaces only nothing or an earlier token file."""
    with _Args((tokens,), convert=(0,)) as (t,):
        try:
            st = _lib.lib.accel_token_file_write(_cpath(path), t, _int(token_bytes, "token_bytes"))
        except OverflowError as exc:
            raise _overflow(_lib.lib.accel_token_file_write, exc) from None
        _check(st)


def read_token_file(path: Union[str, "os.PathLike[str]"]) -> Tensor:
    """Reads a packed token file (accel_token_file_read) into an int64 host tensor."""
    out = ffi.new("accel_tensor **")
    _check(_lib.lib.accel_token_file_read(_cpath(path), out))
    return Tensor._wrap(out[0])
