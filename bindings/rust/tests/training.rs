//! Contexts, models, optimizers, schedulers, loaders, training and checkpoints (one process).
mod common;

use accel::*;
use common::*;

#[test]
fn invalid_options_are_refused() {
    let err = Context::new(&cpu_options(0).with_gradient_accumulation_steps(0)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("gradient_accumulation_steps"), "{}", err.message);
    let err = Context::new(&cpu_options(0).with_loss_scale_init(f64::NAN)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("loss_scale_init"), "{}", err.message);
    let ctx = ctx(0);
    assert_eq!(ctx.device().unwrap(), Device::Cpu);
    let model = ctx.mlp(&MlpOptions::new(&[4, 3])).unwrap();
    // AdamW weight_decay = inf: INVALID_ARGUMENT naming weight_decay
    let err = ctx.adamw(&model, &AdamWOptions::default().with_weight_decay(f64::INFINITY)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.starts_with("accel_optimizer_create_adamw"), "{}", err.message);
    assert!(err.message.contains("weight_decay"), "{}", err.message);
    assert_eq!(ctx.last_error(), err.message);
    let err = ctx.sgd(&model, &SgdOptions::default().with_nesterov(true)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    let err = ctx.lamb(&model, &LambOptions::default().with_beta1(1.0)).err().unwrap();
    assert!(err.message.contains("beta1"), "{}", err.message);
    let err = ctx.mlp(&MlpOptions::new(&[4])).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    let err = ctx.mlp(&MlpOptions::new(&[4, 2]).with_dropout(1.0)).err().unwrap();
    assert!(err.message.contains("dropout"), "{}", err.message);
    let opt = ctx.sgd(&model, &SgdOptions::default()).unwrap();
    let err = ctx
        .scheduler(&opt, &SchedulerOptions::default().with_kind(Schedule::Cosine).with_warmup_steps(5).with_total_steps(5))
        .err()
        .unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    let x = Tensor::from_slice(&[0f32; 8], &[2, 4]).unwrap();
    let err = ctx.dataloader(&x, None, &DataLoaderOptions::default().with_batch_size(0)).err().unwrap();
    assert!(err.message.contains("batch_size"), "{}", err.message);
    // the objects still work after the failed calls
    assert_eq!(model.num_parameters().unwrap(), (2, 15));
    assert_eq!(opt.lr().unwrap(), 0.01);
}

#[test]
fn mixed_precision_is_resolved() {
    assert_eq!(Precision::from_raw(sys::ACCEL_PRECISION_AUTO), Some(Precision::Auto));
    assert_eq!(Precision::Auto.to_raw(), 3);
    let with = |p: Precision| Context::new(&cpu_options(0).with_mixed_precision(p)).unwrap();
    // AUTO is resolved at init for the device: bf16 where it computes bf16 natively, else no
    let auto = with(Precision::Auto).mixed_precision().unwrap();
    assert!(auto == Precision::Bf16 || auto == Precision::No, "{:?}", auto);
    assert_eq!(with(Precision::Auto).mixed_precision().unwrap(), auto); // the same device, the same answer
    assert_eq!(with(Precision::Bf16).mixed_precision().unwrap(), Precision::Bf16);
    assert_eq!(with(Precision::Fp16).mixed_precision().unwrap(), Precision::Fp16);
    if std::env::var_os("ACCEL_MIXED_PRECISION").is_none() {
        // the default (No) reads ACCEL_MIXED_PRECISION, which these tests cannot unset safely
        assert_eq!(ctx(0).mixed_precision().unwrap(), Precision::No);
    }
    // accel_estimate_memory refuses AUTO: an estimate has no device to resolve it for
    let e = estimate_memory("llama-7b", &MemoryEstimateOptions::default().with_mixed_precision(Precision::Auto))
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e.message);
}

#[test]
fn model_parameters_forward_and_misuse() {
    let ctx = ctx(7);
    let model = ctx.mlp(&MlpOptions::new(&[3, 5, 2])).unwrap();
    assert_eq!(model.num_parameters().unwrap(), (4, 3 * 5 + 5 + 5 * 2 + 2));
    let names = model.parameter_names().unwrap();
    assert_eq!(names.len(), 4);
    assert!(names[0].ends_with("weight") && names[1].ends_with("bias"), "{:?}", names);
    let w0 = model.parameter(0).unwrap();
    assert_eq!(w0.shape().unwrap(), vec![5, 3]);
    let w = w0.to_vec::<f32>().unwrap();
    // torch.nn.Linear init: U(-1/sqrt(3), 1/sqrt(3))
    assert!(w.iter().all(|v| v.abs() <= 1.0 / 3f32.sqrt()), "{:?}", w);
    assert!(w.iter().any(|v| *v != 0.0));
    assert_eq!(model.parameter_name(9).unwrap_err().status, Status::InvalidArgument);
    // same seed, same weights
    let ctx2 = common::ctx(7);
    let again = ctx2.mlp(&MlpOptions::new(&[3, 5, 2])).unwrap();
    assert_eq!(again.parameter(0).unwrap().to_vec::<f32>().unwrap(), w);

    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.0, 0.0, 0.0], &[2, 3]).unwrap();
    let y = model.forward1(&x).unwrap();
    assert_eq!(y.shape().unwrap(), vec![2, 2]);
    assert_eq!(y.dtype().unwrap(), DType::F32);
    model.set_training(false).unwrap();
    let y2 = model.forward(&[&x]).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), y2.to_vec::<f32>().unwrap());
    // wrong dtype, wrong shape, wrong input count
    let xi = Tensor::from_slice(&[1i64, 2, 3], &[1, 3]).unwrap();
    let e = model.forward1(&xi).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.starts_with("accel_model_forward"), "{}", e.message);
    let e = model.forward1(&Tensor::from_slice(&[1f32; 4], &[1, 4]).unwrap()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(model.forward(&[]).unwrap_err().status, Status::InvalidArgument);
    // a model of another context
    let e = ctx2.sgd(&again, &SgdOptions::default()).map(|_| ()).and_then(|_| {
        let o = ctx.sgd(&model, &SgdOptions::default())?;
        ctx2.prepare(None, Some(&o), None, None)
    });
    assert_eq!(e.unwrap_err().status, Status::InvalidArgument);
    // cross-entropy with wrong targets
    let e = ctx.cross_entropy(&y, &Tensor::from_slice(&[0.5f32, 1.0], &[2]).unwrap()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = ctx.cross_entropy(&y, &Tensor::from_slice(&[0i64, 1, 1], &[3]).unwrap()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = ctx.cross_entropy(&y, &Tensor::from_slice(&[0i64, 9], &[2]).unwrap()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let loss = ctx.cross_entropy(&y, &Tensor::from_slice(&[0i64, 1], &[2]).unwrap()).unwrap();
    assert!(loss.item().unwrap() > 0.0);
    // state errors: backward and step before prepare; the context keeps working afterwards
    assert_eq!(ctx.backward(&loss).unwrap_err().status, Status::InvalidState);
    let e = ctx.step().unwrap_err();
    assert_eq!(e.status, Status::InvalidState);
    assert!(e.message.starts_with("accel_step"), "{}", e.message);
    assert_eq!(ctx.loss_scale().unwrap(), 1.0);
    // TorchScript: missing file, not a module, empty path
    let dir = temp_dir("ts");
    assert_eq!(ctx.load_torchscript(dir.join("missing.pt")).err().unwrap().status, Status::Io);
    std::fs::write(dir.join("text.pt"), "not a torchscript archive").unwrap();
    assert_eq!(ctx.load_torchscript(dir.join("text.pt")).err().unwrap().status, Status::Format);
    assert_eq!(ctx.load_torchscript("").err().unwrap().status, Status::InvalidArgument);
    // the built-in MLP cannot be saved as TorchScript
    assert_eq!(model.save(dir.join("m.pt")).unwrap_err().status, Status::Unsupported);
    std::fs::remove_dir_all(dir).ok();
}

/// y = w x + b under MSE: the gradient norm accel_clip_grad_norm reports matches the one
/// computed by hand, and SGD(lr = 1) then moves the parameters by exactly the clipped norm.
#[test]
fn clip_grad_norm_value_and_sgd_step() {
    let ctx = ctx(3);
    let model = ctx.mlp(&MlpOptions::new(&[1, 1])).unwrap();
    let opt = ctx.sgd(&model, &SgdOptions::default().with_lr(1.0)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let w = model.parameter(0).unwrap().item().unwrap();
    let b = model.parameter(1).unwrap().item().unwrap();
    let (xs, ts) = line();
    let n = xs.len() as f64;
    let (mut gw, mut gb) = (0.0, 0.0);
    for (x, t) in xs.iter().zip(&ts) {
        let r = w * *x as f64 + b - *t as f64;
        gw += 2.0 * r * *x as f64 / n;
        gb += 2.0 * r / n;
    }
    let norm = (gw * gw + gb * gb).sqrt();
    let x = Tensor::from_slice(&xs, &[8, 1]).unwrap();
    let t = Tensor::from_slice(&ts, &[8, 1]).unwrap();
    let out = model.forward1(&x).unwrap();
    let loss = ctx.mse(&out, &t).unwrap();
    ctx.backward(&loss).unwrap();
    assert!(ctx.sync_gradients().unwrap());
    let got = ctx.clip_grad_norm(1e-3).unwrap();
    assert!((got - norm).abs() < 1e-5 * norm.max(1.0), "clip_grad_norm {} vs {}", got, norm);
    let r = ctx.step().unwrap();
    assert!(r.stepped && r.sync_step && !r.skipped);
    assert_eq!((r.optimizer_steps, r.micro_steps, r.loss_scale), (1, 1, 1.0));
    let w2 = model.parameter(0).unwrap().item().unwrap();
    let b2 = model.parameter(1).unwrap().item().unwrap();
    let moved = ((w2 - w).powi(2) + (b2 - b).powi(2)).sqrt();
    assert!((moved - 1e-3).abs() < 1e-6, "moved {}", moved);
    // the loss was already backpropagated: INVALID_STATE, nothing broken
    assert_eq!(ctx.backward(&loss).unwrap_err().status, Status::InvalidState);
    // a non-scalar "loss"
    assert_eq!(ctx.backward(&out).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(ctx.clip_grad_norm(0.0).unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn scheduler_learning_rates() {
    let ctx = ctx(1);
    let model = ctx.mlp(&MlpOptions::new(&[1, 1])).unwrap();
    let opt = ctx.sgd(&model, &SgdOptions::default().with_lr(0.1)).unwrap();
    let sched = ctx
        .scheduler(&opt, &SchedulerOptions::default().with_kind(Schedule::Linear).with_warmup_steps(2).with_total_steps(10))
        .unwrap();
    ctx.prepare(Some(&model), Some(&opt), Some(&sched), None).unwrap();
    let (xs, ts) = line();
    let x = Tensor::from_slice(&xs, &[8, 1]).unwrap();
    let t = Tensor::from_slice(&ts, &[8, 1]).unwrap();
    let mut lrs = vec![opt.lr().unwrap()];
    for _ in 0..4 {
        let loss = ctx.mse(&model.forward1(&x).unwrap(), &t).unwrap();
        ctx.backward(&loss).unwrap();
        ctx.step().unwrap();
        lrs.push(opt.lr().unwrap());
    }
    let want = [0.0, 0.05, 0.1, 0.1 * 7.0 / 8.0, 0.1 * 6.0 / 8.0];
    for (g, w) in lrs.iter().zip(want.iter()) {
        assert!((g - w).abs() < 1e-12, "lrs {:?} vs {:?}", lrs, want);
    }
    assert_eq!(sched.steps().unwrap(), 4);
}

#[test]
fn fp16_loss_scale() {
    let ctx = Context::new(&cpu_options(5)
        .with_mixed_precision(Precision::Fp16)
        .with_loss_scale_init(1024.0)
        .with_loss_scale_growth_interval(1))
    .unwrap();
    let model = ctx.mlp(&MlpOptions::new(&[1, 4, 1])).unwrap();
    let opt = ctx.adamw(&model, &AdamWOptions::default()).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    assert_eq!(ctx.loss_scale().unwrap(), 1024.0);
    let (xs, ts) = line();
    let x = Tensor::from_slice(&xs, &[8, 1]).unwrap();
    let t = Tensor::from_slice(&ts, &[8, 1]).unwrap();
    let loss = ctx.mse(&model.forward1(&x).unwrap(), &t).unwrap();
    ctx.backward(&loss).unwrap();
    let r = ctx.step().unwrap();
    assert!(r.stepped && !r.skipped);
    assert_eq!(r.loss_scale, 2048.0); // grew after 1 good step
    // an infinite loss: backpropagated, the step skipped, the scale backs off
    let bad = Tensor::from_slice(&[f32::INFINITY; 8], &[8, 1]).unwrap();
    let loss = ctx.mse(&model.forward1(&x).unwrap(), &bad).unwrap();
    ctx.backward(&loss).unwrap();
    let r = ctx.step().unwrap();
    assert!(r.skipped && !r.stepped && r.sync_step, "{:?}", r);
    assert_eq!(r.loss_scale, 1024.0);
    assert_eq!(ctx.loss_scale().unwrap(), 1024.0);
    assert_eq!(r.optimizer_steps, 1);
}

#[test]
fn non_finite_loss_in_fp32() {
    let ctx = ctx(2);
    let model = ctx.mlp(&MlpOptions::new(&[1, 1])).unwrap();
    let opt = ctx.sgd(&model, &SgdOptions::default()).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let x = Tensor::from_slice(&[1f32], &[1, 1]).unwrap();
    let bad = Tensor::from_slice(&[f32::NAN], &[1, 1]).unwrap();
    let loss = ctx.mse(&model.forward1(&x).unwrap(), &bad).unwrap();
    assert_eq!(ctx.backward(&loss).unwrap_err().status, Status::NonFinite);
}

fn digits_like(n: usize) -> (Tensor, Tensor) {
    // two separable classes in 4 dimensions
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..n {
        let c = (i % 2) as i64;
        let s = if c == 0 { 1.0f32 } else { -1.0 };
        let j = (i as f32 * 0.37).sin() * 0.2;
        x.extend_from_slice(&[s + j, -s + j, s * 0.5, j]);
        y.push(c);
    }
    (Tensor::from_slice(&x, &[n as i64, 4]).unwrap(), Tensor::from_slice(&y, &[n as i64]).unwrap())
}

/// The context shares ownership of what `prepare` bound: the Rust objects may be dropped
/// and the context keeps training with them.
#[test]
fn training_loop_loader_iterator_and_prepared_objects_outliving_their_handles() {
    let ctx = ctx(11);
    let (x, y) = digits_like(40);
    let model = ctx.mlp(&MlpOptions::new(&[4, 8, 2])).unwrap();
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(0.05)).unwrap();
    let mut loader = ctx
        .dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(8).with_shuffle(true).with_seed(42))
        .unwrap();
    assert_eq!(loader.num_batches().unwrap(), 5);
    ctx.prepare(Some(&model), Some(&opt), None, Some(&loader)).unwrap();
    let mut first = None;
    let mut last = 0.0;
    for epoch in 0..6 {
        assert_eq!(loader.epoch().unwrap(), epoch);
        let mut n = 0;
        for batch in loader.epoch_iter() {
            let batch = batch.unwrap();
            assert_eq!(batch.inputs.shape().unwrap(), vec![8, 4]);
            let targets = batch.targets.as_ref().unwrap();
            assert_eq!(targets.dtype().unwrap(), DType::I64);
            let loss = ctx.cross_entropy(&model.forward1(&batch.inputs).unwrap(), targets).unwrap();
            let l = loss.item().unwrap();
            if first.is_none() {
                first = Some(l);
            }
            last = l;
            ctx.backward(&loss).unwrap();
            ctx.step().unwrap();
            n += 1;
        }
        assert_eq!(n, 5);
    }
    assert!(last < first.unwrap() * 0.5, "loss {} -> {}", first.unwrap(), last);
    // set_epoch rewinds
    loader.set_epoch(2).unwrap();
    assert_eq!(loader.epoch().unwrap(), 2);
    assert_eq!(loader.set_epoch(-1).unwrap_err().status, Status::InvalidArgument);
    // drop the Rust handles of the prepared model and optimizer; the context still steps
    let batch = loader.next().unwrap().unwrap();
    let loss = ctx.cross_entropy(&model.forward1(&batch.inputs).unwrap(), batch.targets.as_ref().unwrap()).unwrap();
    let steps_before = ctx.step().map(|r| r.optimizer_steps);
    assert!(steps_before.is_ok());
    drop(opt);
    drop(model);
    ctx.backward(&loss).unwrap();
    let r = ctx.step().unwrap();
    assert!(r.stepped);
    assert_eq!(r.optimizer_steps, 31);
    drop(loader);
    drop(ctx);
    // tensors outlive contexts
    assert_eq!(batch.inputs.shape().unwrap(), vec![8, 4]);
}

#[test]
fn loader_without_targets_and_uneven_last_batch() {
    let ctx = ctx(0);
    let x = Tensor::from_slice(&(0..10).map(|v| v as f32).collect::<Vec<_>>(), &[10, 1]).unwrap();
    let mut loader = ctx.dataloader(&x, None, &DataLoaderOptions::default().with_batch_size(4)).unwrap();
    let sizes: Vec<i64> = loader
        .iter()
        .map(|b| {
            let b = b.unwrap();
            assert!(b.targets.is_none());
            b.inputs.shape().unwrap()[0]
        })
        .collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    assert_eq!(loader.epoch().unwrap(), 1);
    let first = loader.next().unwrap().unwrap();
    assert_eq!(first.inputs.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
    // mismatched first dimensions
    let y = Tensor::from_slice(&[0i64; 3], &[3]).unwrap();
    assert_eq!(ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default()).err().unwrap().status, Status::InvalidArgument);
}

#[test]
fn lamb_and_sgd_momentum_train() {
    for which in 0..2 {
        let ctx = ctx(4);
        let model = ctx.mlp(&MlpOptions::new(&[1, 1])).unwrap();
        let opt = if which == 0 {
            ctx.lamb(&model, &LambOptions::default().with_lr(0.02).with_weight_decay(0.0)).unwrap()
        } else {
            ctx.sgd(&model, &SgdOptions::default().with_lr(0.1).with_momentum(0.9).with_nesterov(true)).unwrap()
        };
        ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
        let (xs, ts) = line();
        let x = Tensor::from_slice(&xs, &[8, 1]).unwrap();
        let t = Tensor::from_slice(&ts, &[8, 1]).unwrap();
        let mut losses = Vec::new();
        for _ in 0..60 {
            let loss = ctx.mse(&model.forward1(&x).unwrap(), &t).unwrap();
            losses.push(loss.item().unwrap());
            ctx.backward(&loss).unwrap();
            ctx.step().unwrap();
        }
        let factor = if which == 0 { 0.9 } else { 0.2 };
        assert!(losses[59] < losses[0] * factor, "optimizer {}: {:?}", which, losses);
    }
}

#[test]
fn save_model_writes_safetensors() {
    let dir = temp_dir("save-model");
    let ctx = ctx(9);
    let model = ctx.mlp(&MlpOptions::new(&[3, 4, 2])).unwrap();
    let path = dir.join("model.safetensors");
    model.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(len) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    for name in model.parameter_names().unwrap() {
        assert!(header.contains(&format!("\"{}\"", name)), "{} not in {}", name, header);
    }
    assert!(header.contains("F32"));
    // the data: 3*4 + 4 + 4*2 + 2 floats after the header
    assert_eq!(bytes.len() - 8 - n, (12 + 4 + 8 + 2) * 4);
    // the first weight's bytes are in the file
    let w: Vec<u8> = model.parameter(0).unwrap().to_vec::<f32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
    assert!(bytes.windows(w.len()).any(|win| win == &w[..]));
    // saving again replaces it; a user's file is refused and left as it is
    ctx.save_model(&model, &path).unwrap();
    let mine = dir.join("notes.txt");
    std::fs::write(&mine, "mine").unwrap();
    let e = model.save(&mine).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn checkpoints_save_load_and_refuse_to_overwrite() {
    let dir = temp_dir("ckpt");
    let ctx = ctx(12);
    let (x, y) = digits_like(16);
    let model = ctx.mlp(&MlpOptions::new(&[4, 2])).unwrap();
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(0.1)).unwrap();
    let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(4)).unwrap();
    // before prepare: INVALID_STATE
    assert_eq!(ctx.save_state(Some(&dir.join("early"))).unwrap_err().status, Status::InvalidState);
    ctx.prepare(Some(&model), Some(&opt), None, Some(&loader)).unwrap();
    let mut train_step = |ctx: &Context| {
        let b = loader.next().unwrap().unwrap();
        let loss = ctx.cross_entropy(&model.forward1(&b.inputs).unwrap(), b.targets.as_ref().unwrap()).unwrap();
        ctx.backward(&loss).unwrap();
        ctx.step().unwrap()
    };
    train_step(&ctx);
    let ck = dir.join("ck");
    ctx.save_state(Some(&ck)).unwrap();
    assert!(ck.join("model.safetensors").exists());
    assert_eq!(ctx.last_checkpoint().unwrap(), ck.to_str().unwrap());
    let saved = model.parameter(0).unwrap().to_vec::<f32>().unwrap();
    let r = train_step(&ctx);
    assert_eq!(r.optimizer_steps, 2);
    assert_ne!(model.parameter(0).unwrap().to_vec::<f32>().unwrap(), saved);
    ctx.load_state(Some(&ck)).unwrap();
    assert_eq!(model.parameter(0).unwrap().to_vec::<f32>().unwrap(), saved);
    let r = train_step(&ctx);
    assert_eq!(r.optimizer_steps, 2, "the step counter was restored");
    // a user's file, and a directory holding other files: refused, untouched
    let file = dir.join("precious.txt");
    std::fs::write(&file, "keep me").unwrap();
    let e = ctx.save_state(Some(&file)).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    let other = dir.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("a.txt"), "x").unwrap();
    assert_eq!(ctx.save_state(Some(&other)).unwrap_err().status, Status::InvalidArgument);
    assert!(other.join("a.txt").exists());
    assert_eq!(ctx.save_state(Some(std::path::Path::new(""))).unwrap_err().status, Status::InvalidArgument);
    // loading garbage: nothing changes
    let e = ctx.load_state(Some(&other)).unwrap_err();
    assert!(matches!(e.status, Status::Io | Status::Format | Status::InvalidArgument), "{}", e);
    // a project: automatic checkpoint_N directories, the newest kept
    let project = dir.join("project");
    ctx.set_project(&ProjectOptions::default().with_project_dir(project.clone()).with_total_limit(1)).unwrap();
    ctx.save_state(None).unwrap();
    train_step(&ctx);
    ctx.save_state(None).unwrap();
    let names: Vec<String> = std::fs::read_dir(project.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(names.len(), 1, "{:?}", names);
    ctx.load_state(None).unwrap();
    assert!(ctx.last_checkpoint().unwrap().contains("checkpoint_"), "{}", ctx.last_checkpoint().unwrap());
    assert_eq!(
        ctx.set_project(&ProjectOptions::default()).unwrap_err().status,
        Status::InvalidArgument
    );
    drop(train_step);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn processes_of_a_single_process_and_seed() {
    let ctx = ctx(0);
    assert_eq!(ctx.process_index().unwrap(), 0);
    assert_eq!(ctx.num_processes().unwrap(), 1);
    assert_eq!(ctx.local_process_index().unwrap(), 0);
    assert!(ctx.is_main_process().unwrap());
    assert!(ctx.is_local_main_process().unwrap());
    ctx.barrier().unwrap();
    let t = Tensor::from_slice(&[1f32, 2.0], &[2]).unwrap();
    assert_eq!(ctx.reduce(&t, ReduceOp::Sum).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(ctx.broadcast(&t, 0).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(ctx.broadcast(&t, 1).unwrap_err().status, Status::InvalidArgument);
    ctx.print("printed by accel_print").unwrap();
    assert_eq!(ctx.print("a\0b").unwrap_err().status, Status::InvalidArgument);
    ctx.sim_charge_compute(0.5, Some("noop")).unwrap(); // a no-op outside the simulator
    ctx.set_seed(5, false).unwrap();
    let a = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap().parameter(0).unwrap().to_vec::<f32>().unwrap();
    ctx.set_seed(5, false).unwrap();
    let b = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap().parameter(0).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    // a context moves to another thread
    let idx = std::thread::spawn(move || ctx.process_index().unwrap()).join().unwrap();
    assert_eq!(idx, 0);
}

/// The value of `"key":` inside the JSON object `"name":{...}` of a safetensors header
/// (a flat object per tensor: enough for accel's own files).
fn safetensors_entry<'a>(header: &'a str, name: &str, key: &str) -> &'a str {
    let at = header.find(&format!("\"{}\":{{", name)).unwrap_or_else(|| panic!("{} not in {}", name, header));
    let obj = &header[at..at + header[at..].find('}').unwrap()];
    let k = obj.find(&format!("\"{}\":", key)).unwrap_or_else(|| panic!("{} has no {}: {}", name, key, obj));
    let v = obj[k + key.len() + 3..].trim_start();
    let end = if v.starts_with('[') { v.find(']').unwrap() + 1 } else { v.find(|c| c == ',' || c == '}').unwrap_or(v.len()) };
    &v[..end]
}

/// save_model's safetensors file read back: the header names every parameter with its
/// dtype, shape and byte range, and those bytes are the parameter's values.
#[test]
fn save_model_round_trip_through_the_safetensors_file() {
    let dir = temp_dir("safetensors");
    let ctx = ctx(21);
    let model = ctx.mlp(&MlpOptions::new(&[3, 4, 2])).unwrap();
    let path = dir.join("m.safetensors");
    model.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap().replace(' ', "");
    let data = &bytes[8 + n..];
    let mut covered = 0;
    for (i, name) in model.parameter_names().unwrap().iter().enumerate() {
        let p = model.parameter(i).unwrap();
        assert_eq!(safetensors_entry(&header, name, "dtype"), "\"F32\"");
        let shape = format!("[{}]", p.shape().unwrap().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","));
        assert_eq!(safetensors_entry(&header, name, "shape"), shape, "{}", name);
        let range = safetensors_entry(&header, name, "data_offsets");
        let r: Vec<usize> = range.trim_matches(|c| c == '[' || c == ']').split(',').map(|v| v.parse().unwrap()).collect();
        let values: Vec<f32> =
            data[r[0]..r[1]].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(values, p.to_vec::<f32>().unwrap(), "{}", name);
        covered += r[1] - r[0];
    }
    assert_eq!(covered, data.len(), "the data holds the parameters and nothing else");
    std::fs::remove_dir_all(dir).ok();
}

/// The TorchScript success path, with the model file the suite provides
/// (ACCEL_TEST_TORCHSCRIPT: an MLP 64 -> 10 on the digits): load, train a step, save as
/// TorchScript and as safetensors, load the saved module back and get the same outputs.
#[test]
fn torchscript_load_train_and_save_round_trip() {
    // $ACCEL_TEST_TORCHSCRIPT, else the one in the meson build directory accel-sys linked
    // (BUILD/tests/digits_model.pt, made by the build when libtorch's Python is there)
    let in_build = option_env!("ACCEL_FOUND_LIB_DIR")
        .map(|d| std::path::Path::new(d).join("tests/digits_model.pt"))
        .filter(|p| p.exists());
    let file = match std::env::var_os("ACCEL_TEST_TORCHSCRIPT").filter(|f| !f.is_empty()).map(std::path::PathBuf::from).or(in_build) {
        Some(f) => f,
        None => {
            eprintln!(
                "skipped: ACCEL_TEST_TORCHSCRIPT is unset and the build directory has no tests/digits_model.pt \
                 (the path of a TorchScript MLP 64 -> 10)"
            );
            return;
        }
    };
    let dir = temp_dir("torchscript");
    let ctx = ctx(5);
    let model = ctx.load_torchscript(&file).unwrap();
    let (tensors, elements) = model.num_parameters().unwrap();
    assert!(tensors >= 2 && elements > 64 * 10, "{} tensors, {} elements", tensors, elements);
    let x: Vec<f32> = (0..4 * 64).map(|i| (i % 17) as f32 / 16.0).collect();
    let x = Tensor::from_slice(&x, &[4, 64]).unwrap();
    let y = Tensor::from_slice(&[0i64, 3, 7, 9], &[4]).unwrap();
    let opt = ctx.sgd(&model, &SgdOptions::default().with_lr(0.1)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let before = model.parameter(0).unwrap().to_vec::<f32>().unwrap();
    let logits = model.forward1(&x).unwrap();
    assert_eq!(logits.shape().unwrap(), vec![4, 10]);
    ctx.backward(&ctx.cross_entropy(&logits, &y).unwrap()).unwrap();
    assert!(ctx.step().unwrap().stepped);
    assert_ne!(model.parameter(0).unwrap().to_vec::<f32>().unwrap(), before, "a step changes the weights");
    model.set_training(false).unwrap();
    let out = model.forward1(&x).unwrap().to_vec::<f32>().unwrap();
    let saved = dir.join("trained.pt");
    model.save(&saved).unwrap();
    model.save(dir.join("trained.safetensors")).unwrap();
    let ctx2 = common::ctx(6);
    let again = ctx2.load_torchscript(&saved).unwrap();
    again.set_training(false).unwrap();
    assert_eq!(again.forward1(&x).unwrap().to_vec::<f32>().unwrap(), out);
    assert_eq!(again.parameter_names().unwrap(), model.parameter_names().unwrap());
    std::fs::remove_dir_all(dir).ok();
}
