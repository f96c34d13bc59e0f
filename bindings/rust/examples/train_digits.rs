//! Trains the MLP [64, 128, 64, 10] (ReLU) on the digits' training split on 2 simulated
//! ranks with DDP (accel::sim::run), AdamW lr 6e-3 (3e-3 per rank, as the C example scales it), a cosine schedule with 5% warm-up,
//! batch 32 per rank, shuffled (seed 42); evaluates on the test split and prints, last,
//! `accuracy: 0.xxxx`.
//!
//!   cargo run --release --example train_digits [-- --data PATH] [--epochs N]
#[path = "common/digits.rs"]
mod digits;

use std::sync::Mutex;

use accel::*;

fn evaluate(ctx: &Context, model: &Model<'_>, x: &Tensor, y: &[i64]) -> Result<f64> {
    model.set_training(false)?;
    let logits = model.forward1(x)?;
    let mut out = vec![0f32; y.len() * digits::CLASSES];
    logits.copy_to_as(&mut out)?; // bf16 autocast would give bf16 logits: read as f32
    model.set_training(true)?;
    let _ = ctx;
    let correct = out
        .chunks(digits::CLASSES)
        .zip(y)
        .filter(|(row, &label)| {
            let best = (0..digits::CLASSES).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            best as i64 == label
        })
        .count();
    Ok(correct as f64 / y.len() as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let epochs: i64 = args
        .iter()
        .position(|a| a == "--epochs")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--epochs N"))
        .unwrap_or(20);
    let all = digits::load(&digits::path_from_args(&args)).unwrap_or_else(|e| {
        eprintln!("{}", e);
        std::process::exit(1)
    });
    let (train, test) = digits::split(&all, 0.2, 42);
    let run = || -> std::result::Result<f64, SimError> {
        let xs = Tensor::from_slice(&train.x, &[train.n as i64, digits::FEATURES as i64]).map_err(to_sim)?;
        let ys = Tensor::from_slice(&train.y, &[train.n as i64]).map_err(to_sim)?;
        let xt = Tensor::from_slice(&test.x, &[test.n as i64, digits::FEATURES as i64]).map_err(to_sim)?;
        let accuracy = Mutex::new(0.0f64);
        let opts = Options::default().with_seed(42).with_strategy(Strategy::Ddp).with_num_threads(1);
        let report = sim::run(&SimOptions::with_world_size(2), &opts, |ctx: &Context| -> Result<()> {
            let model = ctx.mlp(&MlpOptions::new(&[64, 128, 64, 10]))?;
            let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(6e-3))?;
            let mut loader = ctx.dataloader(
                &xs,
                Some(&ys),
                &DataLoaderOptions::default().with_batch_size(32).with_shuffle(true).with_seed(42),
            )?;
            ctx.prepare(None, None, None, Some(&loader))?; // shards the batches across ranks
            let total = epochs * loader.num_batches()?;
            let sched = ctx.scheduler(
                &opt,
                &SchedulerOptions::default()
                    .with_kind(Schedule::Cosine)
                    .with_warmup_steps(total / 20)
                    .with_total_steps(total),
            )?;
            ctx.prepare(Some(&model), Some(&opt), Some(&sched), None)?;
            for epoch in 0..epochs {
                let (mut sum, mut n) = (0.0, 0);
                for batch in loader.epoch_iter() {
                    let batch = batch?;
                    let logits = model.forward1(&batch.inputs)?;
                    let loss = ctx.cross_entropy(&logits, batch.targets.as_ref().unwrap())?;
                    sum += loss.item()?;
                    n += 1;
                    ctx.backward(&loss)?;
                    ctx.step()?;
                }
                let mean = ctx.reduce(&Tensor::scalar(sum / n as f64)?, ReduceOp::Mean)?.item()?;
                let acc = evaluate(ctx, &model, &xt, &test.y)?;
                ctx.print(&format!(
                    "epoch {:2}: loss {:.4}  lr {:.6}  test accuracy {:.4}",
                    epoch + 1,
                    mean,
                    opt.lr()?,
                    acc
                ))?;
                if ctx.is_main_process()? {
                    *accuracy.lock().unwrap() = acc;
                }
            }
            Ok(())
        })?;
        for (r, o) in report.ranks().map_err(to_sim)?.iter().enumerate() {
            println!("rank {}: peak memory {:.2} MiB", r, o.peak_bytes as f64 / (1 << 20) as f64);
        }
        println!("predicted time on 8xH100: {:.4} s", report.predicted_seconds().map_err(to_sim)?);
        let acc = *accuracy.lock().unwrap();
        Ok(acc)
    };
    match run() {
        Ok(acc) => println!("accuracy: {:.4}", acc),
        Err(e) => {
            eprintln!("train_digits: {}", e);
            std::process::exit(1);
        }
    }
}

fn to_sim(error: Error) -> SimError {
    SimError { report: None, rank: None, summary: error.message.clone(), error, rank_errors: Vec::new() }
}
