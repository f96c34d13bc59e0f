//! Finds libaccel and links it, for this crate and everything that depends on it:
//!
//! 1. `$ACCEL_LIB_DIR`, when set: a directory holding `libaccel.so` (a meson build directory
//!    or `PREFIX/lib`). An explicit choice, so it wins over what pkg-config knows.
//! 2. `pkg-config --libs-only-L accel` (the `pkg-config` program, or `$PKG_CONFIG`). An
//!    installed accel has `accel.pc`; a meson build directory has
//!    `meson-uninstalled/accel-uninstalled.pc`, which pkg-config prefers on its own when
//!    `PKG_CONFIG_PATH` names that directory.
//! 3. The linker's default search path.
//!
//! For the directory found (1 or 2) it prints `cargo:rustc-link-search`, an rpath for this
//! crate's own targets, and `cargo:lib_dir=DIR`: as the `links = "accel"` package, that line
//! reaches the build script of every package depending on this one directly as
//! `DEP_ACCEL_LIB_DIR` (an rpath printed here does not reach a dependent's binaries: cargo
//! applies `rustc-link-arg` to the package's own targets only).
use std::env;
use std::path::Path;
use std::process::Command;

fn has_lib(dir: &Path) -> bool {
    ["libaccel.so", "libaccel.dylib"].iter().any(|f| dir.join(f).exists())
}

fn pkg_config_dirs() -> Option<Vec<String>> {
    let program = env::var("PKG_CONFIG").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "pkg-config".to_string());
    let out = Command::new(program).args(["--libs-only-L", "accel"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.split_whitespace().filter_map(|w| w.strip_prefix("-L")).map(|s| s.to_string()).collect())
}

fn main() {
    for var in ["ACCEL_LIB_DIR", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");
    let mut dirs: Vec<String> = Vec::new();
    let mut found = false;
    if let Some(dir) = env::var("ACCEL_LIB_DIR").ok().filter(|d| !d.is_empty()) {
        if !has_lib(Path::new(&dir)) {
            println!("cargo:warning=ACCEL_LIB_DIR={} holds no libaccel.so; the link will likely fail", dir);
        }
        dirs.push(dir);
        found = true;
    } else if let Some(d) = pkg_config_dirs() {
        dirs = d; // may be empty: pkg-config knows accel in a system directory
        found = true;
    }
    if !found {
        let system = ["/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]
            .iter()
            .any(|d| has_lib(Path::new(d)));
        if !system {
            println!(
                "cargo:warning=libaccel was not found: set ACCEL_LIB_DIR to the directory holding \
                 libaccel.so (a meson build directory or PREFIX/lib), or PKG_CONFIG_PATH to where \
                 accel.pc is (BUILD/meson-uninstalled for a build directory); trying the linker's default search path"
            );
        }
    }
    for d in &dirs {
        println!("cargo:rustc-link-search=native={}", d);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d);
    }
    // The directory holding libaccel (the first one that does, else the first one named), for
    // dependents' build scripts: DEP_ACCEL_LIB_DIR. Not printed when the linker's default
    // path is used (the dynamic loader's default path is then the usual answer).
    if let Some(d) = dirs.iter().find(|d| has_lib(Path::new(d))).or_else(|| dirs.first()) {
        println!("cargo:lib_dir={}", d);
    }
    println!("cargo:rustc-link-lib=dylib=accel");
}
