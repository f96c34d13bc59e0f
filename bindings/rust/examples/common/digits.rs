//! The UCI digits (examples/data/digits.csv.gz): 64 pixels in 0..16 then the label, one
//! sample per line. std has no inflate, so a `.gz` file is read by running `gzip -dc PATH`
//! (std::process::Command); an uncompressed CSV is read directly. The split is
//! examples/c/digits.h's `digits_split` (xorshift64*, seed 42, last 20% = test), ported.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

pub const FEATURES: usize = 64;
pub const CLASSES: usize = 10;

pub struct Digits {
    pub x: Vec<f32>,
    pub y: Vec<i64>,
    pub n: usize,
}

pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/data/digits.csv.gz")
}

/// `--data PATH` from the arguments, else the repository's file.
pub fn path_from_args(args: &[String]) -> PathBuf {
    args.iter()
        .position(|a| a == "--data")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(default_path)
}

pub fn load(path: &Path) -> Result<Digits, String> {
    let text = if path.extension().map_or(false, |e| e == "gz") {
        let out = Command::new("gzip")
            .arg("-dc")
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run gzip -dc {}: {}", path.display(), e))?;
        if !out.status.success() {
            return Err(format!("gzip -dc {} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
        }
        String::from_utf8(out.stdout).map_err(|e| format!("{}: {}", path.display(), e))?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {}", path.display(), e))?
    };
    let mut d = Digits { x: Vec::new(), y: Vec::new(), n: 0 };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let vals: Vec<i64> = line
            .split(',')
            .map(|v| v.trim().parse::<i64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{}: line {} is malformed", path.display(), i + 1))?;
        if vals.len() != FEATURES + 1 {
            return Err(format!("{}: line {} has {} values", path.display(), i + 1, vals.len()));
        }
        d.x.extend(vals[..FEATURES].iter().map(|v| *v as f32 / 16.0));
        d.y.push(vals[FEATURES]);
        d.n += 1;
    }
    if d.n == 0 {
        return Err(format!("{}: no samples read", path.display()));
    }
    Ok(d)
}

/// digits_split from examples/c/digits.h.
pub fn split(all: &Digits, test_fraction: f64, seed: u64) -> (Digits, Digits) {
    let n = all.n as i64;
    let n_test = (n as f64 * test_fraction + 0.5) as i64;
    let n_train = n - n_test;
    let mut s: u64 = if seed != 0 { seed } else { 88172645463325252 };
    let mut perm: Vec<i64> = (0..n).collect();
    let mut i = n - 1;
    while i > 0 {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let j = (s.wrapping_mul(2685821657736338717) % (i as u64 + 1)) as usize;
        perm.swap(i as usize, j);
        i -= 1;
    }
    let mut train = Digits { x: Vec::new(), y: Vec::new(), n: n_train as usize };
    let mut test = Digits { x: Vec::new(), y: Vec::new(), n: n_test as usize };
    for (k, &p) in perm.iter().enumerate() {
        let d = if (k as i64) < n_train { &mut train } else { &mut test };
        let p = p as usize;
        d.x.extend_from_slice(&all.x[p * FEATURES..(p + 1) * FEATURES]);
        d.y.push(all.y[p]);
    }
    (train, test)
}
