//! Trackers (`init_trackers`, `log`, `end_training`): the files written are read back and
//! checked value by value: the JSON lines (the small JSON reader of `common/json.rs`), the CSV
//! rows, and the TensorBoard event file (its TFRecord framing with masked CRC-32C, and the
//! Event protos).
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use accel::*;
use common::json::{Json, Reader};
use common::*;

/// A line of metrics.jsonl: (step, wall_time, [(name, value or None for null)]).
type Line = (i64, f64, Vec<(String, Option<f64>)>);

/// metrics.jsonl, a `Line` per line.
fn read_jsonl(path: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "{:?}", text);
    text.lines()
        .map(|line| {
            let j = Reader::parse(line);
            let keys: Vec<&str> = j.entries().iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["step", "wall_time", "values"], "{}", line);
            let step = j.get("step").num();
            assert_eq!(step.fract(), 0.0, "{}", line);
            let values = j
                .get("values")
                .entries()
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Json::Null => None,
                        v => Some(v.num()),
                    };
                    (k.clone(), v)
                })
                .collect();
            (step as i64, j.get("wall_time").num(), values)
        })
        .collect()
}

// ---- CSV ----------------------------------------------------------------------------

/// One CSV line's fields ("" quoting, RFC 4180; no newline inside a field here).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (false, ',') => fields.push(std::mem::take(&mut cur)),
            (false, '"') if cur.is_empty() => quoted = true,
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => quoted = false,
            (_, c) => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

fn csv_number(text: &str) -> f64 {
    match text {
        "nan" => f64::NAN,
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        t => t.parse().unwrap_or_else(|_| panic!("bad CSV number {:?}", t)),
    }
}

/// metrics.csv after its header: (wall_time, step, name, value) per row.
fn read_csv(path: &Path) -> Vec<(f64, i64, String, f64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("wall_time,step,name,value"), "{:?}", text);
    lines
        .map(|l| {
            let f = csv_fields(l);
            assert_eq!(f.len(), 4, "{:?}", l);
            (csv_number(&f[0]), f[1].parse().unwrap(), f[2].clone(), csv_number(&f[3]))
        })
        .collect()
}

// ---- TensorBoard: TFRecords of Event protos -------------------------------------------

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xA282_EAD8)
}

/// The records of a TFRecord file, each CRC checked.
fn tfrecords(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    while i < bytes.len() {
        assert!(bytes.len() - i >= 16, "a truncated record at {}", i);
        let len = u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
        assert_eq!(u32_at(i + 8), masked_crc32c(&bytes[i..i + 8]), "the length's CRC at {}", i);
        let data = &bytes[i + 12..i + 12 + len];
        assert_eq!(u32_at(i + 12 + len), masked_crc32c(data), "the data's CRC at {}", i);
        out.push(data.to_vec());
        i += 16 + len;
    }
    out
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let c = b[*i];
        *i += 1;
        v |= ((c & 0x7f) as u64) << shift;
        if c & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

#[derive(Debug, PartialEq)]
enum Field {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

/// A protobuf message's (field number, value) pairs, in order.
fn proto(b: &[u8]) -> Vec<(u64, Field)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let f = match key & 7 {
            0 => Field::Varint(varint(b, &mut i)),
            1 => {
                i += 8;
                Field::Fixed64(b[i - 8..i].try_into().unwrap())
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                i += n;
                Field::Bytes(b[i - n..i].to_vec())
            }
            5 => {
                i += 4;
                Field::Fixed32(b[i - 4..i].try_into().unwrap())
            }
            w => panic!("wire type {}", w),
        };
        out.push((key >> 3, f));
    }
    out
}

/// An Event: (wall_time, step, file_version, [(tag, simple_value)]).
#[derive(Debug)]
struct Event {
    wall_time: f64,
    step: i64,
    file_version: Option<String>,
    scalars: Vec<(String, f32)>,
}

fn event(b: &[u8]) -> Event {
    let mut e = Event { wall_time: f64::NAN, step: -1, file_version: None, scalars: Vec::new() };
    for (n, f) in proto(b) {
        match (n, f) {
            (1, Field::Fixed64(v)) => e.wall_time = f64::from_le_bytes(v),
            (2, Field::Varint(v)) => e.step = v as i64,
            (3, Field::Bytes(v)) => e.file_version = Some(String::from_utf8(v).unwrap()),
            (5, Field::Bytes(summary)) => {
                for (n, f) in proto(&summary) {
                    let value = match (n, f) {
                        (1, Field::Bytes(v)) => v,
                        other => panic!("Summary field {:?}", other),
                    };
                    let (mut tag, mut simple) = (None, None);
                    for (n, f) in proto(&value) {
                        match (n, f) {
                            (1, Field::Bytes(t)) => tag = Some(String::from_utf8(t).unwrap()),
                            (2, Field::Fixed32(v)) => simple = Some(f32::from_le_bytes(v)),
                            other => panic!("Summary.Value field {:?}", other),
                        }
                    }
                    e.scalars.push((tag.unwrap(), simple.unwrap()));
                }
            }
            other => panic!("Event field {:?}", other),
        }
    }
    e
}

fn event_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."))
        .collect();
    v.sort();
    v
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

// ---- the tests ----------------------------------------------------------------------

const STEPS: [(i64, &[(&str, f64)]); 4] = [
    (0, &[("loss", 2.5), ("lr", 1e-3), ("accuracy", 0.1)]),
    (10, &[("loss", 0.1 + 0.2), ("lr", 9.5e-4), ("accuracy", 1.0 / 3.0)]),
    (20, &[("loss", 1e-300), ("lr", 0.0), ("accuracy", -0.0)]),
    (30, &[("loss", f64::NAN), ("lr", f64::INFINITY), ("accuracy", f64::NEG_INFINITY)]),
];

#[test]
fn logs_jsonl_csv_and_tensorboard_files_read_back_value_by_value() {
    let root = temp_dir("trackers");
    let dir = root.join("run").join("a"); // created where missing
    let ctx = ctx(0);
    let before = now();
    ctx.init_trackers(&TrackerOptions::new(&dir).with_writers(LogWriters::ALL)).unwrap();
    for (step, values) in STEPS {
        ctx.log(step, values).unwrap();
    }
    // names that need quoting in CSV and escaping in JSON, and non-ASCII text
    let odd: &[(&str, f64)] = &[("eval/acc, top-1", 0.75), ("say \"hi\"", 1.5), ("λ", -2.0)];
    ctx.log(40, odd).unwrap();
    // each call is flushed before it returns: readable while the trackers are open
    assert_eq!(read_jsonl(&dir.join("metrics.jsonl")).len(), STEPS.len() + 1);
    ctx.end_training().unwrap();
    let after = now();

    let mut expected: Vec<(i64, Vec<(&str, f64)>)> = STEPS.iter().map(|(s, v)| (*s, v.to_vec())).collect();
    expected.push((40, odd.to_vec()));

    // JSON lines: one per call, the values exactly (shortest round-trip text), not-finite as null
    let lines = read_jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(lines.len(), expected.len());
    let mut last_time = before - 1.0;
    for ((step, time, values), (want_step, want)) in lines.iter().zip(&expected) {
        assert_eq!(step, want_step);
        assert!(*time >= before - 1.0 && *time <= after + 1.0, "wall_time {} not in [{}, {}]", time, before, after);
        assert!(*time >= last_time, "wall_time went back: {} after {}", time, last_time);
        last_time = *time;
        let names: Vec<&str> = values.iter().map(|(n, _)| n.as_str()).collect();
        let want_names: Vec<&str> = want.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, want_names, "the names in the order logged");
        for ((name, got), (_, v)) in values.iter().zip(want) {
            if v.is_finite() {
                assert_eq!(got.map(f64::to_bits), Some(v.to_bits()), "step {} {}: {:?} vs {}", step, name, got, v);
            } else {
                assert_eq!(*got, None, "step {} {}: a value that is not finite is null", step, name);
            }
        }
    }

    // CSV: the header once, a row per scalar in the order logged, the same wall_time as the line
    let rows = read_csv(&dir.join("metrics.csv"));
    let want_rows: Vec<(i64, &str, f64)> =
        expected.iter().flat_map(|(s, vals)| vals.iter().map(move |(n, v)| (*s, *n, *v))).collect();
    assert_eq!(rows.len(), want_rows.len());
    for ((time, step, name, value), (ws, wn, wv)) in rows.iter().zip(&want_rows) {
        assert_eq!((step, name.as_str()), (ws, *wn));
        if wv.is_nan() {
            assert!(value.is_nan(), "{} {}: {} vs NaN", step, name, value);
        } else {
            assert_eq!(value.to_bits(), wv.to_bits(), "{} {}: {} vs {}", step, name, value, wv);
        }
        let line_time = lines.iter().find(|(s, _, _)| s == step).unwrap().1;
        assert_eq!(*time, line_time, "step {}: the CSV row and the JSON line share their wall_time", step);
    }

    // TensorBoard: one event file; the file version, then an Event per call with f32 scalars
    let files = event_files(&dir);
    assert_eq!(files.len(), 1, "{:?}", files);
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.ends_with(&format!(".{}", std::process::id())), "events.out.tfevents.TIME.HOST.PID: {}", name);
    let records = tfrecords(&std::fs::read(&files[0]).unwrap());
    assert_eq!(records.len(), 1 + expected.len());
    let first = event(&records[0]);
    assert_eq!(first.file_version.as_deref(), Some("brain.Event:2"));
    assert!(first.scalars.is_empty());
    for (rec, (step, want)) in records[1..].iter().zip(&expected) {
        let e = event(rec);
        assert_eq!(e.step, *step);
        assert_eq!(e.file_version, None);
        assert!(e.wall_time >= before - 1.0 && e.wall_time <= after + 1.0, "{:?}", e);
        assert_eq!(e.wall_time, lines.iter().find(|(s, _, _)| s == step).unwrap().1);
        assert_eq!(e.scalars.len(), want.len());
        for ((tag, v), (n, w)) in e.scalars.iter().zip(want) {
            assert_eq!(tag, n);
            let w = *w as f32;
            assert!(v.to_bits() == w.to_bits() || (v.is_nan() && w.is_nan()), "{} at {}: {} vs {}", n, step, v, w);
        }
    }
    // 1e-300 is 0 as an f32; -0.0 keeps its sign
    let e = event(&records[3]);
    assert_eq!(e.scalars[0].1, 0.0);
    assert!(e.scalars[2].1.is_sign_negative());

    // again: the lines and rows are appended to (no second header), a new event file
    ctx.init_trackers(&TrackerOptions::new(&dir).with_writers(LogWriters::ALL)).unwrap();
    ctx.log(50, &[("loss", 0.05)]).unwrap();
    ctx.end_training().unwrap();
    let lines2 = read_jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(lines2.len(), lines.len() + 1);
    assert_eq!(lines2.last().unwrap().0, 50);
    assert_eq!(lines2.last().unwrap().2, vec![("loss".to_string(), Some(0.05))]);
    let rows2 = read_csv(&dir.join("metrics.csv")); // asserts the one header
    assert_eq!(rows2.len(), rows.len() + 1);
    assert_eq!((rows2.last().unwrap().1, rows2.last().unwrap().2.as_str(), rows2.last().unwrap().3), (50, "loss", 0.05));
    let files2 = event_files(&dir);
    assert_eq!(files2.len(), 2, "{:?}", files2);
    assert_eq!(tfrecords(&std::fs::read(&files[0]).unwrap()).len(), records.len(), "the first event file is untouched");
    let new_file = files2.iter().find(|p| **p != files[0]).unwrap();
    let recs = tfrecords(&std::fs::read(new_file).unwrap());
    assert_eq!(recs.len(), 2);
    assert_eq!(event(&recs[1]).scalars, vec![("loss".to_string(), 0.05f32)]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn only_the_writers_asked_for_are_written() {
    let root = temp_dir("trackers-writers");
    let ctx = ctx(0);
    let cases = [
        ("jsonl", LogWriters::JSONL),
        ("csv", LogWriters::CSV),
        ("tb", LogWriters::TENSORBOARD),
        ("two", LogWriters::CSV | LogWriters::TENSORBOARD),
    ];
    for (sub, writers) in cases {
        let dir = root.join(sub);
        ctx.init_trackers(&TrackerOptions::new(&dir).with_writers(writers)).unwrap();
        ctx.log(1, &[("x", 1.0)]).unwrap();
        ctx.end_training().unwrap();
        assert_eq!(dir.join("metrics.jsonl").exists(), writers.contains(LogWriters::JSONL), "{:?}", writers);
        assert_eq!(dir.join("metrics.csv").exists(), writers.contains(LogWriters::CSV), "{:?}", writers);
        assert_eq!(event_files(&dir).len(), writers.contains(LogWriters::TENSORBOARD) as usize, "{:?}", writers);
    }
    std::fs::remove_dir_all(&root).unwrap();

    // the flag set
    let w = LogWriters::JSONL | LogWriters::CSV;
    assert!(w.contains(LogWriters::CSV) && !w.contains(LogWriters::TENSORBOARD) && !w.is_empty());
    assert_eq!(w.bits(), (sys::ACCEL_LOG_JSONL | sys::ACCEL_LOG_CSV) as u32);
    assert_eq!(LogWriters::ALL.bits(), 7);
    assert_eq!(LogWriters::default(), LogWriters::empty());
    assert!(LogWriters::empty().is_empty());
    assert_eq!(LogWriters::from_bits(5), Some(LogWriters::JSONL | LogWriters::TENSORBOARD));
    assert_eq!(LogWriters::from_bits(8), None);
    assert_eq!(format!("{:?}", w), "LogWriters(JSONL | CSV)");
    let mut m = LogWriters::empty();
    m |= LogWriters::TENSORBOARD;
    assert_eq!(m, LogWriters::TENSORBOARD);
}

#[test]
fn misuse_gives_the_header_statuses_and_leaves_the_trackers_usable() {
    let root = temp_dir("trackers-errors");
    let dir = root.join("run");
    let ctx = ctx(0);
    // before init_trackers: InvalidState, naming the call to make first
    let e = ctx.log(0, &[("loss", 1.0)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidState, "{}", e);
    assert!(e.message.starts_with("accel_log") && e.message.contains("accel_init_trackers"), "{}", e.message);
    assert_eq!(ctx.log(0, &[]).unwrap_err().status, Status::InvalidState);
    ctx.end_training().unwrap(); // none open: nothing to do

    // bad options: no log_dir, a log_dir that is a regular file (left as it was)
    let e = ctx.init_trackers(&TrackerOptions::default()).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("log_dir"), "{}", e.message);
    let file = root.join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let e = ctx.init_trackers(&TrackerOptions::new(&file).with_writers(LogWriters::JSONL)).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("not a directory"), "{}", e.message);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    let e = ctx.init_trackers(&TrackerOptions::default().with_log_dir(PathBuf::from("a\0b"))).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("NUL"), "{}", e.message);
    // a failed init leaves nothing open
    assert_eq!(ctx.log(0, &[("loss", 1.0)]).unwrap_err().status, Status::InvalidState);

    let opts = TrackerOptions::new(&dir).with_writers(LogWriters::JSONL | LogWriters::CSV);
    ctx.init_trackers(&opts).unwrap();
    // a second init while open: InvalidState
    let e = ctx.init_trackers(&opts).unwrap_err();
    assert_eq!(e.status, Status::InvalidState, "{}", e);
    assert!(e.message.contains("already open"), "{}", e.message);

    // a name with a NUL byte: the binding's InvalidArgument, before anything is written
    let e = ctx.log(1, &[("loss", 1.0), ("a\0b", 2.0)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("values[1].name") && e.message.contains("NUL"), "{}", e.message);
    // the library's checks
    let e = ctx.log(1, &[("loss", 1.0), ("loss", 2.0)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("'loss' appears twice"), "{}", e.message);
    assert_eq!(ctx.last_error(), e.message);
    let e = ctx.log(1, &[("", 1.0)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("empty"), "{}", e.message);
    let e = ctx.log(-1, &[("loss", 1.0)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("step"), "{}", e.message);
    let e = ctx.log(1, &[]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert!(e.message.contains("count"), "{}", e.message);
    // nothing of the refused calls was written; the trackers still work
    assert!(read_jsonl(&dir.join("metrics.jsonl")).is_empty());
    assert!(read_csv(&dir.join("metrics.csv")).is_empty());
    ctx.log(2, &[("loss", 0.5)]).unwrap();
    let lines = read_jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].0, &lines[0].2), (2, &vec![("loss".to_string(), Some(0.5))]));

    // after end_training: InvalidState again; end_training twice is fine
    ctx.end_training().unwrap();
    let e = ctx.log(3, &[("loss", 0.25)]).unwrap_err();
    assert_eq!(e.status, Status::InvalidState, "{}", e);
    ctx.end_training().unwrap();
    assert_eq!(read_jsonl(&dir.join("metrics.jsonl")).len(), 1);
    std::fs::remove_dir_all(&root).unwrap();
}

/// Dropping the context closes the trackers: everything logged is on disk.
#[test]
fn dropping_the_context_closes_the_trackers() {
    let root = temp_dir("trackers-drop");
    {
        let ctx = ctx(0);
        ctx.init_trackers(&TrackerOptions::new(&root).with_writers(LogWriters::ALL)).unwrap();
        for s in 0..5 {
            ctx.log(s, &[("loss", s as f64 / 8.0)]).unwrap();
        }
    }
    let lines = read_jsonl(&root.join("metrics.jsonl"));
    assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    assert_eq!(read_csv(&root.join("metrics.csv")).len(), 5);
    let files = event_files(&root);
    assert_eq!(files.len(), 1);
    assert_eq!(tfrecords(&std::fs::read(&files[0]).unwrap()).len(), 6);
    std::fs::remove_dir_all(&root).unwrap();
}

/// On simulated ranks: the main process alone writes, unless every process is asked to
/// (then into LOG_DIR/process-RANK); every rank checks its arguments.
#[test]
fn the_main_process_writes_unless_every_process_is_asked() {
    let root = temp_dir("trackers-sim");
    for all in [false, true] {
        let dir = root.join(if all { "all" } else { "main" });
        sim::run(&SimOptions::with_world_size(3), &cpu_options(0), |ctx| {
            let writers = LogWriters::JSONL | LogWriters::CSV;
            let opts = TrackerOptions::new(&dir).with_writers(writers).with_all_processes(all);
            ctx.init_trackers(&opts)?;
            let r = ctx.process_index()?;
            ctx.log(1, &[("rank", r as f64), ("half", r as f64 / 2.0)])?;
            let e = ctx.log(2, &[("a", 1.0), ("a", 2.0)]).unwrap_err();
            assert_eq!(e.status, Status::InvalidArgument, "rank {}: {}", r, e);
            assert_eq!(ctx.init_trackers(&opts).unwrap_err().status, Status::InvalidState, "rank {}", r);
            ctx.end_training()
        })
        .unwrap();
        if all {
            assert!(!dir.join("metrics.jsonl").exists());
            for r in 0..3 {
                let p = dir.join(format!("process-{}", r));
                let lines = read_jsonl(&p.join("metrics.jsonl"));
                assert_eq!(lines.len(), 1, "rank {}", r);
                assert_eq!(
                    lines[0].2,
                    vec![("rank".to_string(), Some(r as f64)), ("half".to_string(), Some(r as f64 / 2.0))],
                    "rank {}",
                    r
                );
                let rows = read_csv(&p.join("metrics.csv"));
                let rows: Vec<_> = rows.iter().map(|r| (r.1, r.2.as_str(), r.3)).collect();
                assert_eq!(rows, vec![(1, "rank", r as f64), (1, "half", r as f64 / 2.0)], "rank {}", r);
            }
        } else {
            let lines = read_jsonl(&dir.join("metrics.jsonl"));
            assert_eq!(lines.len(), 1, "{:?}", lines);
            assert_eq!(lines[0].2, vec![("rank".to_string(), Some(0.0)), ("half".to_string(), Some(0.0))]);
            assert_eq!(read_csv(&dir.join("metrics.csv")).len(), 2);
            let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(entries.len(), 2, "only the main process's two files: {:?}", entries);
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

// ---- writers left to the environment (ACCEL_LOG_WITH), in child processes -------------

const CHILD_DIR: &str = "ACCEL_RUST_TRACKERS_CHILD_DIR";
const CHILD_TEST: &str = "child_opens_trackers_with_the_default_writers";

/// Run by `default_writers_come_from_accel_log_with` in a child process (the environment is
/// the process's: setting it here would race with the other tests' threads).
#[test]
#[ignore = "run in a child process by default_writers_come_from_accel_log_with"]
fn child_opens_trackers_with_the_default_writers() {
    let dir = match std::env::var_os(CHILD_DIR) {
        Some(d) => PathBuf::from(d),
        None => return,
    };
    let ctx = ctx(0);
    match ctx.init_trackers(&TrackerOptions::new(&dir)) {
        Ok(()) => {
            ctx.log(1, &[("x", 0.5)]).unwrap();
            ctx.end_training().unwrap();
        }
        Err(e) => std::fs::write(dir.join("error.txt"), format!("{:?}: {}", e.status, e.message)).unwrap(),
    }
}

fn run_child(dir: &Path, log_with: Option<&str>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([CHILD_TEST, "--exact", "--ignored", "--test-threads=1"]).env(CHILD_DIR, dir);
    match log_with {
        Some(w) => cmd.env("ACCEL_LOG_WITH", w),
        None => cmd.env_remove("ACCEL_LOG_WITH"),
    };
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "the child test ({:?}): {}", log_with, text);
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            if n.starts_with("events.out.tfevents.") {
                "events".to_string()
            } else {
                n
            }
        })
        .collect();
    v.sort();
    v
}

#[test]
fn default_writers_come_from_accel_log_with() {
    let root = temp_dir("trackers-env");
    let cases: [(&str, Option<&str>, &[&str]); 5] = [
        ("unset", None, &["metrics.jsonl"]),
        ("empty", Some(""), &["metrics.jsonl"]),
        ("csv-tb", Some("csv, tensorboard"), &["events", "metrics.csv"]),
        ("all", Some("all"), &["events", "metrics.csv", "metrics.jsonl"]),
        ("bogus", Some("csv,bogus"), &["error.txt"]),
    ];
    for (sub, with, want) in cases {
        let dir = root.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        run_child(&dir, with);
        assert_eq!(files_in(&dir), want.to_vec(), "ACCEL_LOG_WITH={:?}", with);
    }
    let err = std::fs::read_to_string(root.join("bogus/error.txt")).unwrap();
    assert!(err.starts_with("InvalidArgument: accel_init_trackers"), "{}", err);
    assert!(err.contains("ACCEL_LOG_WITH 'csv,bogus': 'bogus' is not a writer"), "{}", err);
    let lines = read_jsonl(&root.join("unset/metrics.jsonl"));
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].0, &lines[0].2), (1, &vec![("x".to_string(), Some(0.5))]));
    std::fs::remove_dir_all(&root).unwrap();
}
