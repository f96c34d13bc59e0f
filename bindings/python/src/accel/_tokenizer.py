"""Tokenizers: Tokenizer (accel_tokenizer_*), text to the ids a model was trained with and
back, from a Hugging Face tokenizer.json or a SentencePiece .model, without Python's
tokenizers, and conversations rendered with the model's chat template (apply_chat); and
BatchEncoding, what Tokenizer.encode_batch returns."""

from __future__ import annotations

import array
import operator
import os
import threading
from typing import (Any, Callable, Iterable, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple, Union,
                    overload)

from . import _lib
from ._errors import ClosedError, InvalidArgumentError, InvalidStateError, Status, _check
from ._ffi import ffi
from ._lib import _NoCopy
from ._options import ChatFormat, DType, Side, SpecialToken, _enum
from ._tensor import Tensor
from ._util import _cpath, _fill, _overflow

#: What encode takes: str (encoded as UTF-8) or bytes-like (passed as they are, valid UTF-8 or not).
Text = Union[str, bytes, bytearray, memoryview]
_TEXT_TYPES = (str, bytes, bytearray, memoryview)
_INT_DTYPES = (DType.INT64, DType.INT32, DType.UINT8, DType.INT8)


class BatchEncoding(NamedTuple):
    """What Tokenizer.encode_batch returns: two int64 host tensors [texts, T], the ids padded as
    asked and the attention mask (1 for a token, 0 for padding). The names are the arguments of
    model(input_ids=..., attention_mask=...): `model(**batch._asdict())`."""
    input_ids: Tensor
    attention_mask: Tensor


def _text(text: Any, what: str) -> bytes:
    """The bytes of a text for C: a str as UTF-8 (a lone surrogate becomes the bytes that
    replace_invalid_utf8 then handles), bytes-like objects as they are; any other type is
    InvalidArgumentError."""
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    if isinstance(text, bytes):
        return text
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                               f"{what} must be str or bytes, not {type(text).__name__}")


def _id_array(ids: Any, what: str) -> "array.array[int]":
    """Token ids as a contiguous int64 array: a 1-D integer Tensor or numpy array, or any
    iterable of integers (Python or numpy ints). Anything else, and an id int64_t cannot hold,
    is InvalidArgumentError (an id outside the vocabulary is the library's)."""
    if isinstance(ids, Tensor):
        shape, dtype = ids.shape, ids.dtype
        if len(shape) != 1:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"{what}: a tensor of shape {shape}: one sequence is 1-D (batch_decode takes 2-D)")
        if dtype not in _INT_DTYPES:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"{what}: a {dtype.name.lower()} tensor: token ids are integers")
        out = array.array("q", bytes(8 * shape[0]))
        if shape[0]:
            ids.copy_to(out, dtype=DType.INT64)
        return out
    if isinstance(ids, _TEXT_TYPES):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{what} must be a sequence of integer token ids, not {type(ids).__name__}")
    try:
        values = [operator.index(v) for v in ids]
    except TypeError:
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"{what} must be a 1-D sequence of integer token ids (a list, a numpy array or an integer Tensor), "
            f"got {type(ids).__name__}") from None
    try:
        return array.array("q", values)
    except OverflowError as exc:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{what}: an id does not fit in int64_t ({exc})") from None


def _encode_options(add_special_tokens: bool, replace_invalid_utf8: bool, max_length: Optional[int],
                    truncation_side: Union[Side, str, int], padding_side: Union[Side, str, int] = Side.RIGHT,
                    pad_to_max_length: bool = False, pad_to_multiple_of: Optional[int] = 0,
                    pad_id: Optional[int] = None) -> Any:
    """An accel_encode_options filled by accel_encode_options_init, then the arguments (None:
    the library's default: no truncation, no rounding, the tokenizer's padding id)."""
    opts = ffi.new("accel_encode_options *")
    _check(_lib.lib.accel_encode_options_init(opts, _lib.lib.ACCEL_ENCODE_OPTIONS_VERSION))
    opts.add_special_tokens = 1 if add_special_tokens else 0
    opts.replace_invalid_utf8 = 1 if replace_invalid_utf8 else 0
    _fill(opts, max_length=0 if max_length is None else max_length)
    _fill(opts, truncation_side=_enum(Side, truncation_side, "truncation_side"))
    _fill(opts, padding_side=_enum(Side, padding_side, "padding_side"))
    opts.pad_to_max_length = 1 if pad_to_max_length else 0
    _fill(opts, pad_to_multiple_of=0 if pad_to_multiple_of is None else pad_to_multiple_of)
    if pad_id is not None:
        _fill(opts, pad_id=pad_id)
    return opts


def _int64_list(t: Tensor) -> List[int]:
    """The elements of an int64 tensor as Python ints (no numpy needed); closes the tensor."""
    with t:
        n = t.numel
        if n == 0:
            return []
        out = array.array("q", bytes(8 * n))
        t.copy_to(out)
        return out.tolist()


#: One message of a conversation: a (role, content) pair or a mapping with "role" and "content"
#: (transformers' {"role": "user", "content": "..."}; other keys are ignored).
ChatMessage = Union[Tuple[Text, Text], Sequence[Text], Mapping[str, Any]]


def _chat_field(value: Any, what: str) -> bytes:
    """A role or content for C: str (UTF-8) or bytes-like, without a NUL byte (C would see a
    shorter string); text that is not UTF-8 is the library's to refuse, naming the message."""
    raw = _text(value, what)
    if b"\0" in raw:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{what} contains a NUL byte: {value!r} (C would see a shorter string)")
    return raw


def _chat_messages(messages: Any) -> List[Tuple[bytes, bytes]]:
    """(role, content) bytes of each message of a conversation: an iterable of (role, content)
    pairs or of mappings with "role" and "content". Anything else is InvalidArgumentError
    naming the message."""
    if isinstance(messages, _TEXT_TYPES) or isinstance(messages, Mapping):
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"messages must be a sequence of messages (each a (role, content) pair or a dict with 'role' and "
            f"'content'), not one {type(messages).__name__}: wrap it in a list")
    try:
        items = list(messages)
    except TypeError:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"messages must be a sequence of messages, not {type(messages).__name__}") from None
    out = []
    for i, m in enumerate(items):
        what = f"messages[{i}]"
        if isinstance(m, Mapping):
            missing = [k for k in ("role", "content") if k not in m]
            if missing:
                raise InvalidArgumentError(
                    Status.INVALID_ARGUMENT,
                    f"{what} has no {missing[0]!r} key (a message is {{'role': ..., 'content': ...}})")
            role, content = m["role"], m["content"]
        elif isinstance(m, _TEXT_TYPES):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"{what} is a {type(m).__name__}: a message is a (role, content) pair or a "
                                       "dict with 'role' and 'content'")
        else:
            try:
                role, content = m
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    Status.INVALID_ARGUMENT,
                    f"{what} must be a (role, content) pair or a dict with 'role' and 'content', got "
                    f"{type(m).__name__}") from None
        out.append((_chat_field(role, what + ".role"), _chat_field(content, what + ".content")))
    return out


class Tokenizer(_NoCopy):
    """A tokenizer (accel_tokenizer): Hugging Face tokenizer.json (byte-level BPE as GPT-2,
    Llama 3 and Qwen2 publish it, or BPE with byte fallback as Llama 2, Mistral, Gemma and
    Phi-3 do) or a SentencePiece .model, giving the ids Hugging Face tokenizers (or
    SentencePiece) gives.

        tok = accel.Tokenizer("path/to/model_dir")    # or tokenizer.json, or tokenizer.model
        ids = tok.encode("Hello world")                # [1, 15043, 3186] (list of int)
        tok.decode(ids, skip_special_tokens=True)      # "Hello world"
        batch = tok.encode_batch(["a", "b c"])         # BatchEncoding(input_ids, attention_mask)
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)

    It is immutable: any number of threads may use it at once (cffi releases the GIL during
    each call). It is independent of any Accelerator. Release it with close(), `with` or the
    garbage collector; a close() while other threads are using it takes effect when their
    calls return, and later calls raise ClosedError."""

    __slots__ = ("_h", "_lock", "_uses", "_closing", "path", "__weakref__")
    _copy_hint = ("load it again with accel.Tokenizer(path) (a Tokenizer is immutable: threads may share "
                  "one)")
    _h: Any
    _lock: threading.Lock
    _uses: int
    _closing: bool
    path: str

    def __init__(self, path: Union[str, bytes, "os.PathLike[Any]"]) -> None:
        """Loads a tokenizer (accel_tokenizer_load) from a tokenizer.json, a SentencePiece
        .model, or a model directory holding tokenizer.json (preferred) or tokenizer.model;
        tokenizer_config.json and special_tokens_map.json beside it name the special tokens.
        Raises IOError for a missing file, FormatError for a file that is not a tokenizer,
        UnsupportedError for a model type or component this version lacks (Unigram,
        WordPiece, ...)."""
        if getattr(self, "_lock", None) is not None:
            raise InvalidStateError(Status.INVALID_STATE,
                                    "Tokenizer.__init__: this Tokenizer is already loaded: make a new one")
        self._h = None
        self._lock = threading.Lock()  # guards _h, _uses and _closing (held only for a few bytecodes)
        self._uses = 0
        self._closing = False
        raw = _cpath(path)
        self.path = os.fsdecode(raw)
        out = ffi.new("accel_tokenizer **")
        _check(_lib.lib.accel_tokenizer_load(raw, out))  # accel_last_error(NULL)
        self._h = out[0]

    @classmethod
    def load(cls, path: Union[str, bytes, "os.PathLike[Any]"]) -> "Tokenizer":
        """Tokenizer(path)."""
        return cls(path)

    from_pretrained = load  # Hugging Face's name: AutoTokenizer.from_pretrained(dir)

    # ---- the handle, pinned for each call -------------------------------------------------

    def _acquire(self) -> Any:
        """The handle, pinned for one call; ClosedError once closed."""
        with self._lock:
            if self._h is None or self._closing:
                raise ClosedError("this Tokenizer is closed")
            self._uses += 1
            return self._h

    def _release(self) -> None:
        """Unpins; the last call to return after a close() releases the tokenizer."""
        with self._lock:
            self._uses -= 1
            if not self._closing or self._uses or self._h is None:
                return
            h, self._h = self._h, None
        _lib.lib.accel_tokenizer_destroy(h)

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """fn(handle, *args), the handle pinned; raises the call's error (thread-local message)."""
        h = self._acquire()
        try:
            try:
                st = fn(h, *args)
            except OverflowError as exc:  # an int C cannot hold: refused by cffi before the call
                raise _overflow(fn, exc) from None
            _check(st)
        finally:
            self._release()

    def _int64(self, fn: Callable[..., int], *args: Any) -> int:
        """out[0] of fn(handle, *args, out) for an int64_t *out."""
        out = ffi.new("int64_t *")
        self._call(fn, *args, out)
        return int(out[0])

    # ---- the vocabulary ------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of ids: one more than the largest id of the vocabulary and the added
        tokens (accel_tokenizer_vocab_size)."""
        out = ffi.new("int64_t *")
        self._call(_lib.lib.accel_tokenizer_vocab_size, out)
        return int(out[0])

    def __len__(self) -> int:
        """vocab_size (as len() of a Hugging Face tokenizer)."""
        return self.vocab_size

    def special_id(self, which: Union[SpecialToken, str, int]) -> Optional[int]:
        """The id of a special token ("bos", "eos", "pad", "unk" or SpecialToken), None when the
        tokenizer has none (accel_tokenizer_special_id)."""
        code = _enum(SpecialToken, which, "which")
        value = self._int64(_lib.lib.accel_tokenizer_special_id, int(code))
        return None if value < 0 else value

    @property
    def bos_id(self) -> Optional[int]:
        """The beginning-of-sequence token's id, None when there is none."""
        return self.special_id(SpecialToken.BOS)

    @property
    def eos_id(self) -> Optional[int]:
        """The end-of-sequence token's id (generate's eos_token_id), None when there is none."""
        return self.special_id(SpecialToken.EOS)

    @property
    def pad_id(self) -> Optional[int]:
        """The padding token's id, None when there is none (encode_batch then pads with 0)."""
        return self.special_id(SpecialToken.PAD)

    @property
    def unk_id(self) -> Optional[int]:
        """The unknown token's id, None when there is none."""
        return self.special_id(SpecialToken.UNK)

    def token_to_id(self, token: Union[str, bytes]) -> Optional[int]:
        """The id of the token whose text is `token` (byte-level tokens in their mapped form,
        "Ġthe"), None when there is none (accel_tokenizer_token_to_id). A NUL byte in it is
        InvalidArgumentError (C would see a shorter token)."""
        if not isinstance(token, (str, bytes)):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"token must be str or bytes, not {type(token).__name__}")
        raw = _text(token, "token")
        if b"\0" in raw:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"token contains a NUL byte: {token!r}")
        value = self._int64(_lib.lib.accel_tokenizer_token_to_id, raw)
        return None if value < 0 else value

    def _token(self, id: int) -> Tuple[str, bool]:
        """(text, is special) of token `id`; the text is copied while the tokenizer is pinned
        (the library's string lives as long as the tokenizer)."""
        try:
            value = operator.index(id)
        except TypeError:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"id must be an integer, not {type(id).__name__}") from None
        out = ffi.new("const char **")
        special = ffi.new("int *")
        h = self._acquire()
        try:
            try:
                st = _lib.lib.accel_tokenizer_id_to_token(h, value, out, special)
            except OverflowError as exc:  # an id int64_t cannot hold
                raise _overflow(_lib.lib.accel_tokenizer_id_to_token, exc) from None
            _check(st)
            text = ffi.string(out[0]).decode("utf-8", "replace")
        finally:
            self._release()
        return text, bool(special[0])

    def id_to_token(self, id: int) -> str:
        """The text of token `id` (accel_tokenizer_id_to_token; byte-level tokens in their mapped
        form). InvalidArgumentError for an id outside [0, vocab_size)."""
        return self._token(id)[0]

    def is_special(self, id: int) -> bool:
        """Whether token `id` is a special token (one decode's skip_special_tokens drops).
        InvalidArgumentError for an id outside [0, vocab_size)."""
        return self._token(id)[1]

    # ---- encoding ------------------------------------------------------------------------

    @overload
    def encode(self, text: Text, *, add_special_tokens: bool = ..., replace_invalid_utf8: bool = ...,
               max_length: Optional[int] = ..., truncation_side: Union[Side, str] = ...,
               return_tensor: Literal[False] = ...) -> List[int]: ...

    @overload
    def encode(self, text: Text, *, add_special_tokens: bool = ..., replace_invalid_utf8: bool = ...,
               max_length: Optional[int] = ..., truncation_side: Union[Side, str] = ...,
               return_tensor: Literal[True]) -> Tensor: ...

    def encode(self, text: Text, *, add_special_tokens: bool = True, replace_invalid_utf8: bool = False,
               max_length: Optional[int] = 0, truncation_side: Union[Side, str] = "right",
               return_tensor: bool = False) -> Union[List[int], Tensor]:
        """The ids of `text` (accel_tokenizer_encode): a list of ints, or with return_tensor=True
        the int64 host Tensor [n] the library made.

        text: a str (encoded as UTF-8; it may hold NUL characters) or bytes (passed as they are).
        Special tokens written in the text ("<|im_start|>") become their ids (a SentencePiece
        .model reads them as text, as SentencePiece does). add_special_tokens: the
        post-processor's tokens (Llama's BOS, ...), as Hugging Face's. replace_invalid_utf8:
        bytes that are not UTF-8 become U+FFFD first (as bytes.decode("utf-8", "replace"));
        without it they are InvalidArgumentError naming the byte offset. max_length > 0
        truncates to that many ids, the special tokens included, on truncation_side ("right":
        the end, or "left"); 0 or None: no truncation."""
        raw = _text(text, "text")
        opts = _encode_options(add_special_tokens, replace_invalid_utf8, max_length, truncation_side)
        out = ffi.new("accel_tensor **")
        self._call(_lib.lib.accel_tokenizer_encode, raw, len(raw), opts, out)
        t = Tensor._wrap(out[0])
        return t if return_tensor else _int64_list(t)

    def encode_batch(self, texts: Any, *, add_special_tokens: bool = True, replace_invalid_utf8: bool = False,
                     max_length: Optional[int] = 0, truncation_side: Union[Side, str] = "right",
                     padding_side: Union[Side, str] = "right", pad_to_max_length: bool = False,
                     pad_to_multiple_of: Optional[int] = 0, pad_id: Optional[int] = None) -> BatchEncoding:
        """Encodes a sequence of texts (str or bytes each, as encode's; at least one) at once,
        several threads for large batches (accel_tokenizer_encode_batch), into
        BatchEncoding(input_ids, attention_mask): int64 host tensors [len(texts), T], what
        model(input_ids=, attention_mask=) and model.generate take.

        The other arguments are encode's, and: padding_side ("right", or "left" for generation
        from a batch of prompts); T is the longest row, or max_length with pad_to_max_length
        (which needs max_length > 0), rounded up to a multiple of pad_to_multiple_of (0 or
        None: not rounded); pad_id: the padding id (None: the tokenizer's padding token, else
        0). Errors name the text's index."""
        if isinstance(texts, _TEXT_TYPES):
            raise InvalidArgumentError(
                Status.INVALID_ARGUMENT,
                f"texts must be a sequence of texts, not one {type(texts).__name__}: use encode(text) or "
                "encode_batch([text])")
        try:
            items = list(texts)
        except TypeError:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"texts must be a sequence of str or bytes, not {type(texts).__name__}") from None
        if not items:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       "texts is empty (a batch holds at least one text)")
        raws = [_text(t, f"texts[{i}]") for i, t in enumerate(items)]
        opts = _encode_options(add_special_tokens, replace_invalid_utf8, max_length, truncation_side, padding_side,
                               pad_to_max_length, pad_to_multiple_of, pad_id)
        keep = [ffi.from_buffer(r) for r in raws]  # the bytes, not copied; alive until the call returns
        ptrs = ffi.new("const char *[]", keep)
        lengths = ffi.new("size_t[]", [len(r) for r in raws])
        ids = ffi.new("accel_tensor **")
        mask = ffi.new("accel_tensor **")
        self._call(_lib.lib.accel_tokenizer_encode_batch, ptrs, lengths, len(raws), opts, ids, mask)
        return BatchEncoding(Tensor._wrap(ids[0]), Tensor._wrap(mask[0]))

    # ---- decoding ------------------------------------------------------------------------

    def _decode(self, arr: "array.array[int]", skip_special_tokens: bool) -> str:
        n = len(arr)
        ptr = ffi.from_buffer("int64_t[]", arr) if n else ffi.NULL
        skip = 1 if skip_special_tokens else 0
        length = ffi.new("size_t *")
        h = self._acquire()
        try:
            _check(_lib.lib.accel_tokenizer_decode(h, ptr, n, skip, ffi.NULL, 0, length))  # the size
            capacity = int(length[0]) + 1
            buf = ffi.new("char[]", capacity)
            _check(_lib.lib.accel_tokenizer_decode(h, ptr, n, skip, buf, capacity, length))
            data = bytes(ffi.buffer(buf, int(length[0])))  # the text may hold NUL bytes (byte fallback's <0x00>)
        finally:
            self._release()
        return data.decode("utf-8", "replace")

    def decode(self, ids: Any, *, skip_special_tokens: bool = False) -> str:
        """The text of `ids` (accel_tokenizer_decode): a list of ints, a 1-D integer numpy array
        or Tensor. Special tokens are dropped with skip_special_tokens; bytes that do not form
        UTF-8 become U+FFFD, as Hugging Face's decode. InvalidArgumentError for an id outside
        [0, vocab_size) (its index named)."""
        return self._decode(_id_array(ids, "ids"), skip_special_tokens)

    def batch_decode(self, sequences: Any, *, skip_special_tokens: bool = False) -> List[str]:
        """decode of each row: of a 2-D integer Tensor (model.generate's output, encode_batch's
        input_ids) or numpy array, or of a sequence of id sequences."""
        if isinstance(sequences, Tensor):
            shape = sequences.shape
            if len(shape) != 2:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"sequences: a tensor of shape {shape}: batch_decode takes 2-D (decode 1-D)")
            if sequences.dtype not in _INT_DTYPES:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                           f"sequences: a {sequences.dtype.name.lower()} tensor: token ids are integers")
            rows, cols = shape
            flat = array.array("q", bytes(8 * rows * cols))
            if rows * cols:
                sequences.copy_to(flat, dtype=DType.INT64)
            return [self._decode(flat[r * cols:(r + 1) * cols], skip_special_tokens) for r in range(rows)]
        if isinstance(sequences, _TEXT_TYPES):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"sequences must be a sequence of id sequences, not {type(sequences).__name__}")
        try:
            rows_in = list(sequences)
        except TypeError:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"sequences must be a sequence of id sequences, not {type(sequences).__name__}") from None
        return [self._decode(_id_array(row, f"sequences[{i}]"), skip_special_tokens) for i, row in enumerate(rows_in)]

    # ---- chat templates ------------------------------------------------------------------

    def apply_chat(self, messages: Iterable[ChatMessage], *,
                   chat_format: Union[ChatFormat, str, int] = ChatFormat.AUTO,
                   add_generation_prompt: bool = False) -> str:
        """The conversation rendered as the model's chat template renders it
        (accel_tokenizer_apply_chat; transformers' apply_chat_template(messages, tokenize=False)).

        messages: a sequence of (role, content) pairs or of dicts with "role" and "content" (other
        keys ignored); roles are "system", "user" or "assistant", contents str (or UTF-8 bytes).
        An empty sequence renders what the template renders for no message (often "").
        chat_format: "auto" (the template in tokenizer_config.json, recognised by its markers),
        "chatml", "llama3", "gemma", "phi3", "mistral" or a ChatFormat. add_generation_prompt:
        end with the assistant's header, for generation. Encode the text with
        add_special_tokens=False: the template holds the BOS where the family has one.

        InvalidArgumentError for a message the template refuses (Gemma: a system role; Gemma
        and Mistral: roles that do not alternate user/assistant), "auto" without a
        chat_template, a format that needs a BOS or EOS the tokenizer lacks, a content that is
        not UTF-8 or holds a NUL byte, arguments of the wrong type; UnsupportedError for a
        chat_template that is none of the formats."""
        fmt = int(_enum(ChatFormat, chat_format, "chat_format"))
        raws = _chat_messages(messages)
        n = len(raws)
        keep: List[Any] = []  # the strings, alive until the calls return
        arr = ffi.new("accel_chat_message[]", n) if n else ffi.NULL
        for i, (role, content) in enumerate(raws):
            r = ffi.new("char[]", role)
            c = ffi.new("char[]", content)
            keep += [r, c]
            arr[i].role = r
            arr[i].content = c
        gen = 1 if add_generation_prompt else 0
        length = ffi.new("size_t *")
        h = self._acquire()
        try:
            _check(_lib.lib.accel_tokenizer_apply_chat(h, fmt, arr, n, gen, ffi.NULL, 0, length))  # the size
            capacity = int(length[0]) + 1
            buf = ffi.new("char[]", capacity)
            _check(_lib.lib.accel_tokenizer_apply_chat(h, fmt, arr, n, gen, buf, capacity, length))
            data = bytes(ffi.buffer(buf, int(length[0])))
        finally:
            self._release()
        del keep
        return data.decode("utf-8", "replace")

    # ---- lifetime ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._h is None or self._closing

    def close(self) -> None:
        """Releases the tokenizer (accel_tokenizer_destroy). Idempotent; any thread. Calls other
        threads are making finish first (the release happens when the last returns); calls
        started afterwards raise ClosedError."""
        with self._lock:
            if self._h is None:
                return
            if self._uses:
                self._closing = True
                return
            h, self._h = self._h, None
        _lib.lib.accel_tokenizer_destroy(h)

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is None:
                return
            if not self._lock.acquire(blocking=False):
                return  # cannot happen: a running call holds a reference to the tokenizer
            try:
                h, self._h = self._h, None
            finally:
                self._lock.release()
            if h is not None:
                _lib.lib.accel_tokenizer_destroy(h)
        except BaseException:  # never raise from a finalizer (e.g. at interpreter shutdown)
            pass

    def __enter__(self) -> "Tokenizer":
        with self._lock:
            if self._h is None or self._closing:
                raise ClosedError("this Tokenizer is closed")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            return f"<accel.Tokenizer {self.path!r} vocab_size={self.vocab_size}>"
        except ClosedError:
            return f"<accel.Tokenizer {self.path!r} closed>"
