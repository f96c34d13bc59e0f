//! The simulator: collectives on 2-4 ranks with values checked, and failing ranks.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use accel::*;
use common::cpu_options;

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn collectives_on_three_ranks() {
    let calls = AtomicUsize::new(0);
    let report = sim::run(&SimOptions::with_world_size(3), &cpu_options(1), |ctx: &Context| -> Result<()> {
        calls.fetch_add(1, Ordering::SeqCst);
        let r = ctx.process_index()?;
        assert_eq!(ctx.num_processes()?, 3);
        assert_eq!(ctx.is_main_process()?, r == 0);
        assert_eq!(ctx.local_process_index()?, r);
        assert_eq!(ctx.is_local_main_process()?, r == 0);
        let rf = r as f32;
        let t = Tensor::from_slice(&[rf + 1.0, 10.0 * rf], &[2])?;
        assert_eq!(f32s(&ctx.reduce(&t, ReduceOp::Sum)?), vec![6.0, 30.0]);
        assert_eq!(f32s(&ctx.reduce(&t, ReduceOp::Mean)?), vec![2.0, 10.0]);
        assert_eq!(f32s(&ctx.reduce(&t, ReduceOp::Max)?), vec![3.0, 20.0]);
        assert_eq!(f32s(&ctx.reduce(&t, ReduceOp::Min)?), vec![1.0, 0.0]);
        assert_eq!(f32s(&ctx.reduce(&t, ReduceOp::Prod)?), vec![6.0, 0.0]);
        let ti = Tensor::from_slice(&[r as i64 + 1], &[1])?;
        assert_eq!(ctx.reduce(&ti, ReduceOp::Mean)?.to_vec::<i64>()?, vec![2]);
        assert_eq!(f32s(&ctx.broadcast(&t, 2)?), vec![3.0, 20.0]);
        let g = ctx.gather(&Tensor::from_slice(&[rf, rf], &[1, 2])?)?;
        assert_eq!(g.shape()?, vec![3, 2]);
        assert_eq!(f32s(&g), vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);
        // ragged: rank r has r + 1 rows; pad to 3 with -1, after or before the data
        let rows: Vec<f32> = (0..=r).map(|i| i as f32).collect();
        let ragged = Tensor::from_slice(&rows, &[r as i64 + 1])?;
        let padded = ctx.pad_across_processes(&ragged, 0, -1.0, false)?;
        let mut want = rows.clone();
        want.resize(3, -1.0);
        assert_eq!(f32s(&padded), want);
        let first = ctx.pad_across_processes(&ragged, -1, -1.0, true)?;
        let mut want_first = vec![-1.0; 2 - r as usize];
        want_first.extend_from_slice(&rows);
        assert_eq!(f32s(&first), want_first);
        assert_eq!(f32s(&ctx.gather(&padded)?), vec![0.0, -1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0, 2.0]);
        ctx.barrier()?;
        ctx.sim_charge_compute(0.25, Some("work"))?;
        ctx.print("hello from the main rank")?;
        Ok(())
    })
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(report.world_size().unwrap(), 3);
    let ranks = report.ranks().unwrap();
    assert!(ranks.iter().all(|r| r.status.is_none() && r.error.is_empty()), "{:?}", ranks);
    assert!(report.predicted_seconds().unwrap() >= 0.25);
}

/// gather_for_metrics drops the rows even_batches duplicated: 5 samples, batch 2, 2 ranks.
#[test]
fn gather_for_metrics_counts_each_sample_once() {
    sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        let x = Tensor::from_slice(&[0f32, 1.0, 2.0, 3.0, 4.0], &[5, 1])?;
        let mut loader = ctx.dataloader(&x, None, &DataLoaderOptions::default().with_batch_size(2))?;
        ctx.prepare(None, None, None, Some(&loader))?;
        let mut seen = Vec::new();
        let mut gathered = 0;
        for batch in loader.epoch_iter() {
            let batch = batch?;
            assert_eq!(batch.inputs.shape()?, vec![2, 1], "even_batches gives every rank full batches");
            gathered += ctx.gather(&batch.inputs)?.numel()?;
            seen.extend(f32s(&ctx.gather_for_metrics(&batch.inputs)?));
        }
        // 2 rounds of 2 ranks x 2 rows: 8 rows, 3 of them duplicated to fill the last round
        assert_eq!(gathered, 8);
        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(seen, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        Ok(())
    })
    .unwrap();
}

/// An iterable loader shards the stream as Accelerate's IterableDatasetShard: 5 samples, batch
/// 2, 2 ranks: rounds of 4, rank r taking slice r; the last, partial round [4] is completed with
/// the first round's samples ([4, 0, 1, 2]).
#[test]
fn iterable_loader_shards_the_stream() {
    sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        let x = Tensor::from_slice(&[0f32, 1.0, 2.0, 3.0, 4.0], &[5, 1])?;
        let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4], &[5])?;
        let opts = DataLoaderOptions::default().with_batch_size(2).with_iterable(true);
        let mut loader = ctx.dataloader(&x, Some(&y), &opts)?;
        ctx.prepare(None, None, None, Some(&loader))?;
        assert_eq!(loader.num_batches()?, 2);
        let mut batches = Vec::new();
        for batch in loader.epoch_iter() {
            let batch = batch?;
            let targets = batch.targets.as_ref().unwrap().to_vec::<i64>()?;
            let inputs: Vec<i64> = f32s(&batch.inputs).iter().map(|v| *v as i64).collect();
            assert_eq!(inputs, targets);
            batches.push(targets);
        }
        let want: Vec<Vec<i64>> =
            if ctx.process_index()? == 0 { vec![vec![0, 1], vec![4, 0]] } else { vec![vec![2, 3], vec![1, 2]] };
        assert_eq!(batches, want, "rank {}", ctx.process_index()?);
        let shuffled = opts.clone().with_shuffle(true);
        let err = ctx.dataloader(&x, Some(&y), &shuffled).err().expect("iterable with shuffle is refused");
        assert_eq!(err.status, Status::InvalidArgument);
        assert!(err.message.contains("shuffle must be 0 for an iterable loader"), "{}", err.message);
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_panicking_rank_fails_with_its_message() {
    let err = sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        if ctx.process_index()? == 1 {
            panic!("boom on rank one");
        }
        // rank 0 waits in a collective with the rank that panicked: it fails, no hang
        ctx.barrier()?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(err.rank, Some(1), "{}", err);
    assert_eq!(err.error.status, Status::Internal);
    assert!(err.error.message.contains("boom on rank one"), "{}", err.error.message);
    assert!(err.to_string().contains("rank 1"), "{}", err);
    let report = err.report.as_ref().unwrap();
    let r1 = report.rank(1).unwrap();
    assert_eq!(r1.status, Some(Status::Internal));
    // rank 0 also failed (its peer is gone)
    let r0 = report.rank(0).unwrap();
    assert!(r0.status.is_some(), "{:?}", r0);
    let as_error: Error = err.into();
    assert!(as_error.message.starts_with("rank 1: "), "{}", as_error.message);
}

#[test]
fn a_rank_returning_err_fails_with_that_error() {
    let err = sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        if ctx.process_index()? == 0 {
            return Err(Error::new(Status::Io, "rank zero could not read its shard"));
        }
        Ok(())
    })
    .unwrap_err();
    assert_eq!(err.rank, Some(0));
    assert_eq!(err.error, Error::new(Status::Io, "rank zero could not read its shard"));
    assert_eq!(err.report.as_ref().unwrap().rank(0).unwrap().status, Some(Status::Io));
    assert_eq!(err.report.as_ref().unwrap().rank(1).unwrap().status, None);
    assert_eq!(err.rank_errors.len(), 1);
}

#[test]
fn an_accel_error_inside_a_rank_propagates() {
    let err = sim::run(&SimOptions::with_world_size(2), &cpu_options(0), |ctx| {
        let model = ctx.mlp(&MlpOptions::new(&[2, 2]))?;
        ctx.adamw(&model, &AdamWOptions::default().with_weight_decay(f64::INFINITY))?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(err.error.status, Status::InvalidArgument);
    assert!(err.error.message.contains("weight_decay"), "{}", err.error.message);
}

#[test]
fn invalid_sim_options_fail_before_any_rank() {
    let ran = AtomicUsize::new(0);
    let f = |_: &Context| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    };
    let err = sim::run(&SimOptions::with_world_size(0), &cpu_options(0), f).unwrap_err();
    assert!(err.report.is_none() && err.rank.is_none());
    assert_eq!(err.error.status, Status::InvalidArgument);
    assert!(err.error.message.contains("world_size"), "{}", err.error.message);
    let bad_mem = SimOptions::default().with_device_memory(Some("0".into()));
    assert_eq!(sim::run(&bad_mem, &cpu_options(0), f).unwrap_err().error.status, Status::InvalidArgument);
    let cuda = cpu_options(0).with_device(Device::Cuda);
    assert_eq!(sim::run(&SimOptions::default(), &cuda, f).unwrap_err().error.status, Status::Unsupported);
    let nul = SimOptions::default().with_topology(Some("8x\0H100".into()));
    assert_eq!(sim::run(&nul, &cpu_options(0), f).unwrap_err().error.status, Status::InvalidArgument);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn ddp_keeps_ranks_in_sync_and_reports_memory() {
    let sim_opts = SimOptions::with_world_size(2).with_device_memory(Some("1GiB".into()));
    let opts = cpu_options(3).with_strategy(Strategy::Ddp);
    let report = sim::run(&sim_opts, &opts, |ctx| {
        let r = ctx.process_index()?;
        let model = ctx.mlp(&MlpOptions::new(&[2, 3, 1]))?;
        let opt = ctx.sgd(&model, &SgdOptions::default().with_lr(0.1))?;
        ctx.prepare(Some(&model), Some(&opt), None, None)?;
        // different data per rank; DDP averages the gradients, so the weights stay equal
        let x = Tensor::from_slice(&[r as f32, 1.0], &[1, 2])?;
        let t = Tensor::from_slice(&[1.0f32 - r as f32], &[1, 1])?;
        for _ in 0..3 {
            let loss = ctx.mse(&model.forward1(&x)?, &t)?;
            ctx.backward(&loss)?;
            // the gradient the step applies: averaged over the ranks, so the same on both,
            // and SGD (lr 0.1, no momentum) moves the weights by exactly lr times it
            let g = model.parameter_grad(0)?;
            let gmax = ctx.reduce(&g, ReduceOp::Max)?;
            let gmin = ctx.reduce(&g, ReduceOp::Min)?;
            assert_eq!(f32s(&gmax), f32s(&gmin));
            let before = f32s(&model.parameter(0)?);
            ctx.step()?;
            let after = f32s(&model.parameter(0)?);
            for ((a, b), d) in after.iter().zip(&before).zip(f32s(&g)) {
                assert!((a - (b - 0.1 * d)).abs() <= 1e-6 * (1.0 + b.abs()), "{a} {b} {d}");
            }
            assert!(model.parameter_grad(0).is_err(), "no gradients after the step");
        }
        let w = model.parameter(0)?;
        let max = ctx.reduce(&w, ReduceOp::Max)?;
        let min = ctx.reduce(&w, ReduceOp::Min)?;
        assert_eq!(f32s(&max), f32s(&min));
        Ok(())
    })
    .unwrap();
    for r in report.ranks().unwrap() {
        assert!(r.peak_bytes > 0, "{:?}", r);
    }
}
