//! Inference beside training through the Rust binding (`Context::inference`, `Inference`,
//! `Context::publish_weights`) and the bounded training call (`Context::train_micro_batches`):
//! values bit for bit, versions, an inference copy outliving its model and context, runs on
//! another thread while this one trains and publishes, and the errors with the C messages.
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::*;
use common::*;

/// The error of a call that must fail (the Ok types need not be Debug).
fn err<T>(r: accel::Result<T>) -> accel::Error {
    match r {
        Ok(_) => panic!("the call succeeded; an error was expected"),
        Err(e) => e,
    }
}

/// A float32 tensor's values as bits: equal vectors are equal bit for bit.
fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// 8 samples of 5 features and their 3 targets.
fn samples() -> (Vec<f32>, Vec<f32>) {
    let xs = (0..8 * 5).map(|i| (0.7 * i as f32).sin()).collect();
    let ys = (0..8 * 3).map(|i| (0.3 * i as f32).cos()).collect();
    (xs, ys)
}

fn x_of(xs: &[f32]) -> Tensor {
    Tensor::from_slice(xs, &[(xs.len() / 5) as i64, 5]).unwrap()
}

/// A context (CPU, `seed`, `accum` micro-batches a step) for an MLP 5 -> 16 -> 3 (tanh).
fn trainer_ctx(seed: u64, accum: i32) -> Context {
    Context::new(&cpu_options(seed).with_gradient_accumulation_steps(accum)).unwrap()
}

/// The MLP and its AdamW (lr 0.01), prepared on `ctx`.
fn mlp(ctx: &Context) -> (Model<'_>, Optimizer<'_>) {
    let model = ctx.mlp(&MlpOptions::new(&[5, 16, 3]).with_activation(Activation::Tanh)).unwrap();
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(0.01)).unwrap();
    ctx.prepare(Some(&model), Some(&opt), None, None).unwrap();
    (model, opt)
}

/// One MSE step on (xs, ys) through the calls one by one; the loss.
fn step(ctx: &Context, model: &Model<'_>, xs: &[f32], ys: &[f32]) -> f64 {
    let y = model.forward1(&x_of(xs)).unwrap();
    let loss = ctx.mse(&y, &Tensor::from_slice(ys, &[(ys.len() / 3) as i64, 3]).unwrap()).unwrap();
    ctx.backward(&loss).unwrap();
    ctx.step().unwrap();
    loss.item().unwrap()
}

/// Every parameter's values, in order, as bits.
fn all_weights(model: &Model<'_>) -> Vec<u32> {
    let (n, _) = model.num_parameters().unwrap();
    (0..n).flat_map(|i| bits(&model.parameter(i).unwrap())).collect()
}

#[test]
fn inference_is_send_and_has_no_lifetime() {
    fn is_send<T: Send + 'static>() {}
    is_send::<Inference>();
    // not Sync: the compile_fail doctest in src/lib.rs
}

#[test]
fn inference_runs_the_models_forward_bit_for_bit() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let (xs, ys) = samples();
    let mut inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let (version, age) = inf.weights().unwrap();
    assert_eq!(version, 1, "the creation publishes version 1");
    assert!(age >= 0.0, "age {}", age);
    let x = x_of(&xs);
    let want = model.forward1(&x).unwrap();
    let got = inf.run(&[&x]).unwrap();
    assert_eq!(got.shape().unwrap(), vec![8, 3]);
    assert_eq!(got.dtype().unwrap(), DType::F32);
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(bits(&inf.run1(&x).unwrap()), bits(&want));
    // the output is an ordinary tensor: a loss (with autograd) may read it
    let target = Tensor::from_slice(&ys, &[8, 3]).unwrap();
    assert!(ctx.mse(&got, &target).unwrap().item().unwrap() > 0.0);
    // more threads for the copy's runs: the same values on this MLP
    let mut four = ctx.inference(&model, &InferenceOptions::default().with_num_threads(4)).unwrap();
    assert_eq!(four.weights().unwrap().0, 2, "each creation publishes");
    assert_eq!(bits(&four.run1(&x).unwrap()), bits(&want));
    // a tensor a run returned outlives the copy and the context
    drop(four);
    drop(inf);
    drop(_opt);
    drop(model);
    drop(ctx);
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn a_step_not_published_does_not_reach_inference() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let (xs, ys) = samples();
    let x = x_of(&xs);
    let mut inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let before = bits(&model.forward1(&x).unwrap());
    step(&ctx, &model, &xs, &ys);
    let after = bits(&model.forward1(&x).unwrap());
    assert_ne!(after, before, "the step changed nothing");
    assert_eq!(bits(&inf.run1(&x).unwrap()), before, "a step the trainer did not publish reached inference");
    assert_eq!(inf.weights().unwrap().0, 1);
    assert_eq!(ctx.publish_weights(&model).unwrap(), 2);
    assert_eq!(inf.weights().unwrap().0, 1, "a copy changes weights only when a run starts");
    assert_eq!(bits(&inf.run1(&x).unwrap()), after);
    assert_eq!(inf.weights().unwrap().0, 2);
}

#[test]
fn publications_count_1_2_3_from_the_first_one() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let (xs, ys) = samples();
    let x = x_of(&xs);
    // before any copy: still counted
    assert_eq!(ctx.publish_weights(&model).unwrap(), 1);
    step(&ctx, &model, &xs, &ys);
    let mut a = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    assert_eq!(a.weights().unwrap().0, 2, "the current weights, not the older publication");
    assert_eq!(bits(&a.run1(&x).unwrap()), bits(&model.forward1(&x).unwrap()));
    for want in 3..=5u64 {
        step(&ctx, &model, &xs, &ys);
        assert_eq!(ctx.publish_weights(&model).unwrap(), want);
    }
    // a second copy: version 6, and the first takes it at its next run
    step(&ctx, &model, &xs, &ys);
    let mut b = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    assert_eq!(b.weights().unwrap().0, 6);
    let now = bits(&model.forward1(&x).unwrap());
    assert_eq!(bits(&b.run1(&x).unwrap()), now);
    assert_eq!(bits(&a.run1(&x).unwrap()), now);
    assert_eq!(a.weights().unwrap().0, 6);
    // another model of the same context counts its own publications
    let other = ctx.mlp(&MlpOptions::new(&[5, 3])).unwrap();
    assert_eq!(ctx.publish_weights(&other).unwrap(), 1);
    assert_eq!(ctx.publish_weights(&model).unwrap(), 7);
}

#[test]
fn an_inference_outlives_its_model_and_its_context() {
    let (xs, ys) = samples();
    let (mut inf, want) = {
        let ctx = trainer_ctx(3, 1);
        let (model, opt) = mlp(&ctx);
        let inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
        step(&ctx, &model, &xs, &ys);
        assert_eq!(ctx.publish_weights(&model).unwrap(), 2);
        let want = bits(&model.forward1(&x_of(&xs)).unwrap());
        drop(opt);
        drop(model); // prepared: the context still holds the C model
        (inf, want)
    }; // the context is destroyed here, and the model and optimizer after it
    assert_eq!(bits(&inf.run1(&x_of(&xs)).unwrap()), want);
    assert_eq!(inf.weights().unwrap().0, 2);
    // an unprepared model, dropped before the context, dropped before the copy runs
    let ctx = ctx(4);
    let model = ctx.mlp(&MlpOptions::new(&[5, 3])).unwrap();
    let mut copy = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let want = bits(&model.forward1(&x_of(&xs)).unwrap());
    drop(model);
    drop(ctx);
    assert_eq!(bits(&copy.run1(&x_of(&xs)).unwrap()), want);
    // and on another thread
    let got = std::thread::spawn(move || bits(&copy.run1(&x_of(&samples().0)).unwrap())).join().unwrap();
    assert_eq!(got, want);
}

/// Sets the flag when dropped: the reader thread stops even when the test fails first.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A spawned thread runs the copy as fast as it can while this thread trains and publishes:
/// every output is exactly the model's output for the version the run reports (no run saw a
/// set being written), and the runs saw many versions. The trainer waits for the reader only
/// every 10 publications (until a run has started after it), so that a reader the scheduler
/// leaves aside for a few milliseconds (a loaded machine) still sees several versions; the
/// other publications overlap its runs freely.
#[test]
fn runs_on_another_thread_while_this_one_trains_and_publishes() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let (xs, ys) = samples();
    let x = x_of(&xs);
    let mut inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let mut expected: BTreeMap<u64, Vec<u32>> = BTreeMap::new(); // version -> the trainer's forward
    expected.insert(1, bits(&model.forward1(&x).unwrap()));
    let done = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let stop = StopOnDrop(done.clone());
    let reader = {
        let (done, runs, xs) = (done.clone(), runs.clone(), xs.clone());
        std::thread::spawn(move || -> accel::Result<Vec<(u64, Vec<u32>)>> {
            let x = x_of(&xs);
            let mut seen = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let y = inf.run1(&x)?;
                seen.push((inf.weights()?.0, bits(&y)));
                runs.fetch_add(1, Ordering::SeqCst);
            }
            Ok(seen) // the copy is dropped on this thread
        })
    };
    // waits until the reader has finished 2 more runs: the second began after this call did
    let deadline = Instant::now() + Duration::from_secs(120);
    let wait_for_a_run = || {
        let target = runs.load(Ordering::SeqCst) + 2;
        while runs.load(Ordering::SeqCst) < target && !reader.is_finished() {
            assert!(Instant::now() < deadline, "the reader made no progress");
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    wait_for_a_run();
    let mut last = 1;
    for i in 1..=150 {
        step(&ctx, &model, &xs, &ys);
        last = ctx.publish_weights(&model).unwrap();
        expected.insert(last, bits(&model.forward1(&x).unwrap()));
        if i % 10 == 0 {
            wait_for_a_run();
        }
    }
    assert_eq!(last, 151);
    drop(stop);
    let seen = reader.join().expect("the reader panicked").expect("a run failed");
    let mut versions: BTreeMap<u64, usize> = BTreeMap::new();
    for (v, y) in &seen {
        let want = expected.get(v).unwrap_or_else(|| panic!("a run reported version {}, never published", v));
        assert_eq!(y, want, "the run of version {} saw other weights", v);
        *versions.entry(*v).or_insert(0) += 1;
    }
    for v in (1..=151).step_by(10) {
        assert!(versions.contains_key(&v), "no run used version {}: {:?}", v, versions);
    }
    assert_eq!(versions.keys().next_back(), Some(&151), "{:?}", versions);
}

/// 20 rows of 5 features and 3 targets.
fn rows(n: usize) -> (Vec<f32>, Vec<f32>) {
    ((0..n * 5).map(|i| (0.37 * i as f32).sin()).collect(), (0..n * 3).map(|i| (0.11 * i as f32).cos()).collect())
}

fn loader_of<'c>(ctx: &'c Context, xs: &[f32], ys: Option<&[f32]>, shuffle: bool) -> DataLoader<'c> {
    let x = Tensor::from_slice(xs, &[(xs.len() / 5) as i64, 5]).unwrap();
    let y = ys.map(|ys| Tensor::from_slice(ys, &[(ys.len() / 3) as i64, 3]).unwrap());
    ctx.dataloader(&x, y.as_ref(), &DataLoaderOptions::default().with_batch_size(4).with_shuffle(shuffle).with_seed(5)).unwrap()
}

/// At most `n` micro-batches of MSE through the calls one by one: (losses, real steps).
fn manual_loop(ctx: &Context, model: &Model<'_>, loader: &mut DataLoader<'_>, n: usize) -> (Vec<f64>, i32) {
    let (mut losses, mut steps) = (Vec::new(), 0);
    for _ in 0..n {
        let batch = match loader.next().unwrap() {
            Some(b) => b,
            None => break, // the end of the epoch: the loader moved to the next
        };
        let y = model.forward1(&batch.inputs).unwrap();
        let loss = ctx.mse(&y, batch.targets.as_ref().unwrap()).unwrap();
        ctx.backward(&loss).unwrap();
        steps += ctx.step().unwrap().stepped as i32;
        losses.push(loss.item().unwrap());
    }
    (losses, steps)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |a, b| a + b) / v.len() as f64
}

#[test]
fn train_micro_batches_does_what_the_loop_of_calls_does() {
    let (xs, ys) = rows(20); // 5 batches of 4 an epoch
    // two contexts with the same seed, 2 micro-batches a step: a calls one by one, b the call
    let (a, b) = (trainer_ctx(3, 2), trainer_ctx(3, 2));
    let (ma, _oa) = mlp(&a);
    let (mb, _ob) = mlp(&b);
    let mut la = loader_of(&a, &xs, Some(&ys), true);
    let mut lb = loader_of(&b, &xs, Some(&ys), true);
    a.prepare(None, None, None, Some(&la)).unwrap();
    b.prepare(None, None, None, Some(&lb)).unwrap();
    assert_eq!(all_weights(&ma), all_weights(&mb));

    let (losses, steps) = manual_loop(&a, &ma, &mut la, 3);
    let r = b.train_micro_batches(&mb, &mut lb, Loss::Mse, 3, 0.0).unwrap();
    assert_eq!(r.micro_batches, 3);
    assert_eq!((r.optimizer_steps, steps), (1, 1), "a step after the second micro-batch");
    assert_eq!(r.skipped_steps, 0);
    assert!(!r.epoch_ended);
    assert_eq!(r.mean_loss.to_bits(), mean(&losses).to_bits(), "{} vs {:?}", r.mean_loss, losses);
    assert!(r.seconds >= 0.0);
    assert_eq!(all_weights(&ma), all_weights(&mb));

    // the rest of the epoch: 2 batches, the last a real step (the end of the data), then its end
    let (losses, steps) = manual_loop(&a, &ma, &mut la, 3);
    assert_eq!(losses.len(), 2);
    let r = b.train_micro_batches(&mb, &mut lb, Loss::Mse, 10, 0.0).unwrap();
    assert_eq!(r.micro_batches, 2);
    assert_eq!((r.optimizer_steps, steps), (2, 2));
    assert!(r.epoch_ended);
    assert_eq!(r.mean_loss.to_bits(), mean(&losses).to_bits());
    assert_eq!(all_weights(&ma), all_weights(&mb));
    assert_eq!((la.epoch().unwrap(), lb.epoch().unwrap()), (1, 1));

    // the next call starts the next epoch
    let (losses, _) = manual_loop(&a, &ma, &mut la, 4);
    let r = b.train_micro_batches(&mb, &mut lb, Loss::Mse, 4, 0.0).unwrap();
    assert_eq!(r.micro_batches, 4);
    assert!(!r.epoch_ended);
    assert_eq!(r.mean_loss.to_bits(), mean(&losses).to_bits());
    assert_eq!(all_weights(&ma), all_weights(&mb));
}

#[test]
fn train_micro_batches_then_publish_reaches_inference() {
    let (xs, ys) = rows(20);
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let mut loader = loader_of(&ctx, &xs, Some(&ys), true);
    ctx.prepare(None, None, None, Some(&loader)).unwrap();
    let mut inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let x = x_of(&samples().0);
    let before = bits(&inf.run1(&x).unwrap());
    let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 2, 0.0).unwrap();
    assert_eq!((r.micro_batches, r.optimizer_steps), (2, 2));
    assert_eq!(bits(&inf.run1(&x).unwrap()), before);
    assert_eq!(ctx.publish_weights(&model).unwrap(), 2);
    let now = bits(&inf.run1(&x).unwrap());
    assert_ne!(now, before);
    assert_eq!(now, bits(&model.forward1(&x).unwrap()));
}

#[test]
fn train_micro_batches_stops_within_its_time_budget_after_at_least_one() {
    let (xs, ys) = rows(400);
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let mut loader = loader_of(&ctx, &xs, Some(&ys), true);
    let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 50, 1e-9).unwrap();
    assert_eq!((r.micro_batches, r.optimizer_steps), (1, 1), "at least one runs; the second would end past 1 ns");
    let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 7, 60.0).unwrap();
    assert_eq!(r.micro_batches, 7, "a generous budget: the count bounds the call");
    assert!(r.mean_loss.is_finite() && r.seconds > 0.0, "{:?}", r);
}

#[test]
fn train_micro_batches_with_cross_entropy_learns() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for i in 0..60 {
        let c = i % 3;
        for k in 0..5 {
            xs.push((k == c) as i32 as f32 + 0.1 * ((i * 5 + k) as f32).sin());
        }
        ys.push(c as i64);
    }
    let x = Tensor::from_slice(&xs, &[60, 5]).unwrap();
    let y = Tensor::from_slice(&ys, &[60]).unwrap();
    let mut loader = ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(6)).unwrap();
    let first = ctx.train_micro_batches(&model, &mut loader, Loss::CrossEntropy, 10, 0.0).unwrap();
    let mut last = first;
    for _ in 0..10 {
        last = ctx.train_micro_batches(&model, &mut loader, Loss::CrossEntropy, 10, 0.0).unwrap();
    }
    assert!(last.mean_loss < first.mean_loss * 0.5, "{} -> {}", first.mean_loss, last.mean_loss);
}

fn lm_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lm").join(name)
}

/// A causal LM: `Loss::CausalLm` on a token loader is `lm_forward`'s loss, and an inference
/// copy runs the published weights as the model's own forward does.
#[test]
fn a_causal_lm_trains_with_its_loss_and_runs_as_an_inference_copy() {
    let ctx = ctx(1);
    let lm = ctx.create_lm(lm_fixture("llama-tiny"), &LmOptions::default()).unwrap();
    let opt = ctx.sgd(&lm, &SgdOptions::default()).unwrap();
    ctx.prepare(Some(&lm), Some(&opt), None, None).unwrap();
    let mut inf = ctx.inference(&lm, &InferenceOptions::default()).unwrap();
    let tokens: Vec<i64> = (0..64).map(|i| (i * 7) % 50).collect();
    let tokens = Tensor::from_vec1(&tokens).unwrap();
    let mut loader = ctx
        .lm_dataloader(&tokens, None, &LmDataOptions::default().with_block_size(8), &DataLoaderOptions::default().with_batch_size(2))
        .unwrap();
    let batch = loader.next().unwrap().unwrap();
    let labels = batch.targets.as_ref().unwrap_or(&batch.inputs);
    let want = lm.lm_forward(&batch.inputs, None, Some(labels)).unwrap().loss.unwrap().item().unwrap();
    loader.set_epoch(0).unwrap();
    let r = ctx.train_micro_batches(&lm, &mut loader, Loss::CausalLm, 1, 0.0).unwrap();
    assert_eq!((r.micro_batches, r.optimizer_steps), (1, 1));
    assert!((r.mean_loss - want).abs() <= 1e-6 * want.abs(), "{} vs {}", r.mean_loss, want);

    assert_eq!(ctx.publish_weights(&lm).unwrap(), 2);
    lm.set_training(false).unwrap();
    let ids = Tensor::from_slice(&[1i64, 5, 9, 2, 7, 3], &[1, 6]).unwrap();
    let want = lm.forward1(&ids).unwrap();
    let got = inf.run1(&ids).unwrap();
    assert_eq!(got.shape().unwrap(), want.shape().unwrap());
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(inf.weights().unwrap().0, 2);
}

#[test]
fn errors_carry_the_c_message() {
    let ctx = trainer_ctx(3, 1);
    let (model, _opt) = mlp(&ctx);
    let (xs, ys) = rows(8);
    let mut loader = loader_of(&ctx, &xs, Some(&ys), true);

    // inference copies
    let e = err(ctx.inference(&model, &InferenceOptions::default().with_num_threads(0)));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.starts_with("accel_inference_create"), "{}", e.message);
    assert!(e.message.contains("num_threads must be in [1, 4096], got 0"), "{}", e.message);
    assert_eq!(ctx.last_error(), e.message);
    for bad in [-1, 4097] {
        let e = err(ctx.inference(&model, &InferenceOptions::default().with_num_threads(bad)));
        assert!(e.message.contains(&format!("num_threads must be in [1, 4096], got {}", bad)), "{}", e.message);
    }
    let other = trainer_ctx(9, 1);
    let e = err(other.inference(&model, &InferenceOptions::default()));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("another context"), "{}", e.message);
    let e = err(other.publish_weights(&model));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.starts_with("accel_publish_weights"), "{}", e.message);

    let mut inf = ctx.inference(&model, &InferenceOptions::default()).unwrap();
    let wrong = Tensor::from_slice(&[1f32; 8], &[2, 4]).unwrap();
    let e = err(inf.run1(&wrong));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.starts_with("accel_inference_run"), "{}", e.message);
    assert!(e.message.contains("the MLP expects input [batch, 5], got [2, 4]"), "{}", e.message);
    let e = err(inf.run(&[]));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    // the copy still runs after its errors
    assert_eq!(inf.run1(&x_of(&samples().0)).unwrap().shape().unwrap(), vec![8, 3]);

    // train_micro_batches: the domains
    let e = err(ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 0, 0.0));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.starts_with("accel_train_micro_batches"), "{}", e.message);
    assert!(e.message.contains("max_micro_batches must be >= 1, got 0"), "{}", e.message);
    assert_eq!(ctx.last_error(), e.message);
    let e = err(ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 1, -1.0));
    assert!(e.message.contains("max_seconds must be finite and >= 0, got -1"), "{}", e.message);
    let e = err(ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 1, f64::NAN));
    assert!(e.message.contains("max_seconds must be finite"), "{}", e.message);
    let e = err(ctx.train_micro_batches(&model, &mut loader, Loss::CausalLm, 1, 0.0));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("ACCEL_LOSS_CAUSAL_LM needs a causal LM"), "{}", e.message);
    let mut bare = loader_of(&ctx, &xs, None, true);
    let e = err(ctx.train_micro_batches(&model, &mut bare, Loss::Mse, 1, 0.0));
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("the loader has no targets"), "{}", e.message);
    // the state
    model.set_training(false).unwrap();
    let e = err(ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 1, 0.0));
    assert_eq!(e.status, Status::InvalidState, "{}", e);
    assert!(e.message.contains("evaluation mode"), "{}", e.message);
    model.set_training(true).unwrap();
    let fresh = trainer_ctx(10, 1);
    let unprepared = fresh.mlp(&MlpOptions::new(&[5, 3])).unwrap();
    let mut fresh_loader = loader_of(&fresh, &xs, Some(&ys), true);
    let e = err(fresh.train_micro_batches(&unprepared, &mut fresh_loader, Loss::Mse, 1, 0.0));
    assert_eq!(e.status, Status::InvalidState, "{}", e);
    assert!(e.message.contains("accel_prepare has not bound this model"), "{}", e.message);
    let e = err(ctx.train_micro_batches(&model, &mut fresh_loader, Loss::Mse, 1, 0.0));
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("belongs to another context"), "{}", e.message);

    // a NaN loss in the second micro-batch: the first stays trained
    let mut bad_ys = ys.clone();
    bad_ys[5 * 3] = f32::NAN; // row 5: the second batch of 4, in order
    let mut nan_loader = loader_of(&ctx, &xs, Some(&bad_ys), false);
    let before = all_weights(&model);
    let e = err(ctx.train_micro_batches(&model, &mut nan_loader, Loss::Mse, 2, 0.0));
    assert_eq!(e.status, Status::NonFinite, "{}", e);
    assert_ne!(all_weights(&model), before, "the first micro-batch was not trained");
    // and the context goes on
    let r = ctx.train_micro_batches(&model, &mut loader, Loss::Mse, 1, 0.0).unwrap();
    assert_eq!(r.micro_batches, 1);
}

#[test]
fn loss_values_are_the_headers() {
    for (loss, raw) in [(Loss::Mse, 0), (Loss::CrossEntropy, 1), (Loss::CausalLm, 2)] {
        assert_eq!(loss.to_raw(), raw);
        assert_eq!(Loss::from_raw(raw), Some(loss));
    }
    assert_eq!(Loss::from_raw(3), None);
    assert_eq!(InferenceOptions::default().num_threads, 1);
}

/// An inference copy made by a simulated rank leaves the closure (it borrows nothing) and
/// runs after the library destroyed the rank's context.
#[test]
fn an_inference_escapes_its_simulated_rank() {
    let kept: std::sync::Mutex<Vec<(i32, Inference, Vec<u32>)>> = std::sync::Mutex::new(Vec::new());
    sim::run(&SimOptions::with_world_size(2), &cpu_options(3), |ctx| {
        let model = ctx.mlp(&MlpOptions::new(&[5, 3]))?;
        let inf = ctx.inference(&model, &InferenceOptions::default())?;
        let want = bits(&model.forward1(&x_of(&samples().0))?);
        kept.lock().unwrap().push((ctx.process_index()?, inf, want));
        Ok(())
    })
    .unwrap();
    let mut kept = kept.into_inner().unwrap();
    assert_eq!(kept.len(), 2);
    for (rank, inf, want) in kept.iter_mut() {
        assert_eq!(&bits(&inf.run1(&x_of(&samples().0)).unwrap()), want, "rank {}", rank);
        assert_eq!(inf.weights().unwrap().0, 1);
    }
}
