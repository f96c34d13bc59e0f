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

/// `accel_last_error(NULL)` of this thread, copied.
fn last_error_without_context() -> String {
    // SAFETY: the library's thread-local message (never NULL), copied at once.
    unsafe { std::ffi::CStr::from_ptr(sys::accel_last_error(std::ptr::null())) }.to_string_lossy().into_owned()
}

/// An MLP trained with AdamW on 2 simulated DDP ranks (4 steps of 8 samples a rank); rank 0's
/// weights (every parameter tensor) before and after, and the run's result.
fn train_with_offload(
    offload: Offload,
    host_memory: Option<&str>,
) -> (std::result::Result<SimReport, SimError>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let before = std::sync::Mutex::new(Vec::new());
    let after = std::sync::Mutex::new(Vec::new());
    let sim_opts = SimOptions::with_world_size(2).with_host_memory(host_memory);
    let opts = cpu_options(5).with_strategy(Strategy::Ddp).with_offload(offload);
    let result = sim::run(&sim_opts, &opts, |ctx| {
        let xs: Vec<f32> = (0..64 * 8).map(|i| ((i * 37) % 101) as f32 / 101.0).collect();
        let ys: Vec<i64> = (0..64).map(|i| (i * 7 % 3) as i64).collect();
        let x = Tensor::from_slice(&xs, &[64, 8])?;
        let y = Tensor::from_slice(&ys, &[64])?;
        let model = ctx.mlp(&MlpOptions::new(&[8, 16, 3]))?;
        let opt = ctx.adamw(&model, &AdamWOptions::default().with_lr(1e-2))?;
        let loader_opts = DataLoaderOptions::default().with_batch_size(8).with_shuffle(true).with_seed(3);
        let mut loader = ctx.dataloader(&x, Some(&y), &loader_opts)?;
        ctx.prepare(Some(&model), Some(&opt), None, Some(&loader))?;
        let params = || -> Result<Vec<Vec<f32>>> {
            (0..model.num_parameters()?.0).map(|i| model.parameter(i).and_then(|t| t.to_vec::<f32>())).collect()
        };
        let first = params()?;
        for batch in loader.epoch_iter() {
            let batch = batch?;
            let loss = ctx.cross_entropy(&model.forward1(&batch.inputs)?, batch.targets.as_ref().unwrap())?;
            ctx.backward(&loss)?;
            assert!(ctx.step()?.stepped);
        }
        if ctx.process_index()? == 0 {
            *before.lock().unwrap() = first;
            *after.lock().unwrap() = params()?;
        }
        Ok(())
    });
    (result, before.into_inner().unwrap(), after.into_inner().unwrap())
}

#[test]
fn offload_optimizer_gives_the_same_weights_and_reports_the_host() {
    let (off, before, w_off) = train_with_offload(Offload::Optimizer, None);
    let (on, _, w_on) = train_with_offload(Offload::None, None);
    let (off, on) = (off.unwrap(), on.unwrap());
    assert_eq!(w_off.len(), 4);
    assert_eq!(w_on.len(), 4);
    for ((a, b), b0) in w_off.iter().zip(&w_on).zip(&before) {
        let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(a), bits(b), "bit for bit");
        assert_ne!(a, b0, "the steps moved the weights");
    }
    for r in off.ranks().unwrap() {
        assert!(r.status.is_none(), "{:?}", r);
        assert!(r.peak_bytes > 0 && r.host_peak_bytes > 0, "{:?}", r);
        assert!(r.host_transfer_bytes > 0 && r.host_transfer_seconds > 0.0, "{:?}", r);
    }
    for r in on.ranks().unwrap() {
        assert!(r.peak_bytes > 0, "{:?}", r);
        assert_eq!((r.host_peak_bytes, r.host_transfer_bytes, r.host_transfer_seconds), (0, 0, 0.0), "{:?}", r);
    }
    // the transfers are charged to the predicted time
    assert!(off.predicted_seconds().unwrap() > on.predicted_seconds().unwrap());
}

#[test]
fn offload_host_memory_budget() {
    let (result, _, _) = train_with_offload(Offload::Optimizer, Some("1KiB"));
    let err = result.unwrap_err();
    assert_eq!(err.error.status, Status::OutOfMemory, "{}", err);
    assert!(err.error.message.contains("host"), "{}", err.error.message);
    let rank = err.rank.expect("a rank failed");
    let outcome = err.report.as_ref().unwrap().rank(rank).unwrap();
    assert_eq!(outcome.status, Some(Status::OutOfMemory));
    assert!(outcome.error.contains("host"), "{}", outcome.error);
    // without offload nothing lives in host memory: the same budget is never reached
    let (result, _, _) = train_with_offload(Offload::None, Some("1KiB"));
    assert!(result.unwrap().ranks().unwrap().iter().all(|r| r.host_peak_bytes == 0));
    // a budget as device_memory's: "0" and a NUL byte are refused before any rank runs
    let f = |_: &Context| Ok(());
    let zero = SimOptions::with_world_size(2).with_host_memory(Some("0"));
    let e = sim::run(&zero, &cpu_options(0), f).unwrap_err();
    assert!(e.report.is_none() && e.error.status == Status::InvalidArgument, "{}", e);
    assert!(e.error.message.contains("host_memory"), "{}", e.error.message);
    let nul = SimOptions::with_world_size(2).with_host_memory(Some("1Gi\0B"));
    assert_eq!(sim::run(&nul, &cpu_options(0), f).unwrap_err().error.status, Status::InvalidArgument);
}

#[test]
fn offload_and_the_host_accessor_refuse_what_they_do_not_know() {
    // the enum cannot hold another value; a raw one (through sys) is refused by the library
    assert_eq!(Offload::from_raw(2), Some(Offload::Parameters));
    assert_eq!(Offload::from_raw(3), None);
    // parameter offload is ZeRO-3's: refused for any other strategy, naming why
    let err = Context::new(&cpu_options(0).with_offload(Offload::Parameters)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("only ZeRO-3"), "{}", err.message);
    drop(Context::new(&cpu_options(0).with_offload(Offload::Parameters).with_strategy(Strategy::Zero3)).unwrap());
    assert_eq!(Offload::from_raw(-1), None);
    let mut raw = cpu_options(0).to_sys().unwrap();
    raw.offload = 7;
    let mut ctx: *mut sys::accel_context = std::ptr::null_mut();
    // SAFETY: an initialised options struct and a writable out pointer.
    assert_eq!(unsafe { sys::accel_init(&raw, &mut ctx) }, sys::ACCEL_ERR_INVALID_ARGUMENT);
    assert!(ctx.is_null());
    let msg = last_error_without_context();
    assert!(msg.contains("offload"), "{}", msg);
    let ran = AtomicUsize::new(0);
    let rank_fn = |_: &Context| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    };
    // and the same through the simulator, before any rank runs
    unsafe extern "C" fn never(_: *mut sys::accel_context, _: *mut std::os::raw::c_void) -> sys::accel_status {
        sys::ACCEL_ERR_INTERNAL
    }
    let mut report: *mut sys::accel_sim_report = std::ptr::null_mut();
    let so = SimOptions::with_world_size(2).to_sys().unwrap();
    // SAFETY: complete structs (strings owned by `so`), a rank function that touches nothing, a local out pointer.
    let st = unsafe { sys::accel_sim_run(&so.raw, &raw, Some(never), std::ptr::null_mut(), &mut report) };
    assert_eq!(st, sys::ACCEL_ERR_INVALID_ARGUMENT);
    assert!(report.is_null());
    let msg = last_error_without_context();
    assert!(msg.contains("offload"), "{}", msg);
    // a rank outside the report is refused by the host accessor
    let report = sim::run(&SimOptions::with_world_size(2), &cpu_options(0).with_offload(Offload::Optimizer), rank_fn).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    for rank in [2, -1, i32::MAX] {
        let e = report.rank(rank).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument);
        assert!(e.message.contains("rank"), "{}", e.message);
        let (mut peak, mut moved, mut seconds) = (0u64, 0u64, 0.0f64);
        // SAFETY: a live report and local out-parameters.
        let st = unsafe { sys::accel_sim_report_rank_host(report.as_raw(), rank, &mut peak, &mut moved, &mut seconds) };
        assert_eq!(st, sys::ACCEL_ERR_INVALID_ARGUMENT);
        let msg = last_error_without_context();
        assert!(msg.contains(&format!("rank {} is not in this 2-rank report", rank)), "{}", msg);
    }
    // SAFETY: NULL report (refused) and NULL out-parameters (allowed).
    unsafe {
        let none = std::ptr::null();
        assert_eq!(sys::accel_sim_report_rank_host(none, 0, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()), sys::ACCEL_ERR_INVALID_ARGUMENT);
        assert_eq!(sys::accel_sim_report_rank_host(report.as_raw(), 1, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()), sys::ACCEL_OK);
    }
    // no optimizer was made: nothing was offloaded
    let r1 = report.rank(1).unwrap();
    assert_eq!((r1.host_peak_bytes, r1.host_transfer_bytes, r1.host_transfer_seconds), (0, 0, 0.0));
}
