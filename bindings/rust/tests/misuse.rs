//! Misuse, in Rust's terms: every case ends in `Err(accel::Error)` (or a compile error, see
//! the `compile_fail` doctests of `src/lib.rs`), never a crash, an abort or a hang.
//!
//! * the error types cross threads and box into `Box<dyn Error + Send + Sync>` (`?`);
//! * a NUL byte in any string or path given to the binding: `InvalidArgument`, nothing of the
//!   call done (no file written at the truncated path);
//! * wrong dtypes and shapes given to the library's functions;
//! * panics in the simulator's closure (the only callback of the ABI): on one rank, on every
//!   rank, with a non-string payload, while peers wait in a collective;
//! * a rank that leaves while its peer waits in a collective: an error within the timeout;
//! * contexts used from several threads, each its own (what `Send` allows): independent;
//! * tokenizers given bad text, ids, options and paths, and their ids given to a model whose
//!   vocabulary is smaller: errors, and the tokenizer keeps working;
//! * fine-tuning misused (the C suite's cases of `accel_tokenizer_apply_chat`,
//!   `accel_sft_dataloader_create`, `accel_dataloader_attention_mask` and
//!   `accel_lm_generate_padded` that safe Rust can express): errors, and everything keeps working.
mod common;

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel::{
    estimate_memory, sim, ChatFormat, ChatMessage, Context, DataLoaderOptions, EncodeOptions, Error, GenerateOptions,
    LmDataOptions, LmOptions, LoraOptions, MemoryEstimateOptions, MlpOptions, Options, ProjectOptions, ReduceOp, SftOptions,
    SimError, SimOptions, SimReport, Status, Tensor, Tokenizer, TrackerOptions,
};
use common::{cpu_options, ctx, temp_dir};

fn assert_send_sync_static<T: Send + Sync + 'static>() {}

/// Error and SimError are `Send + Sync + 'static`: `?` converts them into
/// `Box<dyn Error + Send + Sync>` (what anyhow and most applications use).
#[test]
fn error_types_are_send_sync_static() {
    assert_send_sync_static::<Error>();
    assert_send_sync_static::<SimError>();
    assert_send_sync_static::<SimReport>();
    assert_send_sync_static::<Status>();
    assert_send_sync_static::<Tokenizer>(); // immutable after loading: shared by threads

    fn failing_sim() -> Result<(), Box<dyn StdError + Send + Sync>> {
        sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
            if ctx.process_index()? == 1 {
                return Err(Error::new(Status::InvalidState, "rank 1 says no"));
            }
            Ok(())
        })?;
        Ok(())
    }
    fn failing_call() -> Result<(), Box<dyn StdError + Send + Sync>> {
        Tensor::from_slice(&[1f32], &[2])?;
        Ok(())
    }
    let e = failing_sim().unwrap_err();
    assert!(e.to_string().contains("rank 1 says no"), "{}", e);
    let sim_error = e.downcast::<SimError>().unwrap();
    assert_eq!(sim_error.rank, Some(1));
    assert_eq!(sim_error.error.status, Status::InvalidState);
    assert_eq!(sim_error.source().unwrap().to_string(), sim_error.error.to_string());
    // the SimError (report included) moves to and is read from other threads
    let shared = std::sync::Arc::new(*sim_error);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let s = shared.clone();
            std::thread::spawn(move || s.report.as_ref().unwrap().ranks().unwrap().len())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 2);
    }
    let e = failing_call().unwrap_err();
    assert_eq!(e.downcast_ref::<Error>().unwrap().status, Status::InvalidArgument);
}

fn nul(r: accel::Result<impl Sized>, what: &str) {
    match r {
        Ok(_) => panic!("{}: a string with a NUL byte was accepted", what),
        Err(e) => {
            assert_eq!(e.status, Status::InvalidArgument, "{}: {}", what, e);
            assert!(e.message.contains("NUL"), "{}: {}", what, e.message);
        }
    }
}

/// Every string and path that crosses into C is checked for NUL: `InvalidArgument`, not a
/// panic and not a shorter string (a save would otherwise write to the truncated path).
#[test]
fn a_nul_byte_in_any_string_is_an_error_not_a_truncation() {
    let dir = temp_dir("nul");
    let cut = dir.join("cut");
    let at = |name: &str| -> PathBuf {
        let mut s = cut.clone().into_os_string();
        s.push(name);
        PathBuf::from(s)
    };
    let ctx = ctx(0);
    let model = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap();
    let t = Tensor::from_slice(&[1i64, 2], &[2]).unwrap();

    nul(ctx.load_torchscript(at("\0.pt")), "load_torchscript");
    nul(ctx.load_pretrained(at("\0dir"), &LmOptions::default()), "load_pretrained");
    nul(ctx.create_lm(at("\0.json"), &LmOptions::default()), "create_lm");
    nul(ctx.save_model(&model, at("\0.safetensors")), "save_model");
    nul(model.save(at("\0.safetensors")), "Model::save");
    nul(ctx.save_pretrained(&model, at("\0dir")), "save_pretrained");
    nul(model.save_pretrained(at("\0dir")), "Model::save_pretrained");
    nul(model.save_adapter(at("\0dir")), "save_adapter");
    nul(model.load_adapter(at("\0dir")), "load_adapter");
    nul(model.add_lora(&LoraOptions::default().with_target_modules(vec!["q\0proj".into()])), "LoraOptions.target_modules");
    nul(ctx.print("a\0b"), "print");
    nul(ctx.sim_charge_compute(0.0, Some("a\0b")), "sim_charge_compute");
    nul(ctx.set_project(&ProjectOptions::new(at("\0project"))), "set_project");
    nul(ctx.save_state(Some(&at("\0ckpt"))), "save_state");
    nul(ctx.load_state(Some(&at("\0ckpt"))), "load_state");
    nul(ctx.init_trackers(&TrackerOptions::new(at("\0runs"))), "init_trackers");
    nul(Tensor::read_token_file(at("\0.bin")), "read_token_file");
    nul(t.write_token_file(at("\0.bin"), 2), "write_token_file");
    nul(estimate_memory("llama\0-7b", &MemoryEstimateOptions::default()), "estimate_memory");
    nul(Tokenizer::load(at("\0tokenizer.json")), "Tokenizer::load");
    let tok = Tokenizer::load(tokenizer_fixture("qwen2")).unwrap();
    nul(tok.token_to_id("<|im_\0start|>"), "Tokenizer::token_to_id");
    // text is bytes with a length, not a C string: a NUL byte in it is text, not an error
    assert!(tok.encode("a\0b", &EncodeOptions::default()).is_ok());
    // a chat message's role and content are C strings
    nul(tok.apply_chat(ChatFormat::Auto, &[("user", "a\0b")], false), "Tokenizer::apply_chat content");
    nul(tok.apply_chat(ChatFormat::Auto, &[ChatMessage::new("us\0er", "hi")], false), "Tokenizer::apply_chat role");
    nul(ctx.sft_dataloader(&tok, at("\0.jsonl"), &SftOptions::default(), &DataLoaderOptions::default()), "sft_dataloader");
    nul(
        estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_lora_rank(8).with_lora_target_modules(vec!["q\0".into()])),
        "MemoryEstimateOptions.lora_target_modules",
    );
    for (what, s) in [
        ("device_memory", SimOptions::default().with_device_memory(Some("1\0GiB"))),
        ("topology", SimOptions::default().with_topology(Some("8x\0H100"))),
        ("faults", SimOptions::default().with_faults(Some("kill:0\0@collective:1"))),
        ("trace_path", SimOptions::default().with_trace_path(Some(Path::new("a\0b")))),
    ] {
        let e = sim::run(&s, &Options::default(), |_| panic!("no rank may run")).unwrap_err();
        assert_eq!(e.error.status, Status::InvalidArgument, "{}", what);
        assert!(e.error.message.contains("NUL") && e.error.message.contains(what), "{}", e.error.message);
        assert!(e.report.is_none() && e.rank.is_none());
    }
    // nothing was written at the truncated path, and the context still works
    assert!(!cut.exists() && std::fs::read_dir(&dir).unwrap().next().is_none(), "a file appeared in {}", dir.display());
    let out = dir.join("model.safetensors");
    ctx.save_model(&model, &out).unwrap();
    assert!(out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Wrong dtypes and shapes given to the library's functions: `InvalidArgument` with the
/// library's message, and the objects keep working.
#[test]
fn wrong_dtypes_and_shapes_are_errors() {
    let ctx = ctx(1);
    let model = ctx.mlp(&MlpOptions::new(&[4, 3])).unwrap();
    let x = Tensor::from_slice(&[0.5f32; 8], &[2, 4]).unwrap();
    let wrong_width = Tensor::from_slice(&[0.5f32; 10], &[2, 5]).unwrap();
    let ints = Tensor::from_slice(&[1i64; 8], &[2, 4]).unwrap();
    for (what, r) in [("width", model.forward1(&wrong_width)), ("dtype", model.forward1(&ints))] {
        let e = r.unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{}: {}", what, e);
        assert!(!e.message.is_empty());
    }
    assert_eq!(model.forward(&[]).unwrap_err().status, Status::InvalidArgument);
    let logits = model.forward1(&x).unwrap();
    // cross-entropy: float targets, targets of another batch size, a class out of range
    let float_targets = Tensor::from_slice(&[1f32, 0.0], &[2]).unwrap();
    let three = Tensor::from_slice(&[1i64, 0, 2], &[3]).unwrap();
    let out_of_range = Tensor::from_slice(&[7i64, 0], &[2]).unwrap();
    for (what, t) in [("float", &float_targets), ("batch", &three), ("class", &out_of_range)] {
        let e = ctx.cross_entropy(&logits, t).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{}: {}", what, e);
    }
    // mse of different shapes
    let e = ctx.mse(&logits, &x).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    // a dataloader whose targets have another number of samples
    let e = ctx.dataloader(&x, Some(&three), &accel::DataLoaderOptions::default()).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    // collectives of tensors whose shapes differ across ranks: an error, not a hang
    let e = sim::run(&SimOptions::with_world_size(2).with_timeout_seconds(10.0), &cpu_options(0), |ctx| {
        let n = 1 + ctx.process_index()? as usize;
        ctx.reduce(&Tensor::from_slice(&vec![1f32; n], &[n as i64])?, ReduceOp::Sum)?;
        Ok(())
    })
    .unwrap_err();
    assert_ne!(e.error.status, Status::Internal, "{}", e);
    // the model and the loss still work
    let y = Tensor::from_slice(&[1i64, 0], &[2]).unwrap();
    assert!(ctx.cross_entropy(&model.forward1(&x).unwrap(), &y).unwrap().item().unwrap().is_finite());
}

/// A panic in the simulator's closure (the ABI's one callback) fails its rank with
/// `Status::Internal` and the panic's message; the peers waiting for it in a collective get
/// an error, not a hang; `sim::run` returns `Err` (no abort, no unwinding into C).
#[test]
fn panics_in_the_callback_are_errors() {
    // every rank panics, one with a non-string payload
    let e = sim::run(&SimOptions::with_world_size(3), &cpu_options(0), |ctx| {
        match ctx.process_index()? {
            0 => panic!("rank zero gives up"),
            1 => std::panic::panic_any(42u32),
            _ => panic!("{}", String::from("an owned message")),
        }
    })
    .unwrap_err();
    assert_eq!(e.error.status, Status::Internal);
    assert_eq!(e.rank, Some(0));
    assert!(e.error.message.contains("rank 0 panicked: rank zero gives up"), "{}", e.error.message);
    let mut by_rank = e.rank_errors.clone();
    by_rank.sort_by_key(|(r, _)| *r);
    assert_eq!(by_rank.len(), 3);
    assert!(by_rank[1].1.message.contains("non-string payload"), "{}", by_rank[1].1.message);
    assert!(by_rank[2].1.message.contains("an owned message"), "{}", by_rank[2].1.message);

    // one rank panics after a collective, the other waits in the next one
    let started = Instant::now();
    let e = sim::run(&SimOptions::with_world_size(2).with_timeout_seconds(10.0), &cpu_options(0), |ctx| {
        let t = Tensor::from_slice(&[1f32], &[1])?;
        ctx.reduce(&t, ReduceOp::Sum)?;
        if ctx.process_index()? == 1 {
            panic!("rank one panics between collectives");
        }
        ctx.reduce(&t, ReduceOp::Sum)?;
        ctx.barrier()?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.rank, Some(1), "{}", e);
    assert_eq!(e.error.status, Status::Internal);
    assert!(e.error.message.contains("rank one panics"), "{}", e.error.message);
    let outcomes = e.report.as_ref().unwrap().ranks().unwrap();
    assert!(outcomes[0].status.is_some(), "rank 0 must fail (its peer is gone): {:?}", outcomes[0]);
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());

    // the process is fine: a clean run afterwards
    sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| ctx.barrier()).unwrap();
}

/// A rank that returns while its peer waits for it in a collective: the peer gets an error
/// (the simulator knows the rank has finished), well within the run's timeout.
#[test]
fn a_collective_the_other_rank_never_joins_is_an_error_not_a_hang() {
    let started = Instant::now();
    let e = sim::run(&SimOptions::with_world_size(2).with_timeout_seconds(5.0), &cpu_options(0), |ctx| {
        if ctx.process_index()? == 0 {
            ctx.barrier()?;
        }
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.rank, Some(0), "{}", e);
    assert!(matches!(e.error.status, Status::Communication | Status::Timeout | Status::InvalidState), "{}", e);
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

/// `Context` is `Send`, not `Sync`: each thread uses its own context (or one moved to it);
/// several such threads train at once, independently, with the same results as alone.
#[test]
fn contexts_on_several_threads_are_independent() {
    fn train(seed: u64) -> Vec<f32> {
        let ctx = Context::new(&cpu_options(seed)).unwrap();
        train_on(&ctx)
    }
    fn train_on(ctx: &Context) -> Vec<f32> {
        let model = ctx.mlp(&MlpOptions::new(&[4, 8, 2])).unwrap();
        let opt = ctx.sgd(&model, &accel::SgdOptions::default().with_lr(0.1)).unwrap();
        ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
        let x = Tensor::from_slice(&[0.25f32; 32], &[8, 4]).unwrap();
        let y = Tensor::from_slice(&[1i64; 8], &[8]).unwrap();
        for _ in 0..5 {
            let loss = ctx.cross_entropy(&model.forward1(&x).unwrap(), &y).unwrap();
            ctx.backward(&loss).unwrap();
            ctx.step().unwrap();
        }
        model.parameter(0).unwrap().to_vec::<f32>().unwrap()
    }
    let alone = train(7);
    let threads: Vec<_> = (0..3).map(|_| std::thread::spawn(|| train(7))).collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), alone);
    }
    // a context made here, moved to another thread, used there
    let moved = Context::new(&cpu_options(7)).unwrap();
    let got = std::thread::spawn(move || train_on(&moved)).join().unwrap();
    assert_eq!(got, alone);
}

fn tokenizer_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tokenizers").join(name)
}

/// A tokenizer given what it cannot use: text that is not UTF-8, ids outside its vocabulary,
/// options out of their domain, an empty batch, a path that is no tokenizer. Each is
/// `InvalidArgument` (or `Io`, `Format`) with the library's message, and the tokenizer keeps
/// working. Its ids given to a model with a smaller vocabulary: an error, not a crash.
#[test]
fn tokenizer_misuse_is_an_error() {
    let tok = Tokenizer::load(tokenizer_fixture("llama2")).unwrap();
    let n = tok.vocab_size().unwrap();
    let invalid = |r: accel::Result<()>, what: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{}: {}", what, e);
        assert!(e.message.starts_with("accel_tokenizer_"), "{}: {}", what, e.message);
    };
    let o = EncodeOptions::default();
    invalid(tok.encode(b"\xff\xfe", &o).map(|_| ()), "bytes that are not UTF-8");
    invalid(tok.encode_batch(&[&b"ok"[..], &b"\xe2\x82"[..]], &o).map(|_| ()), "a truncated sequence in a batch");
    invalid(tok.decode(&[n], false).map(|_| ()), "an id past the vocabulary");
    invalid(tok.decode(&[i64::MIN], true).map(|_| ()), "a negative id");
    invalid(tok.id_to_token(i64::MAX).map(|_| ()), "id_to_token past the vocabulary");
    invalid(tok.encode("x", &o.with_max_length(-5)).map(|_| ()), "a negative max_length");
    invalid(tok.encode_batch(&["x"], &o.with_pad_id(Some(n + 1))).map(|_| ()), "a pad_id outside the vocabulary");
    let unbounded = o.with_pad_to_max_length(true);
    invalid(tok.encode_batch(&["x"], &unbounded).map(|_| ()), "pad_to_max_length without max_length");
    invalid(tok.encode_batch(&Vec::<String>::new(), &o).map(|_| ()), "an empty batch");
    assert_eq!(Tokenizer::load("").unwrap_err().status, Status::InvalidArgument);
    let dir = temp_dir("tokenizer-misuse");
    assert_eq!(Tokenizer::load(dir.join("absent.model")).unwrap_err().status, Status::Io);
    std::fs::write(dir.join("tokenizer.model"), b"not a SentencePiece model").unwrap();
    let e = Tokenizer::load(dir.join("tokenizer.model")).unwrap_err();
    assert!(matches!(e.status, Status::Format | Status::Unsupported), "{}", e);
    std::fs::remove_dir_all(&dir).unwrap();
    // the raw constructor refuses NULL
    assert!(unsafe { Tokenizer::from_raw(std::ptr::null_mut()) }.is_none());

    // ids of a 1000-token vocabulary given to a model of 128: the model refuses them
    let ctx = ctx(5);
    let lm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lm/llama-tiny");
    let model = ctx.load_pretrained(lm, &LmOptions::default()).unwrap();
    let (ids, mask) = tok.encode_batch(&["Zürich façade déjà-vu", "Straße"], &o).unwrap();
    assert!(ids.to_vec::<i64>().unwrap().iter().any(|&i| i >= 128));
    let e = model.lm_forward(&ids, Some(&mask), None).err().expect("ids past the vocabulary were accepted");
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("out of range"), "{}", e.message);

    // and after all that, the tokenizer still encodes and decodes
    let ids = tok.encode("still fine", &o).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "still fine");
}

/// Fine-tuning misused: the C suite's cases (tests/misuse/cases_tokenizer.cpp's chat_and_sft,
/// cases_lm.cpp's attention mask and padded generation) that safe Rust can express. NULL
/// pointers, unknown enum values and objects of another context cannot be written; every
/// other misuse is an error with the library's message, and everything keeps working.
#[test]
fn fine_tuning_misuse_is_an_error() {
    let dir = temp_dir("sft-misuse");
    let qwen = Tokenizer::load(tokenizer_fixture("qwen2")).unwrap();
    let chat = [("user", "hi"), ("assistant", "hello")];
    let expect = |r: accel::Result<String>, status: Status, words: &[&str], what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.status, status, "{}: {}", what, e);
        for w in words {
            assert!(e.message.contains(w), "{}: {:?} not in {}", what, w, e.message);
        }
    };
    // apply_chat: what the templates refuse, a format without its special tokens, no template,
    // a template of none of the formats, content that is not UTF-8 cannot be a &str
    let gemma = Tokenizer::load(tokenizer_fixture("gemma")).unwrap();
    let mistral = Tokenizer::load(tokenizer_fixture("mistral")).unwrap();
    let gpt2 = Tokenizer::load(tokenizer_fixture("gpt2")).unwrap();
    let a = ChatFormat::Auto;
    let arg = Status::InvalidArgument;
    expect(gemma.apply_chat(a, &[("system", "be brief"), ("user", "hi")], false), arg, &["system role"], "Gemma: a system role");
    expect(mistral.apply_chat(a, &[("user", "a"), ("user", "b")], false), arg, &["alternate", "message 1"], "Mistral: roles that do not alternate");
    expect(qwen.apply_chat(ChatFormat::Llama3, &chat, false), arg, &["BOS"], "Llama 3 on a tokenizer without BOS");
    expect(gpt2.apply_chat(a, &chat, false), arg, &["chat_template"], "Auto without a chat_template");
    let own = dir.join("tok");
    std::fs::create_dir(&own).unwrap();
    std::fs::copy(tokenizer_fixture("qwen2").join("tokenizer.json"), own.join("tokenizer.json")).unwrap();
    std::fs::write(own.join("tokenizer_config.json"), "{\"chat_template\": \"{{ messages }}\"}").unwrap();
    let unknown = Tokenizer::load(&own).unwrap();
    expect(unknown.apply_chat(a, &chat, false), Status::Unsupported, &["chat_template", "none of the formats"], "a template of no known format");
    assert!(unknown.apply_chat(ChatFormat::ChatMl, &chat, false).is_ok(), "a named format needs no template");

    // sft_dataloader: files and options the library refuses, naming the file and line or the field
    let ctx = ctx(7);
    let lo = DataLoaderOptions::default();
    let good = dir.join("sft.jsonl");
    std::fs::write(&good, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n").unwrap();
    let sft = |path: &Path, o: SftOptions| ctx.sft_dataloader(&qwen, path, &o, &lo).map(|_| String::new());
    let so = SftOptions::default();
    let file = |name: &str, text: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    expect(sft(&dir.join("none.jsonl"), so), Status::Io, &["none.jsonl"], "a missing file");
    expect(sft(Path::new(""), so), arg, &["path"], "an empty path");
    expect(sft(&file("bad1.jsonl", b"{\"text\": \"ok\"}\nnot json\n"), so), Status::Format, &["bad1.jsonl:2"], "a line that is not JSON");
    expect(sft(&file("bad2.jsonl", b"{\"other\": 1}\n"), so), Status::Format, &["bad2.jsonl:1", "messages"], "none of the shapes");
    expect(sft(&file("bad3.jsonl", b"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}\n"), so), Status::Format, &["bad3.jsonl:1", "content"], "content not a string");
    expect(sft(&file("bad4.jsonl", b"{\"text\": \"a\xff\"}\n"), so), Status::Format, &["bad4.jsonl:1", "UTF-8"], "a line that is not UTF-8");
    expect(sft(&file("empty.jsonl", b""), so), arg, &["empty.jsonl", "no example"], "an empty file");
    expect(sft(&good, so.with_max_length(-1)), arg, &["max_length", "-1"], "max_length=-1");
    expect(sft(&good, so.with_packing(true)), arg, &["packing", "max_length"], "packing without max_length");
    expect(sft(&good, so.with_pad_to_multiple_of(-2)), arg, &["pad_to_multiple_of", "-2"], "pad_to_multiple_of=-2");
    expect(sft(&good, so.with_pad_id(Some(-2))), arg, &["pad_id", "-2"], "pad_id=-2");
    expect(sft(&good, so.with_pad_id(Some(5000))), arg, &["pad_id", "5000"], "pad_id outside the vocabulary");
    expect(sft(&good, so.with_chat_format(ChatFormat::Gemma)), Status::InvalidArgument, &["sft.jsonl:1"], "a format whose tokens the tokenizer lacks");
    let bad_loader = DataLoaderOptions::default().with_batch_size(0);
    let e = ctx.sft_dataloader(&qwen, &good, &so, &bad_loader).map(|_| ()).expect_err("batch_size 0");
    assert!(e.status == arg && e.message.contains("batch_size"), "{}", e);

    // attention_mask: before the first batch and after the epoch (no batch), a loader of tensors
    let mut loader = ctx.sft_dataloader(&qwen, &good, &so, &lo).unwrap();
    let mask = |l: &accel::DataLoader<'_>| l.attention_mask().map(|_| String::new());
    expect(mask(&loader), Status::InvalidState, &["no batch", "accel_dataloader_next"], "before the first batch");
    while loader.next().unwrap().is_some() {
        assert!(loader.attention_mask().is_ok());
    }
    expect(mask(&loader), Status::InvalidState, &["no batch"], "after the end of the epoch");
    let toks = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6, 7, 8, 9, 10], &[10]).unwrap();
    let mut lm = ctx.lm_dataloader(&toks, None, &LmDataOptions::default().with_block_size(4), &lo).unwrap();
    expect(mask(&lm), Status::InvalidState, &["no batch"], "an LM loader before its first batch");
    lm.next().unwrap().unwrap();
    assert_eq!(lm.attention_mask().unwrap().to_vec::<i64>().unwrap(), vec![1, 1, 1, 1]);
    let x = Tensor::from_slice(&[0f32; 4], &[2, 2]).unwrap();
    let mut plain = ctx.dataloader(&x, None, &lo).unwrap();
    plain.next().unwrap().unwrap();
    expect(mask(&plain), arg, &["no attention mask"], "a loader of tensors");

    // generate_padded (the C suite's two prompts of 3 positions)
    let lm_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lm/gpt2-tiny");
    let model = ctx.load_pretrained(lm_dir, &LmOptions::default()).unwrap();
    model.set_training(false).unwrap();
    let ids = Tensor::from_slice(&[0i64, 5, 6, 7, 8, 9], &[2, 3]).unwrap();
    let m = |v: [i64; 6]| Tensor::from_slice(&v, &[2, 3]).unwrap();
    let g = GenerateOptions::default().with_max_new_tokens(2);
    let gen = |mask: &Tensor, o: &GenerateOptions| model.generate_padded(&ids, mask, o).map(|_| String::new());
    let left = m([0, 1, 1, 1, 1, 1]);
    expect(gen(&m([1, 1, 0, 1, 1, 1]), &g), arg, &["row 0", "padding after a token", "LEFT"], "right padding");
    expect(gen(&m([0, 0, 0, 1, 1, 1]), &g), arg, &["row 0", "no token"], "a row without tokens");
    expect(gen(&Tensor::from_slice(&[1i64; 4], &[2, 2]).unwrap(), &g), arg, &["attention_mask", "shape"], "a mask of another shape");
    expect(gen(&Tensor::from_slice(&[1f32; 6], &[2, 3]).unwrap(), &g), arg, &["attention_mask", "int64"], "a float mask");
    expect(gen(&left, &g.clone().with_max_new_tokens(0)), arg, &["max_new_tokens"], "max_new_tokens=0");
    let mlp = ctx.mlp(&MlpOptions::new(&[3, 2])).unwrap();
    let e = mlp.generate_padded(&ids, &left, &g).map(|_| ()).expect_err("an MLP");
    assert!(e.status == arg && e.message.contains("not a causal LM"), "{}", e);

    // and after all that, everything still works
    assert_eq!(model.generate_padded(&ids, &left, &g).unwrap().shape().unwrap(), vec![2, 5]);
    assert!(qwen.apply_chat(ChatFormat::Auto, &chat, true).unwrap().ends_with("<|im_start|>assistant\n"));
    assert_eq!(ctx.sft_dataloader(&qwen, &good, &so, &lo).unwrap().num_batches().unwrap(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
