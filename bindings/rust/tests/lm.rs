//! Language models through the Rust binding: a Hugging Face directory in, training with the
//! token-mean loss, a directory out that loads back to the same logits, and the errors.
mod common;

use std::path::PathBuf;

use accel::{
    estimate_memory, AdafactorOptions, AdamWOptions, Attention, DType, GenerateOptions, LmDataOptions, LmOptions, LoraOptions,
    MemoryEstimateOptions, MlpOptions, Offload, OptimizerKind, Precision, Quantization, Status, Strategy, Tensor,
};
use common::{ctx, temp_dir};

/// The error of a call that must fail (the Ok types need not be Debug).
fn err<T>(r: accel::Result<T>) -> accel::Error {
    match r {
        Ok(_) => panic!("the call succeeded; an error was expected"),
        Err(e) => e,
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lm").join(name)
}

/// Two rows of 6 tokens; row 1 has 2 padding positions (mask 0, label -100).
fn batch() -> (Tensor, Tensor, Tensor, i64) {
    let ids: Vec<i64> = vec![5, 17, 3, 99, 42, 7, 11, 2, 64, 8, 0, 0]; // vocab_size 128
    let mask: Vec<i64> = vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0];
    let labels: Vec<i64> = ids.iter().zip(&mask).map(|(&i, &m)| if m == 1 { i } else { -100 }).collect();
    // targets are labels[:, 1:]: 5 in row 0, 3 in row 1
    (
        Tensor::from_slice(&ids, &[2, 6]).unwrap(),
        Tensor::from_slice(&mask, &[2, 6]).unwrap(),
        Tensor::from_slice(&labels, &[2, 6]).unwrap(),
        8,
    )
}

#[test]
fn load_train_save_and_reload() {
    let ctx = ctx(1);
    let opts = LmOptions::default().with_gradient_checkpointing(true);
    let model = ctx.load_pretrained(fixture("llama-tiny"), &opts).unwrap();
    let (n, _) = model.num_parameters().unwrap();
    assert_eq!(model.parameter_name(0).unwrap(), "model.embed_tokens.weight");
    assert!(n > 10);
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let (ids, mask, labels, targets) = batch();
    let mut losses = Vec::new();
    for _ in 0..5 {
        let out = model.lm_forward(&ids, Some(&mask), Some(&labels)).unwrap();
        assert_eq!(out.num_tokens, targets);
        assert_eq!(out.logits.shape().unwrap(), vec![2, 6, 128]);
        let loss = out.loss.expect("labels give a loss");
        losses.push(loss.item().unwrap());
        ctx.backward(&loss).unwrap();
        assert!(ctx.step().unwrap().stepped);
    }
    assert!(losses[4] < losses[0], "{:?}", losses);
    let dir = temp_dir("lm").join("trained");
    model.save_pretrained(&dir).unwrap();
    assert!(dir.join("config.json").is_file() && dir.join("model.safetensors").is_file());
    model.set_training(false).unwrap();
    let mine = model.lm_forward(&ids, Some(&mask), None).unwrap();
    assert!(mine.loss.is_none() && mine.num_tokens == 0);
    let back = ctx.load_pretrained(&dir, &LmOptions::default()).unwrap();
    back.set_training(false).unwrap();
    let again = back.lm_forward(&ids, Some(&mask), None).unwrap();
    assert_eq!(mine.logits.to_vec::<f32>().unwrap(), again.logits.to_vec::<f32>().unwrap());
}

#[test]
fn create_from_config_in_bf16() {
    let ctx = ctx(2);
    let opts = LmOptions::default().with_dtype(DType::BF16);
    let model = ctx.create_lm(fixture("gpt2-tiny").join("config.json"), &opts).unwrap();
    let (ids, mask, labels, _) = batch();
    let out = model.lm_forward(&ids, Some(&mask), Some(&labels)).unwrap();
    let l = out.loss.unwrap().item().unwrap();
    assert!(l.is_finite() && l > 0.0, "loss {}", l);
    let dir = temp_dir("lm-bf16").join("out");
    ctx.save_pretrained(&model, &dir).unwrap();
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    assert!(cfg.contains("\"dtype\": \"bfloat16\""), "{}", cfg);
}

#[test]
fn errors_name_the_problem() {
    let ctx = ctx(3);
    let e = err(ctx.load_pretrained(temp_dir("lm-missing").join("nothing"), &LmOptions::default()));
    assert_eq!(e.status, Status::Io);
    let e = err(ctx.load_pretrained(fixture("gpt2-tiny"), &LmOptions::default().with_dtype(DType::I64)));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("dtype"), "{}", e.message);
    let model = ctx.load_pretrained(fixture("gpt2-tiny"), &LmOptions::default()).unwrap();
    let bad = Tensor::from_slice(&[1i64, 100000], &[1, 2]).unwrap();
    let e = err(model.lm_forward(&bad, None, None));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("out of range"), "{}", e.message);
    let file = temp_dir("lm-file").join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let e = err(model.save_pretrained(&file));
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    let mlp = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap();
    let ids = Tensor::from_slice(&[1i64, 0], &[1, 2]).unwrap();
    assert_eq!(err(mlp.lm_forward(&ids, None, None)).status, Status::InvalidArgument);
}

#[test]
fn token_file_and_lm_loader() {
    let ctx = ctx(4);
    // 30 sequences of 2..=11 tokens
    let mut tokens = Vec::new();
    let mut offsets = vec![0i64];
    for s in 0..30i64 {
        let len = 2 + s % 10;
        for k in 0..len {
            tokens.push((s * 7 + k) % 128);
        }
        offsets.push(tokens.len() as i64);
    }
    let path = temp_dir("tok").join("corpus.tok");
    Tensor::from_slice(&tokens, &[tokens.len() as i64]).unwrap().write_token_file(&path, 2).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 24 + 2 * tokens.len() as u64);
    let back = Tensor::read_token_file(&path).unwrap();
    assert_eq!(back.to_vec::<i64>().unwrap(), tokens);
    let off = Tensor::from_slice(&offsets, &[offsets.len() as i64]).unwrap();
    let lm = LmDataOptions::default().with_pad_to_multiple_of(4);
    let opts = accel::DataLoaderOptions::default().with_batch_size(8);
    let mut loader = ctx.lm_dataloader(&back, Some(&off), &lm, &opts).unwrap();
    let model = ctx.load_pretrained(fixture("gpt2-tiny"), &LmOptions::default()).unwrap();
    let opt = ctx.adamw(&model, &AdamWOptions::default()).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, Some(&loader)).unwrap();
    let mut real = 0usize;
    for batch in loader.epoch_iter() {
        let batch = batch.unwrap();
        let labels = batch.targets.as_ref().unwrap();
        let shape = batch.inputs.shape().unwrap();
        assert_eq!(shape[1] % 4, 0);
        real += labels.to_vec::<i64>().unwrap().iter().filter(|&&v| v != -100).count();
        let out = model.lm_forward(&batch.inputs, None, Some(labels)).unwrap();
        ctx.backward(out.loss.as_ref().unwrap()).unwrap();
        ctx.step().unwrap();
    }
    assert_eq!(real, tokens.len());
    let e = err(Tensor::read_token_file(temp_dir("tok2").join("none.tok")));
    assert_eq!(e.status, Status::Io);
    let bad = Tensor::from_slice(&[0i64, 5, 3], &[3]).unwrap();
    let e = err(ctx.lm_dataloader(&back, Some(&bad), &LmDataOptions::default(), &opts));
    assert_eq!(e.status, Status::InvalidArgument);
}

#[test]
fn lora_train_save_and_reload() {
    let ctx = ctx(5);
    let model = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default()).unwrap();
    let opts = LoraOptions::default()
        .with_r(2)
        .with_alpha(4.0)
        .with_target_modules(vec!["q_proj".into(), "v_proj".into()]);
    model.add_lora(&opts).unwrap();
    let (n, _) = model.num_parameters().unwrap();
    assert_eq!(n, 8);
    assert_eq!(model.parameter_name(0).unwrap(), "model.layers.0.self_attn.q_proj.lora_A.weight");
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let (ids, mask, labels, _) = batch();
    for _ in 0..3 {
        let out = model.lm_forward(&ids, Some(&mask), Some(&labels)).unwrap();
        ctx.backward(out.loss.as_ref().unwrap()).unwrap();
        ctx.step().unwrap();
    }
    let dir = temp_dir("lora").join("adapter");
    model.save_adapter(&dir).unwrap();
    model.set_training(false).unwrap();
    let mine = model.lm_forward(&ids, Some(&mask), None).unwrap().logits.to_vec::<f32>().unwrap();
    let back = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default()).unwrap();
    back.load_adapter(&dir).unwrap();
    back.set_training(false).unwrap();
    assert_eq!(back.lm_forward(&ids, Some(&mask), None).unwrap().logits.to_vec::<f32>().unwrap(), mine);
    let bad = LoraOptions::default().with_target_modules(vec!["c_attn".into()]);
    let other = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default()).unwrap();
    assert_eq!(other.add_lora(&bad).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(model.add_lora(&opts).unwrap_err().status, Status::InvalidState);
}

#[test]
fn qlora_nf4_double_quant_forward_and_one_step() {
    let ctx = ctx(9);
    let opts = LmOptions::default().with_quantization(Quantization::Nf4).with_double_quant(true);
    let model = ctx.load_pretrained(fixture("llama-tiny"), &opts).unwrap();
    let (ids, mask, labels, targets) = batch();
    model.set_training(false).unwrap();
    let out = model.lm_forward(&ids, Some(&mask), None).unwrap();
    assert_eq!(out.logits.shape().unwrap(), vec![2, 6, 128]);
    let logits = out.logits.to_vec::<f32>().unwrap();
    assert!(logits.iter().all(|v| v.is_finite()));
    // the quantization took effect: the float32 model's logits differ
    let plain = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default()).unwrap();
    plain.set_training(false).unwrap();
    assert_ne!(plain.lm_forward(&ids, Some(&mask), None).unwrap().logits.to_vec::<f32>().unwrap(), logits);
    model.set_training(true).unwrap();
    // a quantized base trains through adapters only, and is not saved as a base
    let e = err(ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2)));
    assert_eq!(e.status, Status::InvalidState);
    assert!(e.message.contains("LoRA"), "{}", e.message);
    let dir = temp_dir("qlora").join("base");
    let e = err(model.save_pretrained(&dir));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("quantized"), "{}", e.message);
    assert!(!dir.exists());
    model.add_lora(&LoraOptions::default().with_r(2)).unwrap();
    let names = model.parameter_names().unwrap();
    assert!(!names.is_empty() && names.iter().all(|n| n.contains(".lora_A.") || n.contains(".lora_B.")), "{:?}", names);
    let params = |m: &accel::Model<'_>| -> Vec<Vec<f32>> {
        (0..names.len()).map(|i| m.parameter(i).unwrap().to_vec::<f32>().unwrap()).collect()
    };
    let before = params(&model);
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let out = model.lm_forward(&ids, Some(&mask), Some(&labels)).unwrap();
    assert_eq!(out.num_tokens, targets);
    let loss = out.loss.expect("labels give a loss");
    let l = loss.item().unwrap();
    assert!(l.is_finite() && l > 0.0, "loss {}", l);
    ctx.backward(&loss).unwrap();
    assert!(ctx.step().unwrap().stepped);
    let after = params(&model);
    assert!(after.iter().flatten().all(|v| v.is_finite()));
    let changed: Vec<&String> = names.iter().zip(before.iter().zip(&after)).filter(|(_, (b, a))| b != a).map(|(n, _)| n).collect();
    assert!(changed.iter().any(|n| n.contains(".lora_B.")), "changed: {:?}", changed);
}

#[test]
fn quantization_is_checked() {
    let ctx = ctx(10);
    // the enum cannot hold another value; a raw one (through sys) is refused by the library
    assert_eq!(Quantization::from_raw(42), None);
    let dir = std::ffi::CString::new(fixture("llama-tiny").to_str().unwrap()).unwrap();
    let mut raw = LmOptions::default().to_sys().unwrap();
    raw.quantization = 42;
    let mut out: *mut accel::sys::accel_model = std::ptr::null_mut();
    // SAFETY: a live context, a NUL-terminated path, an initialised options struct, a writable out pointer.
    let status = unsafe { accel::sys::accel_model_load_pretrained(ctx.as_raw(), dir.as_ptr(), &raw, &mut out) };
    assert_eq!(status, accel::sys::ACCEL_ERR_INVALID_ARGUMENT);
    assert!(out.is_null());
    assert!(ctx.last_error().contains("quantization"), "{}", ctx.last_error());
    // double quantization is NF4's and FP4's only
    let int8_dq = LmOptions::default().with_quantization(Quantization::Int8).with_double_quant(true);
    let e = err(ctx.load_pretrained(fixture("llama-tiny"), &int8_dq));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("double_quant"), "{}", e.message);
    for q in [Quantization::Fp4, Quantization::Int8] {
        let m = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default().with_quantization(q)).unwrap();
        assert!(m.num_parameters().unwrap().1 > 0);
    }
}

#[test]
fn adafactor_trains() {
    let ctx = ctx(6);
    let model = ctx.load_pretrained(fixture("llama-tiny"), &LmOptions::default()).unwrap();
    let opts = AdafactorOptions::default().with_lr(1e-2).with_relative_step(false).with_scale_parameter(false);
    let opt = ctx.adafactor(&model, &opts).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let (ids, mask, labels, _) = batch();
    let mut losses = Vec::new();
    for _ in 0..4 {
        let out = model.lm_forward(&ids, Some(&mask), Some(&labels)).unwrap();
        let loss = out.loss.unwrap();
        losses.push(loss.item().unwrap());
        ctx.backward(&loss).unwrap();
        ctx.step().unwrap();
    }
    assert!(losses[3] < losses[0], "{:?}", losses);
    let bad = AdafactorOptions::default().with_lr(1e-3);
    let e = err(ctx.adafactor(&model, &bad));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("relative_step"), "{}", e.message);
}

#[test]
fn generate_with_and_without_the_cache() {
    let ctx = ctx(7);
    let model = ctx.load_pretrained(fixture("gpt2-tiny"), &LmOptions::default()).unwrap();
    model.set_training(false).unwrap();
    let prompt = Tensor::from_slice(&[5i64, 17, 3, 99], &[1, 4]).unwrap();
    let opts = GenerateOptions::default().with_max_new_tokens(6);
    let out = model.generate(&prompt, &opts).unwrap();
    assert_eq!(out.shape().unwrap(), vec![1, 10]);
    let no_cache = opts.clone().with_use_cache(false);
    assert_eq!(out.to_vec::<i64>().unwrap(), model.generate(&prompt, &no_cache).unwrap().to_vec::<i64>().unwrap());
    let bad = GenerateOptions::default().with_max_new_tokens(100);
    assert_eq!(err(model.generate(&prompt, &bad)).status, Status::InvalidArgument); // past n_positions (64)
}

/// Parameters of Llama-2-7B (the named shape "llama-7b").
const LLAMA_7B: i64 = 6_738_415_616;

#[test]
fn estimate_memory_of_llama_7b() {
    let defaults = MemoryEstimateOptions::default();
    let e = estimate_memory("llama-7b", &defaults).unwrap();
    assert_eq!((e.parameters, e.trainable_parameters), (LLAMA_7B, LLAMA_7B));
    // fp32 AdamW on one process: 4 bytes of weights, 4 of gradients, 8 of moments per parameter
    let p = LLAMA_7B as u64;
    assert_eq!((e.weights, e.gradients, e.optimizer_state), (4 * p, 4 * p, 8 * p));
    assert!(e.activations > 0);
    assert!(e.total >= e.weights + e.gradients + e.optimizer_state + e.activations, "{:?}", e);
    assert_eq!(e.seq_len, 1024);
    assert!(e.attention == Attention::Eager || e.attention == Attention::Fused, "{:?}", e.attention);

    // LoRA on PEFT's default targets (q_proj, v_proj): A [r, 4096] + B [4096, r] per module and layer
    let lora = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_lora_rank(16)).unwrap();
    assert_eq!(lora.parameters, LLAMA_7B);
    assert_eq!(lora.trainable_parameters, 32 * 2 * 16 * (4096 + 4096));
    assert!(lora.total < e.total);
    let named = MemoryEstimateOptions::default()
        .with_lora_rank(16)
        .with_lora_target_modules(vec!["q_proj".to_string(), "v_proj".to_string()]);
    assert_eq!(estimate_memory("llama-7b", &named).unwrap(), lora);

    // ZeRO-3 over 64 processes with bf16 autocast: (4 + 2 + 2 + 8) / 64 bytes per parameter
    let z3 = MemoryEstimateOptions::default()
        .with_mixed_precision(Precision::Bf16)
        .with_strategy(Strategy::Zero3)
        .with_world_size(64);
    let z = estimate_memory("llama-7b", &z3).unwrap();
    let per_param = (z.weights + z.gradients + z.optimizer_state) as f64 / LLAMA_7B as f64;
    assert!((per_param - 0.25).abs() < 1e-6, "{}", per_param);

    // offload: the moments in host memory, 12 bytes a parameter moved per step (fp32); an NF4
    // base under LoRA holds fewer weight bytes than the fp32 one
    let off = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_offload(Offload::Optimizer)).unwrap();
    assert_eq!((e.host, e.transfer_bytes), (0, 0));
    assert_eq!((off.optimizer_state, off.transfer_bytes, off.gradient_transfer_bytes), (0, 12 * p, 4 * p));
    assert!(off.host >= 8 * p && off.total < e.total, "{:?}", off);
    let q = MemoryEstimateOptions::default().with_lora_rank(16).with_quantization(Quantization::Nf4).with_double_quant(true);
    let nf4 = estimate_memory("llama-7b", &q).unwrap();
    assert!(nf4.weights < lora.weights / 4, "{:?}", nf4);
    let err = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_quantization(Quantization::Nf4)).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);

    // the kernel asked for is the one reported; SGD keeps no state
    let eager = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_attention(Attention::Eager)).unwrap();
    let fused = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_attention(Attention::Fused)).unwrap();
    assert_eq!((eager.attention, fused.attention), (Attention::Eager, Attention::Fused));
    assert!(fused.activations < eager.activations);
    let sgd = MemoryEstimateOptions::default().with_optimizer(OptimizerKind::Sgd).with_seq_len(512).with_micro_batch(2);
    let s = estimate_memory("llama-7b", &sgd).unwrap();
    assert_eq!((s.optimizer_state, s.seq_len), (0, 512));

    // a config.json (or its directory) gives the parameters the model really has
    let dir = fixture("llama-tiny");
    let tiny = estimate_memory(dir.to_str().unwrap(), &defaults).unwrap();
    assert_eq!(tiny, estimate_memory(dir.join("config.json").to_str().unwrap(), &defaults).unwrap());
    let ctx = ctx(8);
    let model = ctx.load_pretrained(&dir, &LmOptions::default()).unwrap();
    assert_eq!(tiny.parameters, model.num_parameters().unwrap().1);
}

#[test]
fn estimate_memory_errors() {
    let e = estimate_memory("llama-3b", &MemoryEstimateOptions::default()).unwrap_err();
    assert_eq!(e.status, Status::Io);
    assert!(e.message.contains("named shape"), "{}", e.message);
    let e = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_world_size(4)).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("strategy"), "{}", e.message);
    let lamb = MemoryEstimateOptions::default()
        .with_optimizer(OptimizerKind::Lamb)
        .with_strategy(Strategy::Zero2)
        .with_world_size(2);
    let e = estimate_memory("llama-7b", &lamb).unwrap_err();
    assert_eq!(e.status, Status::Unsupported);
    assert!(e.message.contains("LAMB"), "{}", e.message);
    let e = estimate_memory("llama\0-7b", &MemoryEstimateOptions::default()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
}
