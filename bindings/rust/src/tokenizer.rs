//! Tokenizers (`accel_tokenizer_*`; docs/lm.md, "Tokenizers"): text to the ids a model was
//! trained with, and back, without Python.
//!
//! A Hugging Face `tokenizer.json` (BPE, byte-level as GPT-2, Llama 3, Qwen2 and SmolLM publish
//! it, or with byte fallback as Llama 2, Mistral, Gemma and Phi-3 do) gives the ids Hugging
//! Face `tokenizers` gives; a SentencePiece `.model` gives SentencePiece's own.
//!
//! [`Tokenizer::apply_chat`] renders a conversation ([`ChatMessage`]s, or `(role, content)`
//! pairs) with the model's chat template ([`ChatFormat`]), as transformers'
//! `apply_chat_template` does.
//!
//! A [`Tokenizer`] needs no context and borrows nothing. The library makes it immutable after
//! loading, so any number of threads may use one at once: it is `Send + Sync` (share it with
//! `&Tokenizer` in scoped threads, or an `Arc`).
use std::ffi::CStr;
use std::fmt;
use std::os::raw::{c_char, c_int};
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{check, Error, Result};
use crate::options::{ChatFormat, EncodeOptions, SpecialToken};
use crate::sys;
use crate::tensor::Tensor;
use crate::util::{cstring, path_cstring};

/// One message of a conversation (`accel_chat_message`, owned): a role, `"system"`, `"user"` or
/// `"assistant"`, and its content. [`Tokenizer::apply_chat`] also takes `(role, content)` pairs
/// of `&str` or `String` (any [`AsChatMessage`]).
///
/// ```
/// use accel::ChatMessage;
/// let conversation = vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi!")];
/// assert_eq!((conversation[1].role.as_str(), conversation[1].content.as_str()), ("user", "Hi!"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatMessage {
    /// `"system"`, `"user"` or `"assistant"`
    pub role: String,
    /// The message's text
    pub content: String,
}

impl ChatMessage {
    /// A message of any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }

    /// A `"system"` message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    /// A `"user"` message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    /// An `"assistant"` message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// A message of a conversation as [`Tokenizer::apply_chat`] reads it: a [`ChatMessage`], a
/// `(role, content)` pair of `&str` or `String`, or a reference to one of them.
pub trait AsChatMessage {
    /// `"system"`, `"user"` or `"assistant"`
    fn role(&self) -> &str;
    /// The message's text
    fn content(&self) -> &str;
}

impl AsChatMessage for ChatMessage {
    fn role(&self) -> &str {
        &self.role
    }
    fn content(&self) -> &str {
        &self.content
    }
}

impl<R: AsRef<str>, C: AsRef<str>> AsChatMessage for (R, C) {
    fn role(&self) -> &str {
        self.0.as_ref()
    }
    fn content(&self) -> &str {
        self.1.as_ref()
    }
}

impl<T: AsChatMessage + ?Sized> AsChatMessage for &T {
    fn role(&self) -> &str {
        (**self).role()
    }
    fn content(&self) -> &str {
        (**self).content()
    }
}

/// A loaded tokenizer (`accel_tokenizer`). `Send + Sync`: immutable after loading, usable by
/// any number of threads at once. Dropping it calls `accel_tokenizer_destroy`.
///
/// ```no_run
/// use accel::{EncodeOptions, Side, Tokenizer};
/// # fn main() -> accel::Result<()> {
/// let tok = Tokenizer::load("path/to/model")?; // tokenizer.json (or tokenizer.model) inside
/// let ids = tok.encode("Hello, world", &EncodeOptions::default())?; // BOS ... as the family adds it
/// assert_eq!(tok.decode(&ids, true)?, "Hello, world");
/// let opts = EncodeOptions::default().with_padding_side(Side::Left);
/// let (input_ids, attention_mask) = tok.encode_batch(&["a prompt", "another, longer prompt"], &opts)?;
/// # let _ = (input_ids, attention_mask);
/// # Ok(()) }
/// ```
pub struct Tokenizer {
    raw: NonNull<sys::accel_tokenizer>,
}

// SAFETY: accel.h: "A tokenizer is immutable after loading: any number of threads may use it at
// once." Every method takes `&self` and only reads it; `Drop` needs ownership, so no thread can
// use it while it is destroyed. accel_tokenizer_destroy may be called from any thread.
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

impl Tokenizer {
    /// Loads a tokenizer (`accel_tokenizer_load`) from `path`: a `tokenizer.json`, a
    /// SentencePiece `.model`, or a model directory holding `tokenizer.json` (preferred) or
    /// `tokenizer.model`. From a directory (or a file named `tokenizer.json` or `*.model` in
    /// one) `tokenizer_config.json` and `special_tokens_map.json` are read, when present, for
    /// the BOS, EOS, padding and unknown tokens and, for a `.model`, `add_bos_token` and
    /// `add_eos_token`.
    ///
    /// Errors (the message names the path, file or component): `Status::Io` for a missing file
    /// or a directory with neither file; `Status::Format` for a file that is not a tokenizer;
    /// `Status::Unsupported` for a model type other than BPE in tokenizer.json or a component
    /// this version lacks; `Status::InvalidArgument` for an empty path or one with a NUL byte.
    pub fn load(path: impl AsRef<Path>) -> Result<Tokenizer> {
        crate::ensure_version()?;
        let p = path_cstring(path.as_ref(), "path")?;
        let mut out = std::ptr::null_mut();
        // SAFETY: the C string outlives the call; `out` is a local out-parameter. Context-free:
        // the message is this thread's, read at once by `check`.
        check(unsafe { sys::accel_tokenizer_load(p.as_ptr(), &mut out) }, std::ptr::null())?;
        // SAFETY: on ACCEL_OK `out` is a new tokenizer that belongs to the caller.
        Ok(unsafe { Tokenizer::from_raw(out) }.expect("accel returned OK and a NULL tokenizer"))
    }

    /// Takes ownership of a raw tokenizer (`accel_tokenizer_load`'s `*out`).
    ///
    /// # Safety
    /// `raw` must be a live tokenizer that nothing else destroys.
    pub unsafe fn from_raw(raw: *mut sys::accel_tokenizer) -> Option<Tokenizer> {
        NonNull::new(raw).map(|raw| Tokenizer { raw })
    }

    /// The raw handle (still owned by this Tokenizer; do not destroy it).
    pub fn as_raw(&self) -> *mut sys::accel_tokenizer {
        self.raw.as_ptr()
    }

    /// Gives up ownership of the raw handle (the caller destroys it with
    /// `accel_tokenizer_destroy`).
    pub fn into_raw(self) -> *mut sys::accel_tokenizer {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The number of ids: one more than the largest id of the vocabulary and the added tokens
    /// (`accel_tokenizer_vocab_size`).
    pub fn vocab_size(&self) -> Result<i64> {
        let mut n = 0i64;
        // SAFETY: a live tokenizer (only read); a local out-parameter.
        check(unsafe { sys::accel_tokenizer_vocab_size(self.raw.as_ptr(), &mut n) }, std::ptr::null())?;
        Ok(n)
    }

    /// The id of a special token, or None when the tokenizer has none (tokenizer_config.json
    /// names none, or names a token that is not in the vocabulary) (`accel_tokenizer_special_id`).
    pub fn special_id(&self, which: SpecialToken) -> Result<Option<i64>> {
        let mut id = -1i64;
        // SAFETY: a live tokenizer (only read); a defined enum value; a local out-parameter.
        check(
            unsafe { sys::accel_tokenizer_special_id(self.raw.as_ptr(), which.to_raw(), &mut id) },
            std::ptr::null(),
        )?;
        Ok(if id >= 0 { Some(id) } else { None })
    }

    /// The beginning-of-sequence id (`special_id(SpecialToken::Bos)`).
    pub fn bos_id(&self) -> Result<Option<i64>> {
        self.special_id(SpecialToken::Bos)
    }

    /// The end-of-sequence id, generation's stop (`special_id(SpecialToken::Eos)`; for
    /// [`GenerateOptions::eos_token_id`](crate::GenerateOptions::eos_token_id)).
    pub fn eos_id(&self) -> Result<Option<i64>> {
        self.special_id(SpecialToken::Eos)
    }

    /// The padding id (`special_id(SpecialToken::Pad)`).
    pub fn pad_id(&self) -> Result<Option<i64>> {
        self.special_id(SpecialToken::Pad)
    }

    /// The unknown token's id (`special_id(SpecialToken::Unk)`).
    pub fn unk_id(&self) -> Result<Option<i64>> {
        self.special_id(SpecialToken::Unk)
    }

    /// The id of the token whose text is `token` (byte-level tokens in their mapped form,
    /// "Ġthe"), or None when there is none (`accel_tokenizer_token_to_id`).
    ///
    /// Errors: `Status::InvalidArgument` for a token with a NUL byte (it crosses into C as a
    /// NUL-terminated string).
    pub fn token_to_id(&self, token: &str) -> Result<Option<i64>> {
        let t = cstring(token, "token")?;
        let mut id = -1i64;
        // SAFETY: a live tokenizer (only read), a C string that outlives the call, a local out-parameter.
        check(unsafe { sys::accel_tokenizer_token_to_id(self.raw.as_ptr(), t.as_ptr(), &mut id) }, std::ptr::null())?;
        Ok(if id >= 0 { Some(id) } else { None })
    }

    /// The text of token `id` (copied; byte-level tokens in their mapped form) and whether it is
    /// a special token, one [`Tokenizer::decode`]'s `skip_special_tokens` drops
    /// (`accel_tokenizer_id_to_token`). A token's text that is not UTF-8 (none of the formats
    /// makes one) would be read with U+FFFD in place of its invalid bytes.
    ///
    /// Errors: `Status::InvalidArgument` for an id outside [0, vocab_size).
    pub fn id_to_token(&self, id: i64) -> Result<(String, bool)> {
        let mut text: *const c_char = std::ptr::null();
        let mut special: c_int = 0;
        check(
            // SAFETY: a live tokenizer (only read), local out-parameters.
            unsafe { sys::accel_tokenizer_id_to_token(self.raw.as_ptr(), id, &mut text, &mut special) },
            std::ptr::null(),
        )?;
        if text.is_null() {
            return Err(Error::new(crate::Status::Internal, "accel_tokenizer_id_to_token returned OK and NULL"));
        }
        // SAFETY: on ACCEL_OK `text` is a NUL-terminated string owned by the tokenizer, valid until
        // it is destroyed (it is borrowed by `&self` here) and copied at once.
        let s = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        Ok((s, special != 0))
    }

    /// Encodes `text` (UTF-8 bytes; a `&str`, `String`, `&[u8]` or `Vec<u8>`; NUL bytes are text
    /// like any other, the length is passed) into ids (`accel_tokenizer_encode`). Special tokens
    /// written in the text ("<|im_start|>") become their ids, as in Hugging Face tokenizers (a
    /// SentencePiece `.model` reads them as text, as SentencePiece does). `opts.max_length`
    /// truncates; the padding options concern batches only.
    ///
    /// Errors: `Status::InvalidArgument` for text that is not UTF-8 without
    /// `replace_invalid_utf8` (the byte offset named), a `max_length` below the number of special
    /// tokens added, a negative `max_length` or `pad_to_multiple_of`, a `pad_id` below -1.
    pub fn encode(&self, text: impl AsRef<[u8]>, opts: &EncodeOptions) -> Result<Vec<i64>> {
        let text = text.as_ref();
        let o = opts.to_sys()?;
        let mut out = std::ptr::null_mut();
        check(
            // SAFETY: a live tokenizer (only read); `text` holds `text.len()` bytes, only read during
            // the call; local options and out-parameter.
            unsafe {
                sys::accel_tokenizer_encode(self.raw.as_ptr(), text.as_ptr() as *const c_char, text.len(), &o, &mut out)
            },
            std::ptr::null(),
        )?;
        // SAFETY: on ACCEL_OK `out` is a new int64 tensor [n] that belongs to the caller.
        let ids = unsafe { Tensor::from_raw(out) }.expect("accel returned OK and a NULL tensor");
        ids.to_vec::<i64>()
    }

    /// Encodes a batch of texts (each as [`Tokenizer::encode`], several threads at once for
    /// large batches) into two int64 tensors `[texts.len(), T]` (`accel_tokenizer_encode_batch`):
    /// the ids, truncated and padded as `opts` says, and the attention mask (1 for a token, 0 for
    /// padding): [`Model::lm_forward`](crate::Model::lm_forward)'s `input_ids` and
    /// `attention_mask`, and [`Model::generate`](crate::Model::generate)'s prompts (with
    /// `padding_side: Side::Left`).
    ///
    /// Errors: as [`Tokenizer::encode`]'s, naming the text's index (`texts[3]`); also an empty
    /// batch, `pad_to_max_length` without `max_length`, a `pad_id` outside the vocabulary.
    pub fn encode_batch<T: AsRef<[u8]>>(&self, texts: &[T], opts: &EncodeOptions) -> Result<(Tensor, Tensor)> {
        let o = opts.to_sys()?;
        let ptrs: Vec<*const c_char> = texts.iter().map(|t| t.as_ref().as_ptr() as *const c_char).collect();
        let lengths: Vec<usize> = texts.iter().map(|t| t.as_ref().len()).collect();
        let (mut ids, mut mask) = (std::ptr::null_mut(), std::ptr::null_mut());
        check(
            // SAFETY: a live tokenizer (only read); `ptrs[i]` points to `lengths[i]` bytes of
            // `texts[i]`, borrowed and only read during the call (an empty text's dangling pointer
            // is never read: its length is 0); local options and out-parameters.
            unsafe {
                sys::accel_tokenizer_encode_batch(
                    self.raw.as_ptr(),
                    ptrs.as_ptr(),
                    lengths.as_ptr(),
                    ptrs.len(),
                    &o,
                    &mut ids,
                    &mut mask,
                )
            },
            std::ptr::null(),
        )?;
        // SAFETY: on ACCEL_OK both are new tensors that belong to the caller.
        let ids = unsafe { Tensor::from_raw(ids) }.expect("accel returned OK and a NULL ids tensor");
        let mask = unsafe { Tensor::from_raw(mask) }.expect("accel returned OK and a NULL mask tensor");
        Ok((ids, mask))
    }

    /// Decodes ids into text (`accel_tokenizer_decode`): the decoder's (byte-level bytes, byte
    /// fallback, SentencePiece's spaces), special tokens dropped when `skip_special_tokens`,
    /// bytes that do not form UTF-8 replaced by U+FFFD, as Hugging Face's `decode`. Asks the
    /// library for the length, then decodes into a buffer of that size.
    ///
    /// Errors: `Status::InvalidArgument` for an id outside [0, vocab_size) (its index named).
    pub fn decode(&self, ids: &[i64], skip_special_tokens: bool) -> Result<String> {
        let skip = skip_special_tokens as c_int;
        let mut len = 0usize;
        check(
            // SAFETY: a live tokenizer (only read); `ids` holds `ids.len()` ids, only read; buf
            // NULL with capacity 0 asks for the length alone, written to a local.
            unsafe {
                sys::accel_tokenizer_decode(
                    self.raw.as_ptr(),
                    ids.as_ptr(),
                    ids.len(),
                    skip,
                    std::ptr::null_mut(),
                    0,
                    &mut len,
                )
            },
            std::ptr::null(),
        )?;
        let mut buf = vec![0u8; len + 1]; // the text and its NUL
        let mut written = 0usize;
        check(
            // SAFETY: as above; `buf` is writable for `buf.len()` bytes, the capacity passed.
            unsafe {
                sys::accel_tokenizer_decode(
                    self.raw.as_ptr(),
                    ids.as_ptr(),
                    ids.len(),
                    skip,
                    buf.as_mut_ptr() as *mut c_char,
                    buf.len(),
                    &mut written,
                )
            },
            std::ptr::null(),
        )?;
        // the tokenizer is immutable: the same ids decode to the same length both times
        buf.truncate(written.min(len));
        // the library replaces bytes that are not UTF-8 (U+FFFD): valid, but never trusted blindly
        Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// Renders a conversation as the model's chat template does (`accel_tokenizer_apply_chat`):
    /// `messages` are [`ChatMessage`]s or `(role, content)` pairs, roles `"system"`, `"user"` or
    /// `"assistant"`. `ChatFormat::Auto` reads the template from tokenizer_config.json's
    /// `chat_template` and recognises it by its markers; a named format renders that family's
    /// template. Each renders exactly what transformers' `apply_chat_template` renders with the
    /// family's published template. With `add_generation_prompt` the text ends with the
    /// assistant's header, for generation. Asks the library for the length, then renders into a
    /// buffer of that size.
    ///
    /// The template holds the BOS where the family has one: encode the text with
    /// `EncodeOptions::default().with_add_special_tokens(false)`.
    ///
    /// ```no_run
    /// use accel::{ChatFormat, EncodeOptions, Tokenizer};
    /// # fn main() -> accel::Result<()> {
    /// let tok = Tokenizer::load("path/to/model")?;
    /// let text = tok.apply_chat(ChatFormat::Auto, &[("system", "Be brief."), ("user", "Hi!")], true)?;
    /// let ids = tok.encode(&text, &EncodeOptions::default().with_add_special_tokens(false))?;
    /// # let _ = ids;
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: `Status::InvalidArgument` for a message the template refuses (Gemma: a system
    /// role; Gemma and Mistral: roles that do not alternate user/assistant), a format that needs
    /// a BOS or EOS token the tokenizer lacks, `ChatFormat::Auto` on a tokenizer without a
    /// `chat_template`, a role or content with a NUL byte (they cross into C as NUL-terminated
    /// strings; `messages[i].content` named); `Status::Unsupported` for a `chat_template` that
    /// is none of the formats.
    pub fn apply_chat<M: AsChatMessage>(
        &self,
        format: ChatFormat,
        messages: &[M],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let mut strings = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let role = cstring(m.role(), &format!("messages[{}].role", i))?;
            let content = cstring(m.content(), &format!("messages[{}].content", i))?;
            strings.push((role, content));
        }
        let raw: Vec<sys::accel_chat_message> =
            strings.iter().map(|(r, c)| sys::accel_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
        // the header allows NULL messages with count 0 (an empty Vec's pointer is dangling)
        let msgs = if raw.is_empty() { std::ptr::null() } else { raw.as_ptr() };
        let (f, gen) = (format.to_raw(), add_generation_prompt as c_int);
        let mut len = 0usize;
        check(
            // SAFETY: a live tokenizer (only read); `msgs` holds `raw.len()` messages whose C strings
            // (`strings`) outlive the call, only read; buf NULL with capacity 0 asks for the length
            // alone, written to a local.
            unsafe {
                sys::accel_tokenizer_apply_chat(self.raw.as_ptr(), f, msgs, raw.len(), gen, std::ptr::null_mut(), 0, &mut len)
            },
            std::ptr::null(),
        )?;
        let mut buf = vec![0u8; len + 1]; // the text and its NUL
        let mut written = 0usize;
        check(
            // SAFETY: as above; `buf` is writable for `buf.len()` bytes, the capacity passed.
            unsafe {
                sys::accel_tokenizer_apply_chat(
                    self.raw.as_ptr(),
                    f,
                    msgs,
                    raw.len(),
                    gen,
                    buf.as_mut_ptr() as *mut c_char,
                    buf.len(),
                    &mut written,
                )
            },
            std::ptr::null(),
        )?;
        // the tokenizer is immutable: the same conversation renders to the same length both times
        buf.truncate(written.min(len));
        // the contents are UTF-8 (`&str`) and so are the templates' markers: never trusted blindly
        Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        // SAFETY: owned, live, destroyed once (here), and used by no thread (we have `&mut self`).
        unsafe { sys::accel_tokenizer_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size().ok())
            .field("bos_id", &self.bos_id().ok().flatten())
            .field("eos_id", &self.eos_id().ok().flatten())
            .field("pad_id", &self.pad_id().ok().flatten())
            .finish()
    }
}
