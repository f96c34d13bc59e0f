//! Tokenizers through the Rust binding, against Hugging Face `tokenizers` and SentencePiece
//! (tests/fixtures/tokenizers, made by scripts/lm_fixtures --tokenizers; read with the JSON
//! reader of `common/json.rs`):
//!
//! * every family's tokenizer.json gives, for every string of the 305-string corpus (the ten
//!   `"hex"` entries as raw bytes that are not UTF-8, with `replace_invalid_utf8`), the ids of
//!   `expected.json` with and without the special tokens, and decodes the ids to its text with
//!   and without them; the padded, truncated batches on each side equal its `batch` cases;
//! * the SentencePiece `.model` files (llama2, mistral, phi3, gemma) give SentencePiece's ids;
//! * the special ids, the vocabulary both ways, truncation and padding options, one tokenizer
//!   shared by several threads;
//! * the chat formats: every conversation of `conversations.json`, with and without the
//!   generation prompt, renders to the text (and ids) transformers' `apply_chat_template` gives
//!   with each family's template (`expected.json`'s `"chat"`), and what the template refuses is
//!   `InvalidArgument`;
//! * the errors: text that is not UTF-8 (the byte offset named), a missing path (`Io`), a file
//!   that is not a tokenizer (`Format`), ids outside the vocabulary, bad options.
mod common;

use std::path::PathBuf;

use accel::{ChatFormat, ChatMessage, EncodeOptions, Side, SpecialToken, Status, Tokenizer};
use common::json::{Json, Reader};
use common::temp_dir;

/// The error of a call that must fail (the Ok types need not be Debug).
fn err<T>(r: accel::Result<T>) -> accel::Error {
    match r {
        Ok(_) => panic!("the call succeeded; an error was expected"),
        Err(e) => e,
    }
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tokenizers")
}

fn read_json(path: PathBuf) -> Json {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
    Reader::parse(&text)
}

/// The corpus as bytes: a `"text"` entry's UTF-8, a `"hex"` entry's bytes (not UTF-8).
fn corpus() -> Vec<Vec<u8>> {
    read_json(fixtures().join("corpus.json"))
        .arr()
        .iter()
        .map(|e| match e.opt("text") {
            Some(t) => t.str().as_bytes().to_vec(),
            None => {
                let h = e.get("hex").str();
                (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect()
            }
        })
        .collect()
}

fn load(path: PathBuf) -> Tokenizer {
    Tokenizer::load(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

fn opts(add_special_tokens: bool) -> EncodeOptions {
    // valid UTF-8 is unchanged by the replacement; the "hex" strings become what Python's
    // bytes.decode("utf-8", "replace") gives, which is what Hugging Face saw
    EncodeOptions::default().with_add_special_tokens(add_special_tokens).with_replace_invalid_utf8(true)
}

fn side(j: &Json) -> Side {
    match j.str() {
        "left" => Side::Left,
        "right" => Side::Right,
        s => panic!("side {:?}", s),
    }
}

/// Every corpus string, encoded and decoded by the family's tokenizer.json (the directory, as a
/// user loads a model's), equals Hugging Face; then the batches; then the `.model` beside it,
/// when there is one, equals SentencePiece.
fn family(name: &str) {
    let dir = fixtures().join(name);
    let exp = read_json(dir.join("expected.json"));
    let texts = corpus();
    let tok = load(dir.clone());
    let (add_special, plain) = (exp.get("add_special").arr(), exp.get("plain").arr());
    let (decoded, decoded_skip) = (exp.get("decode").arr(), exp.get("decode_skip").arr());
    for list in [add_special, plain, decoded, decoded_skip] {
        assert_eq!(list.len(), texts.len(), "{}: expected.json and corpus.json differ in length", name);
    }
    let (mut tokens, mut differing) = (0usize, Vec::new());
    for (i, text) in texts.iter().enumerate() {
        let want_add = add_special[i].ints();
        tokens += want_add.len();
        let add = tok.encode(text, &opts(true)).unwrap();
        let bare = tok.encode(text, &opts(false)).unwrap();
        let d = tok.decode(&want_add, false).unwrap();
        let ds = tok.decode(&want_add, true).unwrap();
        if add != want_add || bare != plain[i].ints() || d != decoded[i].str() || ds != decoded_skip[i].str() {
            differing.push(format!(
                "string {} {:?}\n  accel {:?}\n  hf    {:?}\n  plain accel {:?}\n  plain hf    {:?}\n  \
                 decode accel {:?} hf {:?}\n  skip accel {:?} hf {:?}",
                i,
                String::from_utf8_lossy(text),
                add,
                want_add,
                bare,
                plain[i].ints(),
                d,
                decoded[i].str(),
                ds,
                decoded_skip[i].str()
            ));
        }
    }
    println!("{}: {} strings, {} tokens, {} differing", name, texts.len(), tokens, differing.len());
    let first = differing.iter().take(5).cloned().collect::<Vec<_>>().join("\n");
    assert!(differing.is_empty(), "{}: {} strings differ from Hugging Face:\n{}", name, differing.len(), first);

    // batches: truncation and padding on each side, as tokenizers' enable_truncation/enable_padding
    let batch = exp.get("batch");
    let rows: Vec<&[u8]> = batch.get("texts").ints().iter().map(|&i| texts[i as usize].as_slice()).collect();
    let cases = batch.get("cases").arr();
    assert!(!cases.is_empty());
    for c in cases {
        let o = EncodeOptions::default()
            .with_max_length(batch.get("max_length").int())
            .with_padding_side(side(c.get("padding_side")))
            .with_truncation_side(side(c.get("truncation_side")))
            .with_pad_id(Some(batch.get("pad_id").int()))
            .with_replace_invalid_utf8(true);
        let (ids, mask) = tok.encode_batch(&rows, &o).unwrap();
        let want_ids = c.get("ids").arr();
        let width = want_ids[0].arr().len() as i64;
        let what = format!("{}: padding {:?}, truncation {:?}", name, o.padding_side, o.truncation_side);
        assert_eq!(ids.shape().unwrap(), vec![rows.len() as i64, width], "{}", what);
        assert_eq!(mask.shape().unwrap(), vec![rows.len() as i64, width], "{}", what);
        let flat = |rows: &[Json]| rows.iter().flat_map(|r| r.ints()).collect::<Vec<i64>>();
        assert_eq!(ids.to_vec::<i64>().unwrap(), flat(want_ids), "{}", what);
        assert_eq!(mask.to_vec::<i64>().unwrap(), flat(c.get("mask").arr()), "{}", what);
    }

    // the SentencePiece model beside it gives SentencePiece's own ids and text
    let model = dir.join("tokenizer.model");
    if model.exists() {
        let sp = load(model);
        let spe = exp.get("sentencepiece");
        let (ids, text) = (spe.get("ids").arr(), spe.get("decode").arr());
        let mut differing = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let want = ids[i].ints();
            let got = sp.encode(t, &opts(false)).unwrap();
            let d = sp.decode(&want, true).unwrap();
            if got != want || d != text[i].str() {
                let spm = text[i].str();
                let line = format!("string {}\n  accel {:?}\n  spm   {:?}\n  decode {:?} spm {:?}", i, got, want, d, spm);
                differing.push(line);
            }
        }
        println!("{}/tokenizer.model: {} strings, {} differing from SentencePiece", name, texts.len(), differing.len());
        let first = differing.iter().take(5).cloned().collect::<Vec<_>>().join("\n");
        assert!(differing.is_empty(), "{}.model:\n{}", name, first);
    } else {
        let what = "expected.json has SentencePiece's ids but there is no tokenizer.model";
        assert!(exp.opt("sentencepiece").is_none(), "{}: {}", name, what);
    }
}

#[test]
fn qwen2_equals_hugging_face() {
    family("qwen2");
}

#[test]
fn llama2_json_and_model_equal_hugging_face_and_sentencepiece() {
    family("llama2");
}

#[test]
fn gemma_json_and_model_equal_hugging_face_and_sentencepiece() {
    family("gemma");
}

#[test]
fn gpt2_equals_hugging_face() {
    family("gpt2");
}

#[test]
fn smollm2_equals_hugging_face() {
    family("smollm2");
}

#[test]
fn llama3_equals_hugging_face() {
    family("llama3");
}

#[test]
fn mistral_json_and_model_equal_hugging_face_and_sentencepiece() {
    family("mistral");
}

#[test]
fn phi3_json_and_model_equal_hugging_face_and_sentencepiece() {
    family("phi3");
}

/// The special ids from tokenizer_config.json, the vocabulary both ways (every id's text maps
/// back to it), and which tokens are special.
#[test]
fn special_ids_and_the_vocabulary_both_ways() {
    let qwen = load(fixtures().join("qwen2"));
    assert_eq!(qwen.vocab_size().unwrap(), 1203);
    assert_eq!(qwen.bos_id().unwrap(), None); // "bos_token": null
    assert_eq!(qwen.eos_id().unwrap(), Some(1200)); // <|im_end|>
    assert_eq!(qwen.pad_id().unwrap(), Some(1201)); // <|endoftext|>
    assert_eq!(qwen.unk_id().unwrap(), None);
    assert_eq!(qwen.special_id(SpecialToken::Eos).unwrap(), qwen.eos_id().unwrap());
    assert_eq!(qwen.token_to_id("<|im_start|>").unwrap(), Some(1202));
    assert_eq!(qwen.id_to_token(1202).unwrap(), ("<|im_start|>".to_string(), true));
    assert_eq!(qwen.token_to_id("no such token, surely").unwrap(), None);
    // special tokens written in the text become their ids; decode can drop them
    let chat = qwen.encode("<|im_start|>user hi<|im_end|>", &EncodeOptions::default()).unwrap();
    assert_eq!((chat[0], *chat.last().unwrap()), (1202, 1200), "{:?}", chat);
    assert_eq!(qwen.decode(&chat, true).unwrap(), "user hi");
    assert_eq!(qwen.decode(&chat, false).unwrap(), "<|im_start|>user hi<|im_end|>");
    assert_eq!(qwen.decode(&[], false).unwrap(), "");

    let llama = load(fixtures().join("llama2/tokenizer.json"));
    assert_eq!(llama.vocab_size().unwrap(), 1000);
    assert_eq!(
        (llama.bos_id().unwrap(), llama.eos_id().unwrap(), llama.pad_id().unwrap(), llama.unk_id().unwrap()),
        (Some(1), Some(2), None, Some(0))
    );
    let gemma = load(fixtures().join("gemma"));
    assert_eq!(
        (gemma.bos_id().unwrap(), gemma.eos_id().unwrap(), gemma.pad_id().unwrap(), gemma.unk_id().unwrap()),
        (Some(2), Some(1), Some(0), Some(3))
    );
    assert_eq!(gemma.id_to_token(5).unwrap(), ("<start_of_turn>".to_string(), false)); // added, not special

    for tok in [&qwen, &llama, &gemma] {
        let n = tok.vocab_size().unwrap();
        let mut specials = 0;
        for id in 0..n {
            let (text, special) = tok.id_to_token(id).unwrap();
            assert_eq!(tok.token_to_id(&text).unwrap(), Some(id), "{:?}", text);
            specials += special as i64;
        }
        assert!(specials >= 2, "{:?}", tok);
        assert_eq!(err(tok.id_to_token(n)).status, Status::InvalidArgument);
        assert_eq!(err(tok.id_to_token(-1)).status, Status::InvalidArgument);
    }
    // byte-level tokens in their mapped form
    assert!(qwen.token_to_id("Ġthe").unwrap().is_some());
    assert!(format!("{:?}", qwen).contains("vocab_size: Some(1203)"), "{:?}", qwen);
}

/// Truncation on either side, padding to max_length and to a multiple, texts of every kind
/// (`&str`, `String`, bytes), NUL bytes as text, and the encode of one text equal to its row.
#[test]
fn truncation_padding_and_text_kinds() {
    let tok = load(fixtures().join("llama2"));
    let text = "Tensor from she'd don't don't don't we on?";
    let full = tok.encode(text, &EncodeOptions::default()).unwrap();
    assert_eq!(full[0], 1, "BOS first: {:?}", full);
    assert!(full.len() > 6);
    let right = tok.encode(text, &EncodeOptions::default().with_max_length(5)).unwrap();
    assert_eq!(right, full[..5].to_vec());
    let left = tok.encode(text, &EncodeOptions::default().with_max_length(5).with_truncation_side(Side::Left)).unwrap();
    assert_eq!(left[0], 1, "the special token stays: {:?}", left);
    assert_eq!(left[1..], full[full.len() - 4..]);
    // &str, String, &[u8] and Vec<u8> are all text
    assert_eq!(tok.encode(String::from(text), &EncodeOptions::default()).unwrap(), full);
    assert_eq!(tok.encode(text.as_bytes(), &EncodeOptions::default()).unwrap(), full);
    let owned: Vec<u8> = text.bytes().collect();
    assert_eq!(tok.encode(owned, &EncodeOptions::default()).unwrap(), full);
    // a NUL byte is text like any other (the length is passed, nothing is cut)
    let with_nul = tok.encode("ab\0cd", &EncodeOptions::default().with_add_special_tokens(false)).unwrap();
    let without = tok.encode("abcd", &EncodeOptions::default().with_add_special_tokens(false)).unwrap();
    assert_ne!(with_nul, without);
    assert_eq!(tok.decode(&with_nul, true).unwrap(), "ab\0cd");
    assert_eq!(tok.encode("", &EncodeOptions::default()).unwrap(), vec![1]);

    // a batch: each row is the single encode, padded (default right, the tokenizer's padding
    // token else 0: llama2 has none) to the longest row, or to max_length, or a multiple
    let texts = vec![String::from("short"), String::from(text), String::new()];
    let (ids, mask) = tok.encode_batch(&texts, &EncodeOptions::default()).unwrap();
    let width = full.len();
    assert_eq!(ids.shape().unwrap(), vec![3, width as i64]);
    let (ids, mask) = (ids.to_vec::<i64>().unwrap(), mask.to_vec::<i64>().unwrap());
    for (r, t) in texts.iter().enumerate() {
        let one = tok.encode(t, &EncodeOptions::default()).unwrap();
        let row = &ids[r * width..(r + 1) * width];
        assert_eq!(row[..one.len()], one[..], "row {}", r);
        assert!(row[one.len()..].iter().all(|&v| v == 0), "row {}: {:?}", r, row);
        let m = &mask[r * width..(r + 1) * width];
        assert_eq!(m.iter().sum::<i64>(), one.len() as i64, "row {}", r);
    }
    let left = EncodeOptions::default().with_padding_side(Side::Left).with_pad_id(Some(2));
    let (ids, mask) = tok.encode_batch(&["short", text], &left).unwrap();
    let (ids, mask) = (ids.to_vec::<i64>().unwrap(), mask.to_vec::<i64>().unwrap());
    let short = tok.encode("short", &EncodeOptions::default()).unwrap();
    let pad = width - short.len();
    assert!(ids[..pad].iter().all(|&v| v == 2) && mask[..pad].iter().all(|&v| v == 0), "{:?}", ids);
    assert_eq!(ids[pad..width], short[..]);
    let fixed = EncodeOptions::default().with_max_length(32).with_pad_to_max_length(true);
    assert_eq!(tok.encode_batch(&[b"a" as &[u8], b"bb"], &fixed).unwrap().0.shape().unwrap(), vec![2, 32]);
    let multiple = EncodeOptions::default().with_pad_to_multiple_of(8);
    let (ids, _) = tok.encode_batch(&["short"], &multiple).unwrap();
    assert_eq!(ids.shape().unwrap(), vec![1, 8]);
}

/// One tokenizer used by several threads at once (`Sync`) gives what it gives alone; and it
/// moves to another thread (`Send`).
#[test]
fn one_tokenizer_shared_by_threads() {
    let tok = load(fixtures().join("gemma"));
    let texts = corpus();
    let alone: Vec<Vec<i64>> = texts.iter().map(|t| tok.encode(t, &opts(true)).unwrap()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                let (tok, texts, alone) = (&tok, &texts, &alone);
                s.spawn(move || {
                    for (i, t) in texts.iter().enumerate().skip(k) {
                        assert_eq!(&tok.encode(t, &opts(true)).unwrap(), &alone[i], "thread {} string {}", k, i);
                        let d = tok.decode(&alone[i], true).unwrap();
                        assert!(!d.is_empty() || t.is_empty());
                    }
                    let (ids, _) = tok.encode_batch(&texts[..64], &opts(true)).unwrap();
                    ids.shape().unwrap()
                })
            })
            .collect();
        let shapes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(shapes.windows(2).all(|w| w[0] == w[1]), "{:?}", shapes);
    });
    let moved = std::thread::spawn(move || tok.encode("moved", &EncodeOptions::default()).unwrap()).join().unwrap();
    assert_eq!(moved[0], 2); // gemma's <bos>
}

/// The errors, with the statuses and messages of the header; the tokenizer keeps working.
#[test]
fn errors_name_the_problem() {
    let tok = load(fixtures().join("qwen2"));
    // text that is not UTF-8: refused, naming the byte offset, unless it is replaced
    let bad: &[u8] = b"abc\xffdef";
    let e = err(tok.encode(bad, &EncodeOptions::default()));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("UTF-8") && e.message.contains("byte 3"), "{}", e.message);
    assert!(e.message.contains("accel_tokenizer_encode"), "{}", e.message);
    let replaced = tok.encode(bad, &EncodeOptions::default().with_replace_invalid_utf8(true)).unwrap();
    assert_eq!(tok.decode(&replaced, true).unwrap(), "abc\u{fffd}def");
    let e = err(tok.encode_batch(&[b"fine" as &[u8], b"\xc3("], &EncodeOptions::default()));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("texts[1]") && e.message.contains("byte 0"), "{}", e.message);

    // a missing path: Io naming it; a file that is not a tokenizer: Format; an empty path
    let dir = temp_dir("tokenizer");
    let missing = dir.join("no-such-tokenizer.json");
    let e = err(Tokenizer::load(&missing));
    assert_eq!(e.status, Status::Io, "{}", e);
    assert!(e.message.contains("no-such-tokenizer.json"), "{}", e.message);
    assert_eq!(err(Tokenizer::load(&dir)).status, Status::Io); // a directory with neither file
    std::fs::write(dir.join("tokenizer.json"), "{ not json").unwrap();
    let e = err(Tokenizer::load(dir.join("tokenizer.json")));
    assert_eq!(e.status, Status::Format, "{}", e);
    assert!(e.message.contains("tokenizer.json"), "{}", e.message);
    assert_eq!(err(Tokenizer::load("")).status, Status::InvalidArgument);
    std::fs::remove_dir_all(&dir).unwrap();

    // ids outside the vocabulary: decode names the index
    let n = tok.vocab_size().unwrap();
    let e = err(tok.decode(&[5, n, 7], false));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("ids[1]") && e.message.contains(&n.to_string()), "{}", e.message);
    assert_eq!(err(tok.decode(&[-1], true)).status, Status::InvalidArgument);
    let e = err(tok.id_to_token(n));
    assert!(e.message.contains(&n.to_string()), "{}", e.message);

    // options the library refuses, naming the field
    for (field, o) in [
        ("max_length", EncodeOptions::default().with_max_length(-1)),
        ("pad_to_multiple_of", EncodeOptions::default().with_pad_to_multiple_of(-8)),
        ("pad_id", EncodeOptions::default().with_pad_id(Some(-2))),
    ] {
        let e = err(tok.encode("x", &o));
        assert_eq!(e.status, Status::InvalidArgument, "{}: {}", field, e);
        assert!(e.message.contains(field), "{}: {}", field, e.message);
        assert_eq!(err(tok.encode_batch(&["x"], &o)).status, Status::InvalidArgument, "{}", field);
    }
    // max_length counts the special tokens added: llama2's BOS alone fits in 1
    let llama = load(fixtures().join("llama2"));
    assert_eq!(llama.encode("many words here", &EncodeOptions::default().with_max_length(1)).unwrap(), vec![1]);
    let e = err(tok.encode_batch(&["x"], &EncodeOptions::default().with_pad_to_max_length(true)));
    assert!(e.status == Status::InvalidArgument && e.message.contains("max_length"), "{}", e);
    let e = err(tok.encode_batch(&["x"], &EncodeOptions::default().with_pad_id(Some(n))));
    assert!(e.status == Status::InvalidArgument && e.message.contains("pad_id"), "{}", e);
    let none: [&str; 0] = [];
    let e = err(tok.encode_batch(&none, &EncodeOptions::default()));
    assert!(e.status == Status::InvalidArgument && e.message.contains("count"), "{}", e);

    // the tokenizer still works
    let ok = tok.encode("ok", &EncodeOptions::default()).unwrap();
    assert_eq!(tok.decode(&ok, false).unwrap(), "ok");
}

/// The conversations of `conversations.json`, each a list of (role, content).
fn conversations() -> Vec<Vec<(String, String)>> {
    read_json(fixtures().join("conversations.json"))
        .arr()
        .iter()
        .map(|c| c.arr().iter().map(|m| (m.get("role").str().to_string(), m.get("content").str().to_string())).collect())
        .collect()
}

/// Every family with a chat template renders every conversation, with and without the
/// generation prompt, to the text transformers' `apply_chat_template` gives with the family's
/// template, and that text encodes (without added special tokens: the template holds them) to
/// its ids; what the template refuses (Gemma's system role, Mistral's roles that do not
/// alternate) is `InvalidArgument`. A named format on a tokenizer without a template renders;
/// `Auto` there is refused.
#[test]
fn chat_formats_render_as_transformers_templates() {
    let convs = conversations();
    let plain = EncodeOptions::default().with_add_special_tokens(false);
    let (mut checked, mut refused) = (0usize, 0usize);
    for name in ["qwen2", "smollm2", "llama3", "gemma", "phi3", "mistral"] {
        let dir = fixtures().join(name);
        let tok = load(dir.clone());
        let exp = read_json(dir.join("expected.json"));
        let cases = exp.get("chat").arr();
        assert!(!cases.is_empty(), "{}: no chat cases", name);
        for c in cases {
            let i = c.get("conversation").int() as usize;
            let gen = match c.get("add_generation_prompt") {
                Json::Bool(b) => *b,
                other => panic!("add_generation_prompt {:?}", other),
            };
            let r = tok.apply_chat(ChatFormat::Auto, &convs[i], gen);
            if let Some(why) = c.opt("error") {
                let e = err(r);
                assert_eq!(e.status, Status::InvalidArgument, "{} conversation {} ({}): {}", name, i, why.str(), e);
                assert!(e.message.contains("accel_tokenizer_apply_chat"), "{}", e.message);
                refused += 1;
                continue;
            }
            let text = r.unwrap_or_else(|e| panic!("{} conversation {} (generation prompt {}): {}", name, i, gen, e));
            assert_eq!(text, c.get("text").str(), "{} conversation {} (generation prompt {})", name, i, gen);
            assert_eq!(tok.encode(&text, &plain).unwrap(), c.get("ids").ints(), "{} conversation {}: ids", name, i);
            checked += 1;
        }
    }
    println!("{} conversations rendered as transformers, {} refused as its templates refuse", checked, refused);
    assert!(checked >= 28 && refused >= 4, "{} rendered, {} refused", checked, refused);

    // the kinds of messages: ChatMessage, (&str, &str), (String, String), references; an empty
    // conversation; the named format equal to Auto for the family's own template
    let qwen = load(fixtures().join("qwen2"));
    let owned: Vec<ChatMessage> = convs[0].iter().map(|(r, c)| ChatMessage::new(r.as_str(), c.as_str())).collect();
    let borrowed: Vec<(&str, &str)> = convs[0].iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
    let refs: Vec<&ChatMessage> = owned.iter().collect();
    let want = qwen.apply_chat(ChatFormat::Auto, &convs[0], true).unwrap();
    assert_eq!(qwen.apply_chat(ChatFormat::Auto, &owned, true).unwrap(), want);
    assert_eq!(qwen.apply_chat(ChatFormat::Auto, &borrowed, true).unwrap(), want);
    assert_eq!(qwen.apply_chat(ChatFormat::ChatMl, &refs, true).unwrap(), want);
    assert!(want.ends_with("<|im_end|>\n<|im_start|>assistant\n"), "{:?}", want);
    let q = [ChatMessage::system("Be brief."), ChatMessage::user("Hi!"), ChatMessage::assistant("Hello.")];
    assert_eq!(
        qwen.apply_chat(ChatFormat::ChatMl, &q, false).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    );
    let none: [ChatMessage; 0] = [];
    assert_eq!(qwen.apply_chat(ChatFormat::ChatMl, &none, true).unwrap(), "<|im_start|>assistant\n");

    // gpt2's tokenizer has no chat_template: Auto is refused naming it, a named format renders
    let gpt2 = load(fixtures().join("gpt2"));
    let e = err(gpt2.apply_chat(ChatFormat::Auto, &convs[0], false));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("chat_template"), "{}", e.message);
    assert!(gpt2.apply_chat(ChatFormat::ChatMl, &convs[0], true).unwrap().starts_with("<|im_start|>user\n"));
    // a format that needs a BOS the tokenizer lacks (Qwen2 has none): refused, naming it
    let e = err(qwen.apply_chat(ChatFormat::Llama3, &convs[0], false));
    assert!(e.status == Status::InvalidArgument && e.message.contains("BOS"), "{}", e);
    // a NUL byte in a role or content: refused before the call, naming the message
    let e = err(qwen.apply_chat(ChatFormat::Auto, &[("user", "a\0b")], false));
    assert!(e.status == Status::InvalidArgument && e.message.contains("messages[0].content"), "{}", e);
    let e = err(qwen.apply_chat(ChatFormat::Auto, &[("user", "a"), ("assis\0tant", "b")], false));
    assert!(e.status == Status::InvalidArgument && e.message.contains("messages[1].role"), "{}", e);
    // and the tokenizer still renders
    assert_eq!(qwen.apply_chat(ChatFormat::Auto, &convs[0], true).unwrap(), want);
}
