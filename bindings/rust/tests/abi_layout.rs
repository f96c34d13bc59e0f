//! Compares the hand-written `sys` module with the C header, through the layout table the
//! C program `abi_layout_probe` (built from accel.h) prints: every struct's size, alignment
//! and field offsets/sizes, every enum constant, options version and INIT default, and the
//! function list (both ways).
use std::collections::{BTreeMap, BTreeSet};
use std::mem::{align_of, size_of, MaybeUninit};
use std::path::PathBuf;
use std::process::Command;

use accel::sys;

fn probe_path() -> PathBuf {
    if let Some(p) = std::env::var_os("ACCEL_LAYOUT_PROBE") {
        return PathBuf::from(p);
    }
    // ACCEL_LIB_DIR now, else the directory accel-sys linked (its `DEP_ACCEL_LIB_DIR`, passed
    // by build.rs): a meson build directory holds the probe.
    let lib_dir = std::env::var_os("ACCEL_LIB_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| option_env!("ACCEL_FOUND_LIB_DIR").map(PathBuf::from));
    if let Some(d) = lib_dir {
        let p = d.join("tests/abi/abi_layout_probe");
        if p.exists() {
            return p;
        }
        panic!(
            "the ABI layout probe was not found: ACCEL_LAYOUT_PROBE is unset and {} does not exist. \
             Set ACCEL_LAYOUT_PROBE to the abi_layout_probe program (the meson build makes it as \
             BUILD/tests/abi/abi_layout_probe)",
            p.display()
        );
    }
    panic!(
        "the ABI layout probe was not found: set ACCEL_LAYOUT_PROBE to the abi_layout_probe program, \
         or ACCEL_LIB_DIR (or PKG_CONFIG_PATH=BUILD/meson-uninstalled) to a meson build directory \
         holding tests/abi/abi_layout_probe"
    );
}

struct Table {
    structs: BTreeMap<String, (usize, usize)>,
    fields: BTreeMap<String, (usize, usize)>,
    consts: BTreeMap<String, i64>,
    versions: BTreeMap<String, u32>,
    defaults: BTreeMap<String, String>,
    functions: BTreeMap<String, String>,
    enums: BTreeMap<String, usize>,
}

fn kv(word: &str, key: &str) -> usize {
    word.strip_prefix(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad {} in {}", key, word))
}

fn table() -> Table {
    let path = probe_path();
    let out = Command::new(&path).output().unwrap_or_else(|e| panic!("cannot run {}: {}", path.display(), e));
    assert!(out.status.success(), "{} failed", path.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut t = Table {
        structs: BTreeMap::new(),
        fields: BTreeMap::new(),
        consts: BTreeMap::new(),
        versions: BTreeMap::new(),
        defaults: BTreeMap::new(),
        functions: BTreeMap::new(),
        enums: BTreeMap::new(),
    };
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first().copied() {
            Some("struct") => {
                t.structs.insert(w[1].to_string(), (kv(w[2], "size="), kv(w[3], "align=")));
            }
            Some("enum") => {
                t.enums.insert(w[1].to_string(), kv(w[2], "size="));
            }
            Some("field") => {
                t.fields.insert(w[1].to_string(), (kv(w[2], "offset="), kv(w[3], "size=")));
            }
            Some("const") => {
                let name = w[1].split('.').nth(1).unwrap().to_string();
                t.consts.insert(name, w[2].parse().unwrap());
            }
            Some("version") => {
                t.versions.insert(w[1].to_string(), w[2].parse().unwrap());
            }
            Some("default") => {
                t.defaults.insert(w[1].to_string(), w[2..].join(" "));
            }
            Some("function") => {
                t.functions.insert(w[1].to_string(), w[2..].join(" "));
            }
            _ => {}
        }
    }
    assert!(t.functions.len() >= 81, "the probe listed only {} functions", t.functions.len());
    t
}

fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// (struct name, size, align, [(field, offset, size)]) of a Rust mirror, offsets computed
/// as a field's address minus the base address of a MaybeUninit value (no offset_of!).
macro_rules! layout {
    ($t:ident { $($f:ident),+ $(,)? }) => {{
        let v = MaybeUninit::<sys::$t>::uninit();
        let base = v.as_ptr();
        let mut fields = Vec::new();
        $(
            // SAFETY: addr_of! on a field of an uninitialised struct creates no reference.
            let p = unsafe { std::ptr::addr_of!((*base).$f) };
            fields.push((stringify!($f), p as usize - base as usize, pointee_size(p)));
        )+
        (stringify!($t), size_of::<sys::$t>(), align_of::<sys::$t>(), fields)
    }};
}

#[test]
fn struct_layouts_match_the_header() {
    let t = table();
    let mirrors = vec![
        layout!(accel_options {
            version, mixed_precision, gradient_accumulation_steps, seed, device, device_index,
            loss_scale_init, loss_scale_growth_factor, loss_scale_backoff_factor,
            loss_scale_growth_interval, num_threads, strategy, bucket_bytes, backend, timeout_seconds, offload
        }),
        layout!(accel_mlp_options { version, layer_sizes, num_layer_sizes, activation, dropout, bias }),
        layout!(accel_sgd_options { version, lr, momentum, dampening, weight_decay, nesterov }),
        layout!(accel_adamw_options { version, lr, beta1, beta2, eps, weight_decay }),
        layout!(accel_lamb_options { version, lr, beta1, beta2, eps, weight_decay }),
        layout!(accel_scheduler_options { version, kind, warmup_steps, total_steps, min_lr_ratio }),
        layout!(accel_dataloader_options {
            version, batch_size, shuffle, seed, drop_last, even_batches, split_batches, iterable
        }),
        layout!(accel_step_result { stepped, skipped, sync_step, loss_scale, optimizer_steps, micro_steps }),
        layout!(accel_sim_options {
            version, world_size, device_memory, topology, timeout_seconds, faults, trace_path, engine_threads,
            host_memory
        }),
        layout!(accel_project_options { version, project_dir, total_limit }),
        layout!(accel_lm_options { version, dtype, gradient_checkpointing, quantization, double_quant }),
        layout!(accel_adafactor_options {
            version, lr, eps1, eps2, clip_threshold, decay_rate, beta1, weight_decay, scale_parameter, relative_step,
            warmup_init
        }),
        layout!(accel_generate_options { version, max_new_tokens, temperature, top_k, eos_token_id, seed, use_cache }),
        layout!(accel_lora_options { version, r, alpha, dropout, target_modules, use_rslora }),
        layout!(accel_lm_data_options {
            version, block_size, max_length, pad_id, pad_to_multiple_of, group_by_length, padding_side
        }),
        layout!(accel_memory_estimate_options {
            version, mixed_precision, weights_dtype, optimizer, strategy, world_size, micro_batch, seq_len,
            gradient_checkpointing, lora_rank, lora_target_modules, attention, offload, quantization, double_quant
        }),
        layout!(accel_memory_estimate {
            version, parameters, trainable_parameters, seq_len, attention, weights, gradients, optimizer_state,
            activations, temporaries, total, host, transfer_bytes, gradient_transfer_bytes
        }),
        layout!(accel_tracker_options { version, log_dir, writers, all_processes }),
        layout!(accel_inference_options { version, num_threads }),
        layout!(accel_train_result {
            version, micro_batches, optimizer_steps, skipped_steps, epoch_ended, mean_loss, seconds
        }),
        layout!(accel_encode_options {
            version, add_special_tokens, replace_invalid_utf8, max_length, truncation_side, padding_side,
            pad_to_max_length, pad_to_multiple_of, pad_id
        }),
        layout!(accel_chat_message { role, content }),
        layout!(accel_sft_options {
            version, chat_format, completion_only_loss, add_eos, max_length, packing, padding_side, pad_to_multiple_of,
            pad_id
        }),
    ];
    let mut seen_structs = BTreeSet::new();
    let mut seen_fields = BTreeSet::new();
    for (name, size, align, fields) in &mirrors {
        let (csize, calign) = *t.structs.get(*name).unwrap_or_else(|| panic!("the probe has no struct {}", name));
        assert_eq!((*size, *align), (csize, calign), "{}: Rust (size, align) vs C", name);
        for (f, off, fsize) in fields {
            let key = format!("{}.{}", name, f);
            let (coff, csz) = *t.fields.get(&key).unwrap_or_else(|| panic!("the probe has no field {}", key));
            assert_eq!((*off, *fsize), (coff, csz), "{}: Rust (offset, size) vs C", key);
            seen_fields.insert(key);
        }
        seen_structs.insert(name.to_string());
    }
    // nothing in the header that the mirror lacks
    let missing: Vec<_> = t.structs.keys().filter(|s| !seen_structs.contains(*s)).collect();
    assert!(missing.is_empty(), "structs of the header not mirrored: {:?}", missing);
    let missing: Vec<_> = t.fields.keys().filter(|f| !seen_fields.contains(*f)).collect();
    assert!(missing.is_empty(), "fields of the header not mirrored: {:?}", missing);
    // enums are C ints
    for (e, size) in &t.enums {
        assert_eq!(*size, size_of::<std::os::raw::c_int>(), "enum {}", e);
    }
}

#[test]
fn constants_match_the_header() {
    let t = table();
    macro_rules! consts {
        ($($c:ident),+ $(,)?) => { vec![$((stringify!($c), sys::$c as i64)),+] };
    }
    let mirror = consts![
        ACCEL_OK, ACCEL_ERR_INVALID_ARGUMENT, ACCEL_ERR_INVALID_STATE, ACCEL_ERR_OUT_OF_MEMORY,
        ACCEL_ERR_COMMUNICATION, ACCEL_ERR_TIMEOUT, ACCEL_ERR_IO, ACCEL_ERR_FORMAT, ACCEL_ERR_UNSUPPORTED,
        ACCEL_ERR_INTERNAL, ACCEL_ERR_NON_FINITE,
        ACCEL_FLOAT32, ACCEL_FLOAT16, ACCEL_BFLOAT16, ACCEL_INT64, ACCEL_INT32, ACCEL_UINT8, ACCEL_FLOAT64, ACCEL_INT8,
        ACCEL_PRECISION_NO, ACCEL_PRECISION_BF16, ACCEL_PRECISION_FP16, ACCEL_PRECISION_AUTO,
        ACCEL_DEVICE_AUTO, ACCEL_DEVICE_CPU, ACCEL_DEVICE_CUDA,
        ACCEL_STRATEGY_NO, ACCEL_STRATEGY_DDP, ACCEL_STRATEGY_ZERO1, ACCEL_STRATEGY_ZERO2, ACCEL_STRATEGY_ZERO3,
        ACCEL_STRATEGY_SHARD_GRAD_OP, ACCEL_STRATEGY_FULL_SHARD,
        ACCEL_BACKEND_AUTO, ACCEL_BACKEND_GLOO, ACCEL_BACKEND_NCCL, ACCEL_BACKEND_SIM,
        ACCEL_OFFLOAD_NONE, ACCEL_OFFLOAD_OPTIMIZER, ACCEL_OFFLOAD_PARAMETERS,
        ACCEL_ACT_RELU, ACCEL_ACT_GELU, ACCEL_ACT_TANH, ACCEL_ACT_SIGMOID,
        ACCEL_SCHEDULE_CONSTANT, ACCEL_SCHEDULE_LINEAR, ACCEL_SCHEDULE_COSINE,
        ACCEL_REDUCE_SUM, ACCEL_REDUCE_MEAN, ACCEL_REDUCE_MAX, ACCEL_REDUCE_MIN, ACCEL_REDUCE_PROD,
        ACCEL_OPTIMIZER_SGD, ACCEL_OPTIMIZER_SGD_MOMENTUM, ACCEL_OPTIMIZER_ADAMW, ACCEL_OPTIMIZER_ADAFACTOR,
        ACCEL_OPTIMIZER_LAMB,
        ACCEL_LOG_JSONL, ACCEL_LOG_CSV, ACCEL_LOG_TENSORBOARD,
        ACCEL_LOSS_MSE, ACCEL_LOSS_CROSS_ENTROPY, ACCEL_LOSS_CAUSAL_LM,
        ACCEL_TOKEN_BOS, ACCEL_TOKEN_EOS, ACCEL_TOKEN_PAD, ACCEL_TOKEN_UNK,
        ACCEL_SIDE_RIGHT, ACCEL_SIDE_LEFT,
        ACCEL_CHAT_AUTO, ACCEL_CHAT_CHATML, ACCEL_CHAT_LLAMA3, ACCEL_CHAT_GEMMA, ACCEL_CHAT_PHI3, ACCEL_CHAT_MISTRAL,
        ACCEL_QUANT_NONE, ACCEL_QUANT_NF4, ACCEL_QUANT_FP4, ACCEL_QUANT_INT8,
    ];
    let names: BTreeSet<&str> = mirror.iter().map(|(n, _)| *n).collect();
    for (name, value) in &mirror {
        let c = t.consts.get(*name).unwrap_or_else(|| panic!("the probe has no constant {}", name));
        assert_eq!(value, c, "{}", name);
    }
    let missing: Vec<_> = t.consts.keys().filter(|c| !names.contains(c.as_str())).collect();
    assert!(missing.is_empty(), "constants of the header not mirrored: {:?}", missing);

    // options versions
    let versions = vec![
        ("accel_options", sys::ACCEL_OPTIONS_VERSION),
        ("accel_mlp_options", sys::ACCEL_MLP_OPTIONS_VERSION),
        ("accel_sgd_options", sys::ACCEL_SGD_OPTIONS_VERSION),
        ("accel_adamw_options", sys::ACCEL_ADAMW_OPTIONS_VERSION),
        ("accel_lamb_options", sys::ACCEL_LAMB_OPTIONS_VERSION),
        ("accel_scheduler_options", sys::ACCEL_SCHEDULER_OPTIONS_VERSION),
        ("accel_dataloader_options", sys::ACCEL_DATALOADER_OPTIONS_VERSION),
        ("accel_sim_options", sys::ACCEL_SIM_OPTIONS_VERSION),
        ("accel_project_options", sys::ACCEL_PROJECT_OPTIONS_VERSION),
        ("accel_lm_options", sys::ACCEL_LM_OPTIONS_VERSION),
        ("accel_lm_data_options", sys::ACCEL_LM_DATA_OPTIONS_VERSION),
        ("accel_lora_options", sys::ACCEL_LORA_OPTIONS_VERSION),
        ("accel_adafactor_options", sys::ACCEL_ADAFACTOR_OPTIONS_VERSION),
        ("accel_generate_options", sys::ACCEL_GENERATE_OPTIONS_VERSION),
        ("accel_memory_estimate_options", sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION),
        ("accel_memory_estimate", sys::ACCEL_MEMORY_ESTIMATE_VERSION),
        ("accel_tracker_options", sys::ACCEL_TRACKER_OPTIONS_VERSION),
        ("accel_inference_options", sys::ACCEL_INFERENCE_OPTIONS_VERSION),
        ("accel_train_result", sys::ACCEL_TRAIN_RESULT_VERSION),
        ("accel_encode_options", sys::ACCEL_ENCODE_OPTIONS_VERSION),
        ("accel_sft_options", sys::ACCEL_SFT_OPTIONS_VERSION),
    ];
    for (s, v) in &versions {
        assert_eq!(Some(v), t.versions.get(*s), "version of {}", s);
    }
    assert_eq!(versions.len(), t.versions.len(), "option structs with a version: {:?}", t.versions);

    // version macros: the library this header ships with
    let (number, string) = accel::version();
    assert_eq!(number, sys::ACCEL_VERSION_NUMBER);
    assert_eq!(string, sys::ACCEL_VERSION_STRING);
    assert_eq!(
        sys::ACCEL_VERSION_STRING,
        format!("{}.{}.{}", sys::ACCEL_VERSION_MAJOR, sys::ACCEL_VERSION_MINOR, sys::ACCEL_VERSION_PATCH)
    );
}

#[test]
fn init_defaults_match_the_header() {
    let t = table();
    let mut seen = BTreeSet::new();
    let mut check = |key: String, rust: String| {
        let c = t.defaults.get(&key).unwrap_or_else(|| panic!("the probe has no default {}", key));
        // numbers compare as numbers ("65536" vs 65536.0), the rest as text
        match (c.parse::<f64>(), rust.parse::<f64>()) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "default {}", key),
            _ => assert_eq!(c, &rust, "default {}", key),
        }
        seen.insert(key);
    };
    fn s(p: *const std::os::raw::c_char) -> String {
        if p.is_null() {
            "NULL".into()
        } else {
            format!("{:?}", unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap())
        }
    }
    let o = sys::ACCEL_OPTIONS_INIT;
    for (f, v) in [
        ("mixed_precision", o.mixed_precision.to_string()),
        ("gradient_accumulation_steps", o.gradient_accumulation_steps.to_string()),
        ("seed", o.seed.to_string()),
        ("device", o.device.to_string()),
        ("device_index", o.device_index.to_string()),
        ("loss_scale_init", o.loss_scale_init.to_string()),
        ("loss_scale_growth_factor", o.loss_scale_growth_factor.to_string()),
        ("loss_scale_backoff_factor", o.loss_scale_backoff_factor.to_string()),
        ("loss_scale_growth_interval", o.loss_scale_growth_interval.to_string()),
        ("num_threads", o.num_threads.to_string()),
        ("strategy", o.strategy.to_string()),
        ("bucket_bytes", o.bucket_bytes.to_string()),
        ("backend", o.backend.to_string()),
        ("timeout_seconds", o.timeout_seconds.to_string()),
        ("offload", o.offload.to_string()),
    ] {
        check(format!("accel_options.{}", f), v);
    }
    let m = sys::ACCEL_MLP_OPTIONS_INIT;
    for (f, v) in [
        ("layer_sizes", if m.layer_sizes.is_null() { "NULL".to_string() } else { "?".into() }),
        ("num_layer_sizes", m.num_layer_sizes.to_string()),
        ("activation", m.activation.to_string()),
        ("dropout", m.dropout.to_string()),
        ("bias", m.bias.to_string()),
    ] {
        check(format!("accel_mlp_options.{}", f), v);
    }
    let g = sys::ACCEL_SGD_OPTIONS_INIT;
    for (f, v) in [
        ("lr", g.lr),
        ("momentum", g.momentum),
        ("dampening", g.dampening),
        ("weight_decay", g.weight_decay),
        ("nesterov", g.nesterov as f64),
    ] {
        check(format!("accel_sgd_options.{}", f), v.to_string());
    }
    let a = sys::ACCEL_ADAMW_OPTIONS_INIT;
    for (f, v) in [("lr", a.lr), ("beta1", a.beta1), ("beta2", a.beta2), ("eps", a.eps), ("weight_decay", a.weight_decay)] {
        check(format!("accel_adamw_options.{}", f), v.to_string());
    }
    let l = sys::ACCEL_LAMB_OPTIONS_INIT;
    for (f, v) in [("lr", l.lr), ("beta1", l.beta1), ("beta2", l.beta2), ("eps", l.eps), ("weight_decay", l.weight_decay)] {
        check(format!("accel_lamb_options.{}", f), v.to_string());
    }
    let sc = sys::ACCEL_SCHEDULER_OPTIONS_INIT;
    for (f, v) in [
        ("kind", sc.kind as f64),
        ("warmup_steps", sc.warmup_steps as f64),
        ("total_steps", sc.total_steps as f64),
        ("min_lr_ratio", sc.min_lr_ratio),
    ] {
        check(format!("accel_scheduler_options.{}", f), v.to_string());
    }
    let d = sys::ACCEL_DATALOADER_OPTIONS_INIT;
    for (f, v) in [
        ("batch_size", d.batch_size as f64),
        ("shuffle", d.shuffle as f64),
        ("seed", d.seed as f64),
        ("drop_last", d.drop_last as f64),
        ("even_batches", d.even_batches as f64),
        ("split_batches", d.split_batches as f64),
        ("iterable", d.iterable as f64),
    ] {
        check(format!("accel_dataloader_options.{}", f), v.to_string());
    }
    let si = sys::ACCEL_SIM_OPTIONS_INIT;
    for (f, v) in [
        ("world_size", si.world_size.to_string()),
        ("device_memory", s(si.device_memory)),
        ("topology", s(si.topology)),
        ("timeout_seconds", si.timeout_seconds.to_string()),
        ("faults", s(si.faults)),
        ("trace_path", s(si.trace_path)),
        ("engine_threads", si.engine_threads.to_string()),
        ("host_memory", s(si.host_memory)),
    ] {
        check(format!("accel_sim_options.{}", f), v);
    }
    let p = sys::ACCEL_PROJECT_OPTIONS_INIT;
    check("accel_project_options.project_dir".into(), s(p.project_dir));
    check("accel_project_options.total_limit".into(), p.total_limit.to_string());
    let l = sys::ACCEL_LM_OPTIONS_INIT;
    check("accel_lm_options.dtype".into(), l.dtype.to_string());
    check("accel_lm_options.gradient_checkpointing".into(), l.gradient_checkpointing.to_string());
    check("accel_lm_options.quantization".into(), l.quantization.to_string());
    check("accel_lm_options.double_quant".into(), l.double_quant.to_string());
    let af = sys::ACCEL_ADAFACTOR_OPTIONS_INIT;
    for (f, v) in [
        ("lr", af.lr.to_string()),
        ("eps1", format!("{:e}", af.eps1)),
        ("eps2", af.eps2.to_string()),
        ("clip_threshold", af.clip_threshold.to_string()),
        ("decay_rate", af.decay_rate.to_string()),
        ("beta1", af.beta1.to_string()),
        ("weight_decay", af.weight_decay.to_string()),
        ("scale_parameter", af.scale_parameter.to_string()),
        ("relative_step", af.relative_step.to_string()),
        ("warmup_init", af.warmup_init.to_string()),
    ] {
        check(format!("accel_adafactor_options.{}", f), v);
    }
    let ge = sys::ACCEL_GENERATE_OPTIONS_INIT;
    for (f, v) in [
        ("max_new_tokens", ge.max_new_tokens.to_string()),
        ("temperature", ge.temperature.to_string()),
        ("top_k", ge.top_k.to_string()),
        ("eos_token_id", ge.eos_token_id.to_string()),
        ("seed", ge.seed.to_string()),
        ("use_cache", ge.use_cache.to_string()),
    ] {
        check(format!("accel_generate_options.{}", f), v);
    }
    let lo = sys::ACCEL_LORA_OPTIONS_INIT;
    check("accel_lora_options.r".into(), lo.r.to_string());
    check("accel_lora_options.alpha".into(), lo.alpha.to_string());
    check("accel_lora_options.dropout".into(), lo.dropout.to_string());
    check("accel_lora_options.target_modules".into(), s(lo.target_modules));
    check("accel_lora_options.use_rslora".into(), lo.use_rslora.to_string());
    let ld = sys::ACCEL_LM_DATA_OPTIONS_INIT;
    for (f, v) in [
        ("block_size", ld.block_size),
        ("max_length", ld.max_length),
        ("pad_id", ld.pad_id),
        ("pad_to_multiple_of", ld.pad_to_multiple_of),
        ("group_by_length", ld.group_by_length as i64),
        ("padding_side", ld.padding_side as i64),
    ] {
        check(format!("accel_lm_data_options.{}", f), v.to_string());
    }
    let me = sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
    for (f, v) in [
        ("mixed_precision", me.mixed_precision.to_string()),
        ("weights_dtype", me.weights_dtype.to_string()),
        ("optimizer", me.optimizer.to_string()),
        ("strategy", me.strategy.to_string()),
        ("world_size", me.world_size.to_string()),
        ("micro_batch", me.micro_batch.to_string()),
        ("seq_len", me.seq_len.to_string()),
        ("gradient_checkpointing", me.gradient_checkpointing.to_string()),
        ("lora_rank", me.lora_rank.to_string()),
        ("lora_target_modules", s(me.lora_target_modules)),
        ("attention", me.attention.to_string()),
        ("offload", me.offload.to_string()),
        ("quantization", me.quantization.to_string()),
        ("double_quant", me.double_quant.to_string()),
    ] {
        check(format!("accel_memory_estimate_options.{}", f), v);
    }
    let tr = sys::ACCEL_TRACKER_OPTIONS_INIT;
    check("accel_tracker_options.log_dir".into(), s(tr.log_dir));
    check("accel_tracker_options.writers".into(), tr.writers.to_string());
    check("accel_tracker_options.all_processes".into(), tr.all_processes.to_string());
    let inf = sys::ACCEL_INFERENCE_OPTIONS_INIT;
    check("accel_inference_options.num_threads".into(), inf.num_threads.to_string());
    let en = sys::ACCEL_ENCODE_OPTIONS_INIT;
    for (f, v) in [
        ("add_special_tokens", en.add_special_tokens as i64),
        ("replace_invalid_utf8", en.replace_invalid_utf8 as i64),
        ("max_length", en.max_length),
        ("truncation_side", en.truncation_side as i64),
        ("padding_side", en.padding_side as i64),
        ("pad_to_max_length", en.pad_to_max_length as i64),
        ("pad_to_multiple_of", en.pad_to_multiple_of),
        ("pad_id", en.pad_id),
    ] {
        check(format!("accel_encode_options.{}", f), v.to_string());
    }
    let sf = sys::ACCEL_SFT_OPTIONS_INIT;
    for (f, v) in [
        ("chat_format", sf.chat_format as i64),
        ("completion_only_loss", sf.completion_only_loss as i64),
        ("add_eos", sf.add_eos as i64),
        ("max_length", sf.max_length),
        ("packing", sf.packing as i64),
        ("padding_side", sf.padding_side as i64),
        ("pad_to_multiple_of", sf.pad_to_multiple_of),
        ("pad_id", sf.pad_id),
    ] {
        check(format!("accel_sft_options.{}", f), v.to_string());
    }

    let missing: Vec<_> = t.defaults.keys().filter(|k| !seen.contains(*k)).collect();
    assert!(missing.is_empty(), "defaults of the header not checked: {:?}", missing);
}

/// The library's accel_*_options_init writes exactly the INIT values the mirror has, and
/// the safe layer's Default converts to them.
#[test]
fn options_init_functions_agree_with_the_mirror() {
    unsafe {
        let mut o: sys::accel_options = std::mem::zeroed();
        assert_eq!(sys::accel_options_init(&mut o, sys::ACCEL_OPTIONS_VERSION), sys::ACCEL_OK);
        assert_eq!(o, sys::ACCEL_OPTIONS_INIT);
        let mut m: sys::accel_mlp_options = std::mem::zeroed();
        assert_eq!(sys::accel_mlp_options_init(&mut m, 1), sys::ACCEL_OK);
        assert_eq!(m, sys::ACCEL_MLP_OPTIONS_INIT);
        // version 4 added offload: version 3's init writes the bytes before it only
        let mut o3: sys::accel_options = std::mem::zeroed();
        o3.offload = 7;
        assert_eq!(sys::accel_options_init(&mut o3, 3), sys::ACCEL_OK);
        assert_eq!(o3, sys::accel_options { version: 3, offload: 7, ..sys::ACCEL_OPTIONS_INIT });
        assert_eq!(sys::accel_options_init(&mut o3, 4), sys::ACCEL_OK);
        assert_eq!(o3, sys::ACCEL_OPTIONS_INIT);
        assert_eq!(sys::accel_options_init(&mut o3, 5), sys::ACCEL_ERR_INVALID_ARGUMENT);
        // version 2 added host_memory: version 1's init writes the bytes before it only
        let budget = b"7GiB\0".as_ptr() as *const std::os::raw::c_char;
        let mut s: sys::accel_sim_options = std::mem::zeroed();
        s.host_memory = budget;
        assert_eq!(sys::accel_sim_options_init(&mut s, 1), sys::ACCEL_OK);
        assert_eq!(std::ffi::CStr::from_ptr(s.topology).to_str().unwrap(), "8xH100");
        s.topology = sys::ACCEL_SIM_OPTIONS_INIT.topology;
        assert_eq!(s, sys::accel_sim_options { version: 1, host_memory: budget, ..sys::ACCEL_SIM_OPTIONS_INIT });
        assert_eq!(sys::accel_sim_options_init(&mut s, 2), sys::ACCEL_OK);
        s.topology = sys::ACCEL_SIM_OPTIONS_INIT.topology;
        assert_eq!(s, sys::ACCEL_SIM_OPTIONS_INIT);
        assert_eq!(sys::accel_sim_options_init(&mut s, 3), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut d: sys::accel_dataloader_options = std::mem::zeroed();
        assert_eq!(sys::accel_dataloader_options_init(&mut d, 3), sys::ACCEL_OK);
        assert_eq!(d, sys::ACCEL_DATALOADER_OPTIONS_INIT);
        // version 2 added quantization and double_quant: version 1's init writes the bytes before them only
        let mut l: sys::accel_lm_options = std::mem::zeroed();
        l.quantization = 7;
        l.double_quant = 7;
        assert_eq!(sys::accel_lm_options_init(&mut l, 1), sys::ACCEL_OK);
        assert_eq!(l, sys::accel_lm_options { version: 1, quantization: 7, double_quant: 7, ..sys::ACCEL_LM_OPTIONS_INIT });
        assert_eq!(sys::accel_lm_options_init(&mut l, 2), sys::ACCEL_OK);
        assert_eq!(l, sys::ACCEL_LM_OPTIONS_INIT);
        assert_eq!(sys::accel_lm_options_init(&mut l, 3), sys::ACCEL_ERR_INVALID_ARGUMENT);
        // version 2 added padding_side: version 1's init writes the bytes before it only
        let mut ld: sys::accel_lm_data_options = std::mem::zeroed();
        ld.padding_side = 7;
        assert_eq!(sys::accel_lm_data_options_init(&mut ld, 1), sys::ACCEL_OK);
        assert_eq!(ld, sys::accel_lm_data_options { version: 1, padding_side: 7, ..sys::ACCEL_LM_DATA_OPTIONS_INIT });
        assert_eq!(sys::accel_lm_data_options_init(&mut ld, 2), sys::ACCEL_OK);
        assert_eq!(ld, sys::ACCEL_LM_DATA_OPTIONS_INIT);
        assert_eq!(sys::accel_lm_data_options_init(&mut ld, 3), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut lr: sys::accel_lora_options = std::mem::zeroed();
        assert_eq!(sys::accel_lora_options_init(&mut lr, 1), sys::ACCEL_OK);
        assert_eq!(lr, sys::ACCEL_LORA_OPTIONS_INIT);
        let mut af: sys::accel_adafactor_options = std::mem::zeroed();
        assert_eq!(sys::accel_adafactor_options_init(&mut af, 1), sys::ACCEL_OK);
        assert_eq!(af, sys::ACCEL_ADAFACTOR_OPTIONS_INIT);
        let mut ge: sys::accel_generate_options = std::mem::zeroed();
        assert_eq!(sys::accel_generate_options_init(&mut ge, 1), sys::ACCEL_OK);
        assert_eq!(ge, sys::ACCEL_GENERATE_OPTIONS_INIT);
        // version 2 added offload, quantization and double_quant: version 1's init writes the bytes before them only
        let mut me: sys::accel_memory_estimate_options = std::mem::zeroed();
        me.offload = 7;
        me.quantization = 7;
        me.double_quant = 7;
        assert_eq!(sys::accel_memory_estimate_options_init(&mut me, 1), sys::ACCEL_OK);
        assert_eq!(
            me,
            sys::accel_memory_estimate_options {
                version: 1,
                offload: 7,
                quantization: 7,
                double_quant: 7,
                ..sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT
            }
        );
        assert_eq!(sys::accel_memory_estimate_options_init(&mut me, 2), sys::ACCEL_OK);
        assert_eq!(me, sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT);
        assert_eq!(sys::accel_memory_estimate_options_init(&mut me, 3), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut tr: sys::accel_tracker_options = std::mem::zeroed();
        tr.log_dir = b"x\0".as_ptr() as *const std::os::raw::c_char; // overwritten with NULL
        tr.writers = 7;
        assert_eq!(sys::accel_tracker_options_init(&mut tr, 1), sys::ACCEL_OK);
        assert_eq!(tr, sys::ACCEL_TRACKER_OPTIONS_INIT);
        assert_eq!(sys::accel_tracker_options_init(&mut tr, 99), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut inf: sys::accel_inference_options = std::mem::zeroed();
        assert_eq!(sys::accel_inference_options_init(&mut inf, 1), sys::ACCEL_OK);
        assert_eq!(inf, sys::ACCEL_INFERENCE_OPTIONS_INIT);
        assert_eq!(sys::accel_inference_options_init(&mut inf, 2), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut en: sys::accel_encode_options = std::mem::zeroed();
        assert_eq!(sys::accel_encode_options_init(&mut en, 1), sys::ACCEL_OK);
        assert_eq!(en, sys::ACCEL_ENCODE_OPTIONS_INIT);
        assert_eq!(sys::accel_encode_options_init(&mut en, 2), sys::ACCEL_ERR_INVALID_ARGUMENT);
        let mut sf: sys::accel_sft_options = std::mem::zeroed();
        assert_eq!(sys::accel_sft_options_init(&mut sf, 1), sys::ACCEL_OK);
        assert_eq!(sf, sys::ACCEL_SFT_OPTIONS_INIT);
        assert_eq!(sys::accel_sft_options_init(&mut sf, 2), sys::ACCEL_ERR_INVALID_ARGUMENT);
        // an unknown version is refused
        assert_eq!(sys::accel_options_init(&mut o, 99), sys::ACCEL_ERR_INVALID_ARGUMENT);
    }
    assert_eq!(accel::Options::default().to_sys().unwrap(), sys::ACCEL_OPTIONS_INIT);
    assert_eq!(accel::SgdOptions::default().to_sys().unwrap(), sys::ACCEL_SGD_OPTIONS_INIT);
    assert_eq!(accel::AdamWOptions::default().to_sys().unwrap(), sys::ACCEL_ADAMW_OPTIONS_INIT);
    assert_eq!(accel::LambOptions::default().to_sys().unwrap(), sys::ACCEL_LAMB_OPTIONS_INIT);
    assert_eq!(accel::SchedulerOptions::default().to_sys().unwrap(), sys::ACCEL_SCHEDULER_OPTIONS_INIT);
    assert_eq!(accel::DataLoaderOptions::default().to_sys().unwrap(), sys::ACCEL_DATALOADER_OPTIONS_INIT);
    assert_eq!(accel::MlpOptions::default().to_sys().unwrap(), sys::ACCEL_MLP_OPTIONS_INIT);
    assert_eq!(accel::LmOptions::default().to_sys().unwrap(), sys::ACCEL_LM_OPTIONS_INIT);
    assert_eq!(accel::LmDataOptions::default().to_sys().unwrap(), sys::ACCEL_LM_DATA_OPTIONS_INIT);
    assert_eq!(accel::AdafactorOptions::default().to_sys().unwrap(), sys::ACCEL_ADAFACTOR_OPTIONS_INIT);
    assert_eq!(accel::GenerateOptions::default().to_sys().unwrap(), sys::ACCEL_GENERATE_OPTIONS_INIT);
    let (mem, names) = accel::MemoryEstimateOptions::default().to_sys().unwrap();
    assert!(mem == sys::ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT && names.is_none());
    let (lora, names) = accel::LoraOptions::default().to_sys().unwrap();
    assert!(lora == sys::ACCEL_LORA_OPTIONS_INIT && names.is_none());
    let (tracker, dir) = accel::TrackerOptions::default().to_sys().unwrap();
    assert!(tracker == sys::ACCEL_TRACKER_OPTIONS_INIT && dir.is_none());
    assert_eq!(accel::InferenceOptions::default().to_sys().unwrap(), sys::ACCEL_INFERENCE_OPTIONS_INIT);
    assert_eq!(accel::EncodeOptions::default().to_sys().unwrap(), sys::ACCEL_ENCODE_OPTIONS_INIT);
    assert_eq!(accel::SftOptions::default().to_sys().unwrap(), sys::ACCEL_SFT_OPTIONS_INIT);
    // every setter reaches its raw field
    let sft = accel::SftOptions::default()
        .with_chat_format(accel::ChatFormat::Mistral)
        .with_completion_only_loss(false)
        .with_add_eos(false)
        .with_max_length(64)
        .with_packing(true)
        .with_padding_side(accel::Side::Left)
        .with_pad_to_multiple_of(8)
        .with_pad_id(Some(3))
        .to_sys()
        .unwrap();
    assert_eq!(
        sft,
        sys::accel_sft_options {
            version: sys::ACCEL_SFT_OPTIONS_VERSION,
            chat_format: sys::ACCEL_CHAT_MISTRAL,
            completion_only_loss: 0,
            add_eos: 0,
            max_length: 64,
            packing: 1,
            padding_side: sys::ACCEL_SIDE_LEFT,
            pad_to_multiple_of: 8,
            pad_id: 3,
        }
    );
    let lm = accel::LmDataOptions::default().with_padding_side(accel::Side::Left).to_sys().unwrap();
    assert_eq!(lm, sys::accel_lm_data_options { padding_side: sys::ACCEL_SIDE_LEFT, ..sys::ACCEL_LM_DATA_OPTIONS_INIT });
    let q = accel::LmOptions::default().with_quantization(accel::Quantization::Nf4).with_double_quant(true).to_sys().unwrap();
    assert_eq!(q, sys::accel_lm_options { quantization: sys::ACCEL_QUANT_NF4, double_quant: 1, ..sys::ACCEL_LM_OPTIONS_INIT });
    for v in [accel::Quantization::None, accel::Quantization::Nf4, accel::Quantization::Fp4, accel::Quantization::Int8] {
        assert_eq!(accel::Quantization::from_raw(v.to_raw()), Some(v));
    }
    assert_eq!(accel::Quantization::from_raw(sys::ACCEL_QUANT_INT8 + 1), None);
    assert_eq!(accel::Quantization::default().to_raw(), sys::ACCEL_LM_OPTIONS_INIT.quantization);
    let off = accel::Options::default().with_offload(accel::Offload::Optimizer).to_sys().unwrap();
    assert_eq!(off, sys::accel_options { offload: sys::ACCEL_OFFLOAD_OPTIMIZER, ..sys::ACCEL_OPTIONS_INIT });
    for v in [accel::Offload::None, accel::Offload::Optimizer, accel::Offload::Parameters] {
        assert_eq!(accel::Offload::from_raw(v.to_raw()), Some(v));
    }
    assert_eq!(accel::Offload::from_raw(sys::ACCEL_OFFLOAD_PARAMETERS + 1), None);
    assert_eq!(accel::Offload::default().to_raw(), sys::ACCEL_OPTIONS_INIT.offload);
    // the Rust enums cover the C enumerators, both ways
    for f in [
        accel::ChatFormat::Auto,
        accel::ChatFormat::ChatMl,
        accel::ChatFormat::Llama3,
        accel::ChatFormat::Gemma,
        accel::ChatFormat::Phi3,
        accel::ChatFormat::Mistral,
    ] {
        assert_eq!(accel::ChatFormat::from_raw(f.to_raw()), Some(f));
    }
    assert_eq!(accel::ChatFormat::from_raw(sys::ACCEL_CHAT_MISTRAL + 1), None);
    assert_eq!(accel::ChatFormat::default().to_raw(), sys::ACCEL_SFT_OPTIONS_INIT.chat_format);
    let sim = accel::SimOptions::default().to_sys().unwrap();
    let init = sys::ACCEL_SIM_OPTIONS_INIT;
    assert_eq!((sim.raw.world_size, sim.raw.timeout_seconds, sim.raw.engine_threads), (2, 60.0, 0));
    assert!(sim.raw.device_memory.is_null() && sim.raw.faults.is_null() && sim.raw.trace_path.is_null());
    assert!(sim.raw.host_memory.is_null());
    assert_eq!(unsafe { std::ffi::CStr::from_ptr(sim.raw.topology) }, unsafe { std::ffi::CStr::from_ptr(init.topology) });
    let sim = accel::SimOptions::default().with_host_memory(Some("2GiB")).to_sys().unwrap();
    assert_eq!(unsafe { std::ffi::CStr::from_ptr(sim.raw.host_memory) }.to_str().unwrap(), "2GiB");
    assert_eq!(sim.raw.version, sys::ACCEL_SIM_OPTIONS_VERSION);
}

/// Every `pub fn accel_*` of the accel-sys crate (accel-sys/src/lib.rs and its modules) is a function of the header and
/// vice versa, with the same number of parameters.
#[test]
fn functions_match_the_header() {
    let t = table();
    let src = rs_files_text(concat!(env!("CARGO_MANIFEST_DIR"), "/accel-sys/src"));
    let mut mirrored = BTreeMap::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("pub fn accel_") {
        let after = &rest[i + "pub fn ".len()..];
        let name_end = after.find('(').unwrap();
        let name = after[..name_end].to_string();
        let close = after.find(')').unwrap();
        let params = &after[name_end + 1..close];
        let n = params.split(',').filter(|p| p.contains(':')).count();
        mirrored.insert(name, n);
        rest = &after[close..];
    }
    for (name, n) in &mirrored {
        let sig = t.functions.get(name).unwrap_or_else(|| panic!("sys::{} is not a function of the header", name));
        let args = &sig[sig.find('(').unwrap() + 1..sig.rfind(')').unwrap()];
        let cn = if args.trim() == "void" { 0 } else { args.matches(',').count() + 1 };
        // the rank_fn typedef argument of accel_sim_run has no commas of its own in the probe
        assert_eq!(*n, cn, "parameters of {}: Rust {} vs C {}", name, n, sig);
    }
    let missing: Vec<_> = t.functions.keys().filter(|f| !mirrored.contains_key(*f)).collect();
    assert!(missing.is_empty(), "functions of the header missing from accel-sys: {:?}", missing);
    assert_eq!(mirrored.len(), 129);
}

/// Every function of the header is called from the safe layer (`sys::accel_NAME(` in a
/// file of src/; the raw declarations are in the accel-sys crate), as the integrator's coverage
/// checker requires.
#[test]
fn safe_layer_calls_every_function() {
    let t = table();
    let text = rs_files_text(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let uncalled: Vec<_> = t.functions.keys().filter(|f| !text.contains(&format!("sys::{}(", f))).collect();
    assert!(uncalled.is_empty(), "functions the safe layer never calls: {:?}", uncalled);
}

/// The text of every `.rs` file under `dir`, its subdirectories (a module's submodules)
/// included, other than a file named `sys.rs`, in a fixed order.
fn rs_files_text(dir: &str) -> String {
    fn walk(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, files);
            } else if p.extension().map_or(false, |x| x == "rs") && p.file_name().unwrap() != "sys.rs" {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(std::path::Path::new(dir), &mut files);
    files.sort();
    files.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect::<Vec<_>>().join("\n")
}
