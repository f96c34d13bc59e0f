//! Fine-tuning through the Rust binding: the SFT loader (`Context::sft_dataloader`) over a
//! JSONL file of conversations, prompt/completion pairs and texts, tokenized with the qwen2
//! fixture tokenizer (tests/fixtures/tokenizers); the attention mask of a causal-LM batch
//! (`DataLoader::attention_mask`, also for `LmDataOptions::padding_side`); generation from a
//! left-padded batch (`Model::generate_padded`) on tests/fixtures/lm/llama-tiny; and the whole
//! flow of examples/c/finetune_lm.c: train on the SFT batches, then answer chat prompts
//! generated from one left-padded batch.
//!
//! * decoding the labels that are not -100 gives exactly the assistant's answer and its
//!   `<|im_end|>\n`, the completion and EOS, every token of a text line; the ids are the
//!   rendered conversation's; the mask marks the padding, on the side asked for, where the ids
//!   are the padding token and the labels -100; truncation and packing;
//! * each row of a left-padded batch generates, greedily, what its prompt alone generates,
//!   with and without the KV cache;
//! * the errors: a line that is not JSON (`Format` naming "file:line"), a field of the wrong
//!   type, a conversation the template refuses (`InvalidArgument` naming "file:line"), a
//!   missing file (`Io`), the mask before the first batch or after the epoch (`InvalidState`)
//!   or of a loader of tensors (`InvalidArgument`), right padding given to `generate_padded`
//!   (`InvalidArgument`).
mod common;

use std::path::{Path, PathBuf};

use accel::{
    ChatFormat, DataLoader, DataLoaderOptions, EncodeOptions, GenerateOptions, LmDataOptions, LmOptions, Loss, SftOptions,
    Side, Status, Tensor, Tokenizer,
};
use common::json::{quote, Json, Reader};
use common::{ctx, temp_dir};

/// The error of a call that must fail (the Ok types need not be Debug).
fn err<T>(r: accel::Result<T>) -> accel::Error {
    match r {
        Ok(_) => panic!("the call succeeded; an error was expected"),
        Err(e) => e,
    }
}

fn tokenizer_fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tokenizers")
}

fn lm_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lm").join(name)
}

fn tokenizer(name: &str) -> Tokenizer {
    let p = tokenizer_fixtures().join(name);
    Tokenizer::load(&p).unwrap_or_else(|e| panic!("{}: {}", p.display(), e))
}

/// `conversations.json`: the JSON values (to write JSONL lines) and (role, content) pairs.
fn conversations() -> (Vec<Json>, Vec<Vec<(String, String)>>) {
    let text = std::fs::read_to_string(tokenizer_fixtures().join("conversations.json")).unwrap();
    let json = Reader::parse(&text).arr().to_vec();
    let pairs = json
        .iter()
        .map(|c| c.arr().iter().map(|m| (m.get("role").str().to_string(), m.get("content").str().to_string())).collect())
        .collect();
    (json, pairs)
}

fn messages_line(conversation: &Json) -> String {
    Json::Obj(vec![("messages".into(), conversation.clone())]).dump()
}

/// The rows of one epoch's batches, in order (no shuffling): ids, labels and mask, each row
/// as long as its batch is wide. The mask is refused once the epoch has ended.
struct Rows {
    ids: Vec<Vec<i64>>,
    labels: Vec<Vec<i64>>,
    mask: Vec<Vec<i64>>,
}

fn load_all(loader: &mut DataLoader<'_>) -> Rows {
    let mut rows = Rows { ids: Vec::new(), labels: Vec::new(), mask: Vec::new() };
    while let Some(batch) = loader.next().unwrap() {
        let labels = batch.targets.as_ref().expect("causal-LM batches have labels");
        let mask = loader.attention_mask().unwrap();
        let shape = batch.inputs.shape().unwrap();
        assert_eq!(labels.shape().unwrap(), shape);
        assert_eq!(mask.shape().unwrap(), shape);
        assert_eq!(mask.dtype().unwrap(), accel::DType::I64);
        let w = shape[1] as usize;
        for (dst, t) in [(&mut rows.ids, &batch.inputs), (&mut rows.labels, labels), (&mut rows.mask, &mask)] {
            dst.extend(t.to_vec::<i64>().unwrap().chunks(w).map(<[i64]>::to_vec));
        }
    }
    // no batch after the end of the epoch: no mask either
    assert_eq!(err(loader.attention_mask()).status, Status::InvalidState);
    rows
}

fn unmasked(labels: &[i64]) -> Vec<i64> {
    labels.iter().copied().filter(|&l| l != -100).collect()
}

fn real(ids: &[i64], mask: &[i64]) -> Vec<i64> {
    ids.iter().zip(mask).filter(|(_, &m)| m != 0).map(|(&i, _)| i).collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The C++ test Tokenizer.FineTuningBatchesMaskThePrompts through the binding: chat lines carry
/// labels on the assistant turns only (each turn's text and its end-of-turn token),
/// prompt/completion lines on the completion, text lines everywhere; padding on either side
/// with the mask; truncation and packing.
#[test]
fn fine_tuning_batches_mask_the_prompts() {
    let (json, convs) = conversations();
    let dir = temp_dir("sft");
    let mut jsonl = String::new();
    jsonl += &(messages_line(&json[0]) + "\n\n"); // a blank line is skipped
    jsonl += &(messages_line(&json[2]) + "\n");
    jsonl += &format!("{{\"prompt\": {}, \"completion\": {}}}\n", quote("Question: what is 2 + 2?\nAnswer:"), quote(" 4"));
    jsonl += &format!("{{\"text\": {}}}\n", quote("Plain text trains on every token."));
    let path = write(&dir, "sft.jsonl", &jsonl);
    let ctx = ctx(1);
    let tok = tokenizer("qwen2");
    let plain = EncodeOptions::default().with_add_special_tokens(false);
    let lo = DataLoaderOptions::default().with_batch_size(2);
    for side in [Side::Right, Side::Left] {
        let mut loader = ctx.sft_dataloader(&tok, &path, &SftOptions::default().with_padding_side(side), &lo).unwrap();
        assert_eq!(loader.num_batches().unwrap(), 2);
        // no batch yet: no mask
        let e = err(loader.attention_mask());
        assert_eq!(e.status, Status::InvalidState, "{}", e);
        let b = load_all(&mut loader);
        assert_eq!(b.ids.len(), 4, "{:?}", side);
        // conversations: the labels are the assistant's answer and its <|im_end|>\n
        assert_eq!(tok.decode(&unmasked(&b.labels[0]), false).unwrap(), format!("{}<|im_end|>\n", convs[0][1].1));
        assert_eq!(tok.decode(&unmasked(&b.labels[1]), false).unwrap(), format!("{}<|im_end|>\n", convs[2][1].1));
        // prompt/completion: the completion and EOS (Qwen2's <|im_end|>)
        assert_eq!(tok.decode(&unmasked(&b.labels[2]), false).unwrap(), " 4<|im_end|>");
        // text: every token
        assert_eq!(unmasked(&b.labels[3]), real(&b.ids[3], &b.mask[3]));
        // the ids are the rendered conversation's, encoded without added special tokens
        let rendered = tok.apply_chat(ChatFormat::Auto, &convs[0], false).unwrap();
        assert_eq!(real(&b.ids[0], &b.mask[0]), tok.encode(&rendered, &plain).unwrap());
        // the padding is where the mask says, on the side asked for: the padding token, -100
        for r in 0..4 {
            let (w, n) = (b.ids[r].len(), real(&b.ids[r], &b.mask[r]).len());
            for k in 0..w {
                let pad = match side {
                    Side::Right => k >= n,
                    Side::Left => k < w - n,
                };
                assert_eq!(b.mask[r][k], if pad { 0 } else { 1 }, "{:?}: row {} column {}", side, r, k);
                if pad {
                    assert_eq!((b.ids[r][k], b.labels[r][k]), (1201, -100), "Qwen's padding token <|endoftext|>");
                }
            }
        }
    }

    // completion_only_loss off: every real token; max_length cuts; packing makes full blocks
    let cut = SftOptions::default().with_completion_only_loss(false).with_max_length(8);
    let b = load_all(&mut ctx.sft_dataloader(&tok, &path, &cut, &lo).unwrap());
    assert_eq!(b.ids.len(), 4);
    for r in 0..b.ids.len() {
        assert!(b.ids[r].len() <= 8);
        for k in 0..b.ids[r].len() {
            assert_eq!(b.labels[r][k], if b.mask[r][k] != 0 { b.ids[r][k] } else { -100 });
        }
    }
    let packed = load_all(&mut ctx.sft_dataloader(&tok, &path, &cut.with_packing(true), &lo).unwrap());
    let counts: Vec<i64> = packed.mask.iter().map(|m| m.iter().sum()).collect();
    assert!(counts[..counts.len() - 1].iter().all(|&n| n == 8), "{:?}", counts);
    assert!(counts.iter().sum::<i64>() > 40, "every token of the four examples, in blocks of 8: {:?}", counts);
    // an explicit padding id and a width rounded up to a multiple
    let o = SftOptions::default().with_pad_id(Some(0)).with_pad_to_multiple_of(16);
    let b = load_all(&mut ctx.sft_dataloader(&tok, &path, &o, &lo).unwrap());
    for r in 0..4 {
        assert_eq!(b.ids[r].len() % 16, 0);
        assert!(b.ids[r].iter().zip(&b.mask[r]).all(|(&i, &m)| m != 0 || i == 0));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The loader tokenizes the file once, when it is made: the tokenizer may be dropped right
/// after, and the loader still gives every batch.
#[test]
fn the_loader_outlives_its_tokenizer() {
    let dir = temp_dir("sft-drop");
    let path = write(&dir, "t.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two two\"}\n{\"text\": \"three three three\"}\n");
    let ctx = ctx(2);
    let tok = tokenizer("qwen2");
    let want: Vec<Vec<i64>> = ["one", "two two", "three three three"]
        .iter()
        .map(|t| {
            let mut ids = tok.encode(t, &EncodeOptions::default()).unwrap();
            ids.push(tok.eos_id().unwrap().unwrap()); // add_eos
            ids
        })
        .collect();
    let mut loader = ctx.sft_dataloader(&tok, &path, &SftOptions::default(), &DataLoaderOptions::default()).unwrap();
    drop(tok);
    std::fs::remove_dir_all(&dir).unwrap(); // and the file
    for epoch in 0..2 {
        let b = load_all(&mut loader);
        assert_eq!(b.ids, want, "epoch {}", epoch);
    }
}

/// Errors name the file and the line; the context keeps working.
#[test]
fn sft_errors_name_the_file_and_line() {
    let (json, _) = conversations();
    let dir = temp_dir("sft-errors");
    let ctx = ctx(3);
    let tok = tokenizer("qwen2");
    let (so, lo) = (SftOptions::default(), DataLoaderOptions::default());
    // a line that is not JSON
    let bad = write(&dir, "bad.jsonl", "{\"text\": \"ok\"}\nthis is not JSON\n");
    let e = err(ctx.sft_dataloader(&tok, &bad, &so, &lo));
    assert_eq!(e.status, Status::Format, "{}", e);
    assert!(e.message.contains("bad.jsonl:2"), "{}", e.message);
    // a field of the wrong type
    let bad = write(&dir, "typed.jsonl", "{\"text\": \"ok\"}\n{\"messages\": 3}\n");
    let e = err(ctx.sft_dataloader(&tok, &bad, &so, &lo));
    assert!(e.status == Status::Format && e.message.contains("typed.jsonl:2"), "{}", e);
    // a conversation the template refuses: Gemma has no system role
    let gemma = tokenizer("gemma");
    let sys = write(&dir, "sys.jsonl", &(messages_line(&json[1]) + "\n"));
    let e = err(ctx.sft_dataloader(&gemma, &sys, &so, &lo));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("sys.jsonl:1") && e.message.contains("system role"), "{}", e.message);
    // a missing file; a file with no example
    let e = err(ctx.sft_dataloader(&tok, dir.join("none.jsonl"), &so, &lo));
    assert!(e.status == Status::Io && e.message.contains("none.jsonl"), "{}", e);
    let empty = write(&dir, "empty.jsonl", "\n\n");
    let e = err(ctx.sft_dataloader(&tok, &empty, &so, &lo));
    assert!(e.status == Status::InvalidArgument && e.message.contains("no example"), "{}", e);
    // options out of their domain, naming the field
    let good = write(&dir, "good.jsonl", &(messages_line(&json[0]) + "\n"));
    for (field, o) in [
        ("max_length", so.with_max_length(-1)),
        ("packing", so.with_packing(true)),
        ("pad_to_multiple_of", so.with_pad_to_multiple_of(-2)),
        ("pad_id", so.with_pad_id(Some(-2))),
        ("pad_id", so.with_pad_id(Some(5000))),
    ] {
        let e = err(ctx.sft_dataloader(&tok, &good, &o, &lo));
        assert_eq!(e.status, Status::InvalidArgument, "{}: {}", field, e);
        assert!(e.message.contains(field), "{}: {}", field, e.message);
    }
    // a NUL byte in the path: refused before the call
    let e = err(ctx.sft_dataloader(&tok, dir.join("a\0b.jsonl"), &so, &lo));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    // and the context still makes loaders
    assert_eq!(load_all(&mut ctx.sft_dataloader(&tok, &good, &so, &lo).unwrap()).ids.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `LmDataOptions::padding_side`: the causal-LM loader pads on the left when asked, and its
/// mask says where; the rows' tokens are those of right padding. `lm_forward` takes the mask.
/// A loader of tensors has no mask.
#[test]
fn lm_loader_pads_on_the_side_asked_for() {
    let ctx = ctx(4);
    let seqs: Vec<Vec<i64>> = vec![vec![5, 6, 7], vec![10, 11, 12, 13, 14], vec![20, 21]];
    let tokens: Vec<i64> = seqs.concat();
    let mut offsets = vec![0i64];
    for s in &seqs {
        offsets.push(offsets.last().unwrap() + s.len() as i64);
    }
    let t = Tensor::from_slice(&tokens, &[tokens.len() as i64]).unwrap();
    let off = Tensor::from_slice(&offsets, &[offsets.len() as i64]).unwrap();
    let lo = DataLoaderOptions::default().with_batch_size(3);
    let mut by_side = Vec::new();
    for side in [Side::Right, Side::Left] {
        let lm = LmDataOptions::default().with_pad_id(99).with_padding_side(side);
        let mut loader = ctx.lm_dataloader(&t, Some(&off), &lm, &lo).unwrap();
        let b = load_all(&mut loader);
        assert_eq!(b.ids.len(), 3);
        for (r, s) in seqs.iter().enumerate() {
            assert_eq!(b.ids[r].len(), 5);
            assert_eq!(real(&b.ids[r], &b.mask[r]), *s, "{:?} row {}", side, r);
            let pad = 5 - s.len();
            let padding: Vec<usize> = (0..5).filter(|&k| b.mask[r][k] == 0).collect();
            let want: Vec<usize> = match side {
                Side::Right => (s.len()..5).collect(),
                Side::Left => (0..pad).collect(),
            };
            assert_eq!(padding, want, "{:?} row {}", side, r);
            for &k in &padding {
                assert_eq!((b.ids[r][k], b.labels[r][k]), (99, -100));
            }
            assert_eq!(unmasked(&b.labels[r]), *s);
        }
        by_side.push(b);
    }
    // lm_forward takes a left-padded batch with its mask: the targets are the labels after the
    // first column that are not -100 (as transformers shifts them: a row's first token is the
    // target of the padding before it)
    let model = ctx.load_pretrained(lm_fixture("llama-tiny"), &LmOptions::default()).unwrap();
    model.set_training(false).unwrap();
    let lm = LmDataOptions::default().with_padding_side(Side::Left);
    let mut loader = ctx.lm_dataloader(&t, Some(&off), &lm, &lo).unwrap();
    let batch = loader.next().unwrap().unwrap();
    let mask = loader.attention_mask().unwrap();
    let out = model.lm_forward(&batch.inputs, Some(&mask), batch.targets.as_ref()).unwrap();
    let targets = by_side[1].labels.iter().map(|row| row[1..].iter().filter(|&&l| l != -100).count() as i64).sum::<i64>();
    assert_eq!(out.num_tokens, targets);
    assert!(out.loss.unwrap().item().unwrap().is_finite());

    // a loader of tensors: batches without a mask
    let x = Tensor::from_slice(&[0f32; 8], &[4, 2]).unwrap();
    let mut plain = ctx.dataloader(&x, None, &DataLoaderOptions::default()).unwrap();
    plain.next().unwrap().unwrap();
    let e = err(plain.attention_mask());
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("no attention mask"), "{}", e.message);
}

/// A left-padded batch of prompts (5 and 2 tokens) generates, greedily, row by row what each
/// prompt alone generates, with and without the KV cache; the output starts with the padded
/// prompts. Right padding, a row without tokens and a mask of another shape are refused.
#[test]
fn padded_batch_generates_each_prompt_as_alone() {
    let ctx = ctx(5);
    let model = ctx.load_pretrained(lm_fixture("llama-tiny"), &LmOptions::default()).unwrap();
    model.set_training(false).unwrap();
    let prompts: [&[i64]; 2] = [&[5, 17, 3, 99, 42], &[64, 8]];
    let s = 5usize;
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for p in prompts {
        ids.extend(std::iter::repeat(0).take(s - p.len()).chain(p.iter().copied()));
        mask.extend((0..s).map(|k| (k >= s - p.len()) as i64));
    }
    let ids_t = Tensor::from_slice(&ids, &[2, s as i64]).unwrap();
    let mask_t = Tensor::from_slice(&mask, &[2, s as i64]).unwrap();
    let n = 6usize;
    for cache in [true, false] {
        let opts = GenerateOptions::default().with_max_new_tokens(n as i64).with_use_cache(cache);
        let out = model.generate_padded(&ids_t, &mask_t, &opts).unwrap();
        assert_eq!(out.shape().unwrap(), vec![2, (s + n) as i64]);
        let out = out.to_vec::<i64>().unwrap();
        for (r, p) in prompts.iter().enumerate() {
            let row = &out[r * (s + n)..(r + 1) * (s + n)];
            assert_eq!(&row[..s], &ids[r * s..(r + 1) * s], "row {}: the padded prompt", r);
            let alone = model.generate(&Tensor::from_slice(p, &[1, p.len() as i64]).unwrap(), &opts).unwrap();
            let alone = alone.to_vec::<i64>().unwrap();
            assert_eq!(&row[s..], &alone[p.len()..], "row {} ({} the cache): {:?} vs alone {:?}", r, if cache { "with" } else { "without" }, row, alone);
        }
    }
    // an int32 mask is accepted too
    let mask32: Vec<i32> = mask.iter().map(|&m| m as i32).collect();
    let opts = GenerateOptions::default().with_max_new_tokens(2);
    assert!(model.generate_padded(&ids_t, &Tensor::from_slice(&mask32, &[2, s as i64]).unwrap(), &opts).is_ok());

    // right padding: refused, naming the row and the side generation needs
    let right: Vec<i64> = vec![1, 1, 1, 1, 1, 1, 1, 0, 0, 0];
    let e = err(model.generate_padded(&ids_t, &Tensor::from_slice(&right, &[2, 5]).unwrap(), &opts));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("row 1") && e.message.contains("padding after a token"), "{}", e.message);
    let empty: Vec<i64> = vec![0, 0, 0, 0, 0, 1, 1, 1, 1, 1];
    let e = err(model.generate_padded(&ids_t, &Tensor::from_slice(&empty, &[2, 5]).unwrap(), &opts));
    assert!(e.status == Status::InvalidArgument && e.message.contains("no token"), "{}", e);
    let e = err(model.generate_padded(&ids_t, &Tensor::from_slice(&[1i64; 4], &[2, 2]).unwrap(), &opts));
    assert!(e.status == Status::InvalidArgument && e.message.contains("attention_mask"), "{}", e);
    let e = err(model.generate_padded(&ids_t, &Tensor::from_slice(&[1f32; 10], &[2, 5]).unwrap(), &opts));
    assert!(e.status == Status::InvalidArgument && e.message.contains("attention_mask"), "{}", e);
    // and the model still generates
    assert!(model.generate_padded(&ids_t, &mask_t, &opts).is_ok());
}

/// examples/c/finetune_lm.c's flow, small: a Qwen2-shaped model of the tokenizer's vocabulary
/// trains on the SFT batches (`train_micro_batches` with `Loss::CausalLm`, which passes the
/// mask), then answers chat prompts rendered with the generation prompt, encoded as one batch
/// padded on the left: each row as its prompt alone.
#[test]
fn fine_tune_then_answer_a_batch_of_chat_prompts() {
    let (json, _) = conversations();
    let dir = temp_dir("sft-flow");
    let config = write(
        &dir,
        "config.json",
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"vocab_size\": 1203, \
         \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \
         \"num_key_value_heads\": 1, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \
         \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, \"eos_token_id\": 1200}",
    );
    let lines: Vec<String> = json.iter().map(messages_line).collect(); // the three conversations
    let data = write(&dir, "train.jsonl", &(lines.join("\n") + "\n"));
    let ctx = ctx(6);
    let tok = tokenizer("qwen2");
    let model = ctx.create_lm(&config, &LmOptions::default()).unwrap();
    let opt = ctx.adamw(&model, &accel::AdamWOptions::default().with_lr(1e-2)).unwrap();
    let so = SftOptions::default().with_padding_side(Side::Left);
    let mut loader = ctx.sft_dataloader(&tok, &data, &so, &DataLoaderOptions::default().with_batch_size(3)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, Some(&loader)).unwrap();
    let mut losses = Vec::new();
    for _ in 0..6 {
        let r = ctx.train_micro_batches(&model, &mut loader, Loss::CausalLm, 1, 0.0).unwrap();
        if r.micro_batches == 1 {
            losses.push(r.mean_loss);
        }
    }
    assert!(losses.len() >= 3 && losses.iter().all(|l| l.is_finite()), "{:?}", losses);
    println!("SFT losses of the same batch of 3 conversations: {:?}", losses);
    assert!(losses.last().unwrap() < &losses[0], "the loss falls: {:?}", losses);

    // answer two questions from one left-padded batch of rendered chat prompts
    let questions = ["What is 12 plus 7?", "Hi"];
    let texts: Vec<String> = questions
        .iter()
        .map(|q| tok.apply_chat(ChatFormat::Auto, &[("system", "Be brief."), ("user", q)], true).unwrap())
        .collect();
    let enc = EncodeOptions::default().with_add_special_tokens(false).with_padding_side(Side::Left);
    let (ids, mask) = tok.encode_batch(&texts, &enc).unwrap();
    let eos = tok.eos_id().unwrap();
    let opts = GenerateOptions::default().with_max_new_tokens(5).with_eos_token_id(eos);
    model.set_training(false).unwrap();
    let out = model.generate_padded(&ids, &mask, &opts).unwrap();
    let w = ids.shape().unwrap()[1] as usize;
    let out = out.to_vec::<i64>().unwrap();
    for (r, text) in texts.iter().enumerate() {
        let alone = tok.encode(text, &enc).unwrap();
        let mine = model.generate(&Tensor::from_slice(&alone, &[1, alone.len() as i64]).unwrap(), &opts).unwrap();
        let mine = mine.to_vec::<i64>().unwrap();
        assert_eq!(&out[r * (w + 5) + w..(r + 1) * (w + 5)], &mine[alone.len()..], "question {}", r);
        tok.decode(&mine[alone.len()..], true).unwrap(); // ids of the vocabulary: decodable
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
