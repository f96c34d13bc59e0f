//! Adversarial sequences of safe calls: none may make the library use freed memory or
//! let a panic unwind into C. Each test asserts the clean outcome (an error with its
//! status, or the right values) and would crash the test binary on a regression.
mod common;

use std::sync::Mutex;

use accel::*;
use common::*;

/// A panic payload whose drop panics again with a payload of one level less: dropping it
/// anywhere outside `catch_unwind` unwinds (and unwinding out of the `extern "C"`
/// trampoline aborts the process, or is undefined behaviour on older Rust).
struct Bomb(u32);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 > 0 && !std::thread::panicking() {
            std::panic::panic_any(Bomb(self.0 - 1));
        }
    }
}

#[test]
fn a_panic_payload_whose_drop_panics_never_unwinds_into_c() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        if ctx.process_index()? == 1 {
            std::panic::panic_any(Bomb(3));
        }
        Ok(())
    });
    std::panic::set_hook(quiet);
    let err = result.unwrap_err();
    assert_eq!(err.rank, Some(1), "{}", err);
    assert_eq!(err.error.status, Status::Internal);
    assert!(err.error.message.contains("rank 1 panicked"), "{}", err.error.message);
    assert_eq!(err.report.as_ref().unwrap().rank(0).unwrap().status, None);
}

/// A rank that panics after `prepare`: its prepared objects are released while the
/// unwinding leaves the closure, before the library destroys the rank's context.
#[test]
fn a_rank_panicking_after_prepare_releases_its_objects() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        let model = ctx.mlp(&MlpOptions::new(&[2, 2]))?;
        let opt = ctx.sgd(&model, &SgdOptions::default())?;
        let x = Tensor::from_slice(&[1f32, 2.0], &[1, 2])?;
        let mut loader = ctx.dataloader(&x, None, &DataLoaderOptions::default())?;
        ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
        let _batch = loader.next()?;
        if ctx.process_index()? == 0 {
            panic!("after prepare");
        }
        Ok(())
    });
    std::panic::set_hook(quiet);
    let err = result.unwrap_err();
    assert_eq!(err.rank, Some(0), "{}", err);
    assert!(err.error.message.contains("after prepare"), "{}", err.error.message);
}

/// Tensors are independent of contexts: those a dropped context (or a finished simulated
/// rank) produced stay readable, and another context refuses their autograd graph cleanly.
#[test]
fn tensors_outlive_their_context_and_their_rank() {
    let (loss, logits) = {
        let a = ctx(1);
        let model = a.mlp(&MlpOptions::new(&[2, 3])).unwrap();
        let x = Tensor::from_slice(&[0.5f32, -1.0], &[1, 2]).unwrap();
        let logits = model.forward1(&x).unwrap();
        let loss = a.cross_entropy(&logits, &Tensor::from_slice(&[2i64], &[1]).unwrap()).unwrap();
        (loss, logits)
    }; // model and context destroyed here
    assert!(loss.item().unwrap() > 0.0);
    assert_eq!(logits.shape().unwrap(), vec![1, 3]);
    let b = ctx(2);
    let model = b.mlp(&MlpOptions::new(&[2, 3])).unwrap();
    let opt = b.sgd(&model, &SgdOptions::default()).unwrap();
    b.prepare(Some(&model), Some(&opt), None, None).unwrap();
    let e = b.backward(&loss).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.starts_with("accel_backward"), "{}", e.message);
    let e = b.cross_entropy(&logits, &Tensor::from_slice(&[0i64], &[1]).unwrap()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);

    // a rank's outputs, kept after the run
    let kept: Mutex<Vec<(i32, Tensor)>> = Mutex::new(Vec::new());
    sim::run(&SimOptions::with_world_size(2), &cpu_options(3), |ctx| {
        let model = ctx.mlp(&MlpOptions::new(&[2, 3]))?;
        let x = Tensor::from_slice(&[1f32, 1.0], &[1, 2])?;
        let out = model.forward1(&x)?;
        let loss = ctx.cross_entropy(&out, &Tensor::from_slice(&[1i64], &[1])?)?;
        let r = ctx.process_index()?;
        let sum = ctx.reduce(&Tensor::scalar(r as f32 + 1.0)?, ReduceOp::Sum)?;
        let mut k = kept.lock().unwrap();
        k.push((r, sum));
        k.push((r, loss));
        Ok(())
    })
    .unwrap();
    let kept = kept.into_inner().unwrap();
    assert_eq!(kept.len(), 4);
    for (_, t) in kept.iter().step_by(2) {
        assert_eq!(t.item().unwrap(), 3.0);
    }
    for (_, loss) in kept.iter().skip(1).step_by(2) {
        assert!(loss.item().unwrap() > 0.0);
        assert_eq!(b.backward(loss).unwrap_err().status, Status::InvalidArgument);
    }
}

/// Objects of one context handed to another: every call refuses them, nothing is bound.
#[test]
fn objects_of_another_context_are_refused() {
    let a = ctx(1);
    let b = ctx(2);
    let model_a = a.mlp(&MlpOptions::new(&[2, 2])).unwrap();
    let opt_a = a.adamw(&model_a, &AdamWOptions::default()).unwrap();
    let sched_a = a.scheduler(&opt_a, &SchedulerOptions::default()).unwrap();
    let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let loader_a = a.dataloader(&x, None, &DataLoaderOptions::default()).unwrap();
    let invalid = |r: Result<()>| assert_eq!(r.unwrap_err().status, Status::InvalidArgument);
    invalid(b.prepare(Some(&model_a), None, None, None));
    invalid(b.prepare(None, Some(&opt_a), None, None));
    invalid(b.prepare(None, None, Some(&sched_a), None));
    invalid(b.prepare(None, None, None, Some(&loader_a)));
    invalid(b.adamw(&model_a, &AdamWOptions::default()).map(|_| ()));
    invalid(b.scheduler(&opt_a, &SchedulerOptions::default()).map(|_| ()));
    let dir = temp_dir("foreign");
    invalid(b.save_model(&model_a, dir.join("m.safetensors")));
    assert!(!dir.join("m.safetensors").exists());
    // b bound nothing: it still cannot step
    assert_eq!(b.step().unwrap_err().status, Status::InvalidState);
    // and a still works with its own objects
    a.prepare(Some(&model_a), Some(&opt_a), Some(&sched_a), Some(&loader_a)).unwrap();
    std::fs::remove_dir_all(dir).ok();
}

/// Objects that were never prepared may be dropped at any time; prepared ones live on in
/// the context (the scheduler and loader here).
#[test]
fn dropping_objects_in_any_order_while_the_context_works() {
    let ctx = ctx(4);
    let model = ctx.mlp(&MlpOptions::new(&[2, 2])).unwrap();
    let opt = ctx.sgd(&model, &SgdOptions::default().with_lr(0.5)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    // a scheduler made on the prepared optimizer, never prepared, dropped before the step
    let sched = ctx
        .scheduler(&opt, &SchedulerOptions::default().with_kind(Schedule::Linear).with_warmup_steps(0).with_total_steps(4))
        .unwrap();
    drop(sched);
    let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 5.0], &[5, 1]).unwrap();
    let mut loader = ctx.dataloader(&x, None, &DataLoaderOptions::default().with_batch_size(2)).unwrap();
    ctx.prepare(None, None, None, Some(&loader)).unwrap();
    let batch = loader.next().unwrap().unwrap();
    drop(loader); // prepared: the context keeps it for gather_for_metrics
    assert_eq!(ctx.gather_for_metrics(&batch.inputs).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let inp = Tensor::from_slice(&[1f32, -1.0], &[1, 2]).unwrap();
    let logits = model.forward1(&inp).unwrap();
    let loss = ctx.cross_entropy(&logits, &Tensor::from_slice(&[0i64], &[1]).unwrap()).unwrap();
    drop(logits);
    drop(inp);
    ctx.backward(&loss).unwrap();
    drop(loss);
    assert!(ctx.step().unwrap().stepped);
    drop(opt);
    drop(model);
    ctx.save_state(Some(&temp_dir("drops").join("ck"))).unwrap();
}

/// One tensor read from several threads at once (the header allows it).
#[test]
fn a_tensor_read_from_several_threads() {
    let t = Tensor::from_slice(&(0..1000).map(|v| v as f32).collect::<Vec<_>>(), &[10, 100]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    assert_eq!(t.to_vec::<f32>().unwrap()[999], 999.0);
                    assert_eq!(t.shape().unwrap(), vec![10, 100]);
                }
            });
        }
    });
}

/// A tokenizer's outputs (tensors, strings) are its caller's: they outlive it. A tokenizer used
/// by several threads at once, then moved to another thread and dropped there while the
/// tensors it made are read here.
#[test]
fn tokenizer_outputs_outlive_it_and_it_drops_on_another_thread() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tokenizers/gemma");
    let tok = Tokenizer::load(dir.join("tokenizer.model")).unwrap();
    let opts = EncodeOptions::default();
    let texts: Vec<String> = (0..200).map(|i| format!("sample {} with ünïcode and 🙂 {}", i, i * 7)).collect();
    let (ids, mask) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| texts.iter().map(|t| tok.encode(t, &opts).unwrap()).collect::<Vec<_>>()))
            .collect();
        let first = workers.into_iter().map(|w| w.join().unwrap()).reduce(|a, b| {
            assert_eq!(a, b);
            a
        });
        assert_eq!(first.unwrap().len(), texts.len());
        tok.encode_batch(&texts, &opts).unwrap()
    });
    let (name, _) = tok.id_to_token(ids.to_vec::<i64>().unwrap()[0]).unwrap();
    std::thread::spawn(move || drop(tok)).join().unwrap();
    assert_eq!(ids.shape().unwrap(), mask.shape().unwrap());
    assert_eq!(ids.shape().unwrap()[0], 200);
    assert!(mask.to_vec::<i64>().unwrap().iter().all(|&m| m == 0 || m == 1));
    assert_eq!(name, "<bos>");
}
