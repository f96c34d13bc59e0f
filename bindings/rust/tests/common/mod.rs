#![allow(dead_code)]
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use accel::{Context, Options};

pub mod json;

/// A fresh, unique directory under the system's temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let p = std::env::temp_dir().join(format!(
        "accel-rust-{}-{}-{}-{}",
        tag,
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&p).unwrap();
    p
}

pub fn cpu_options(seed: u64) -> Options {
    Options::default().with_seed(seed).with_device(accel::Device::Cpu).with_num_threads(1)
}

pub fn ctx(seed: u64) -> Context {
    Context::new(&cpu_options(seed)).unwrap()
}

/// y = 2x - 1 on 8 points, x in [0, 1]
pub fn line() -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..8).map(|i| i as f32 / 7.0).collect();
    let y = x.iter().map(|v| 2.0 * v - 1.0).collect();
    (x, y)
}
