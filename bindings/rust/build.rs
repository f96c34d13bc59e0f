//! libaccel is found and linked by the `accel-sys` crate's build script (see its `build.rs`).
//! A dependency's `cargo:rustc-link-arg` does not reach this package's tests and examples, so
//! this script, run after accel-sys's, reads the directory accel-sys found
//! (`DEP_ACCEL_LIB_DIR`, from its `links = "accel"` metadata) and sets the rpath of this
//! package's own test, example and bench binaries: they run without LD_LIBRARY_PATH.
//! It also passes the directory to the tests at compile time (`ACCEL_FOUND_LIB_DIR`), where
//! they look for the build's `tests/abi/abi_layout_probe` and `tests/digits_model.pt`.
//!
//! A program that depends on `accel` does the same in its own build.rs (see the README).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dir) = std::env::var("DEP_ACCEL_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
        println!("cargo:rustc-env=ACCEL_FOUND_LIB_DIR={}", dir);
    }
}
