//! Per-step overhead of the binding, the same loop as every language and C (see
//! bindings' common protocol): all 1,797 digits, MLP [64,128,64,10], AdamW lr 3e-3, loader
//! batch 32 shuffled (seed 42), one step = next -> forward -> cross-entropy -> backward ->
//! step -> drop the 4 tensors. Prints one JSON line.
//!
//!   cargo run --release --example bench_steps -- [--data PATH] [--warmup 200] [--steps 2000]
#[path = "common/digits.rs"]
mod digits;

use std::time::Instant;

use accel::*;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{} N", name)))
        .unwrap_or(default)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let warmup = arg(&args, "--warmup", 200);
    let steps = arg(&args, "--steps", 2000);
    let all = digits::load(&digits::path_from_args(&args)).unwrap_or_else(|e| {
        eprintln!("{}", e);
        std::process::exit(1)
    });
    let ctx = Context::new(&Options::default().with_num_threads(1).with_seed(42))?;
    let x = Tensor::from_slice(&all.x, &[all.n as i64, digits::FEATURES as i64])?;
    let y = Tensor::from_slice(&all.y, &[all.n as i64])?;
    let model = ctx.mlp(&MlpOptions::new(&[64, 128, 64, 10]))?;
    let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(3e-3))?;
    let mut loader =
        ctx.dataloader(&x, Some(&y), &DataLoaderOptions::default().with_batch_size(32).with_shuffle(true).with_seed(42))?;
    ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;

    let step = |loader: &mut DataLoader<'_>| -> Result<()> {
        let batch = match loader.next()? {
            Some(b) => b,
            None => loader.next()?.expect("an epoch with no batch"),
        };
        let logits = model.forward1(&batch.inputs)?;
        let loss = ctx.cross_entropy(&logits, batch.targets.as_ref().expect("targets"))?;
        ctx.backward(&loss)?;
        ctx.step()?;
        Ok(()) // inputs, targets, logits, loss dropped here
    };
    for _ in 0..warmup {
        step(&mut loader)?;
    }
    let t0 = Instant::now();
    for _ in 0..steps {
        step(&mut loader)?;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / steps.max(1) as f64;
    println!("{{\"lang\":\"rust\",\"steps\":{},\"us_per_step\":{:.1}}}", steps, us);
    Ok(())
}
