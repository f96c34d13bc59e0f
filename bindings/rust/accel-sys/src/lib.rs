//! The raw C ABI of accel, mirrored BY HAND from `include/accel/accel.h` (version 0.1.0).
//!
//! Every type, struct, enum constant, function and `ACCEL_*_OPTIONS_INIT` default of the
//! header has its counterpart here, `#[repr(C)]`. C enums are `c_int` type aliases with one
//! `pub const` per enumerator (a C function may return a value this version does not know,
//! which a Rust `enum` could not hold). The `accel` crate's `tests/abi_layout.rs` checks every
//! struct's size, alignment and field offsets, every constant and default, and the function
//! list against the table printed by the C program `abi_layout_probe`, built from the real
//! header.
//!
//! Everything here is `unsafe` and follows the header's rules; the safe layer is the `accel`
//! crate, which re-exports this crate as `accel::sys`.
//!
//! Linking: `build.rs` finds `libaccel` (`$ACCEL_LIB_DIR`, else `pkg-config accel`, else the
//! linker's default path) and, as the `links = "accel"` package, exports the directory it
//! found to the build scripts of the packages that depend on this one directly, as
//! `DEP_ACCEL_LIB_DIR`, so that they can set an rpath (see the accel crate's README).
#![allow(non_camel_case_types)]

// The header's declarations, one module per section of `include/accel/accel.h` and in its
// order (every type, constant and function of a section together), all re-exported here:
// `accel_sys::NAME` as before. The functions are 129, each module's `extern "C"` block in the
// header's order. The library is linked by build.rs (cargo:rustc-link-lib=dylib=accel), for
// this crate and every crate that depends on it.
mod versions;
mod status;
mod tensor;
mod context;
mod models;
mod optimizers;
mod data;
mod training;
mod processes;
mod simulator;
mod checkpoints;
mod lm;
mod memory;
mod trackers;
mod realtime;
mod tokenizers;
mod finetuning;

pub use versions::*;
pub use status::*;
pub use tensor::*;
pub use context::*;
pub use models::*;
pub use optimizers::*;
pub use data::*;
pub use training::*;
pub use processes::*;
pub use simulator::*;
pub use checkpoints::*;
pub use lm::*;
pub use memory::*;
pub use trackers::*;
pub use realtime::*;
pub use tokenizers::*;
pub use finetuning::*;
