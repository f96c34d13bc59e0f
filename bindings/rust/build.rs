//! Finds libaccel: $ACCEL_LIB_DIR, else `pkg-config --libs-only-L accel`, else the linker's
//! default search path. For a directory it finds it adds both a link search path and an
//! rpath, so tests and examples run without LD_LIBRARY_PATH.
use std::env;
use std::path::Path;
use std::process::Command;

fn add_dir(dir: &str) {
    println!("cargo:rustc-link-search=native={}", dir);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
}

fn pkg_config_dirs() -> Option<Vec<String>> {
    let out = Command::new("pkg-config").args(["--libs-only-L", "accel"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix("-L"))
            .map(|s| s.to_string())
            .collect(),
    )
}

fn main() {
    println!("cargo:rerun-if-env-changed=ACCEL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=build.rs");
    let mut found = false;
    if let Ok(dir) = env::var("ACCEL_LIB_DIR") {
        if !dir.is_empty() {
            if !Path::new(&dir).join("libaccel.so").exists() && !Path::new(&dir).join("libaccel.dylib").exists() {
                println!("cargo:warning=ACCEL_LIB_DIR={} holds no libaccel.so; the link will likely fail", dir);
            }
            add_dir(&dir);
            found = true;
        }
    }
    if !found {
        if let Some(dirs) = pkg_config_dirs() {
            for d in &dirs {
                add_dir(d);
            }
            found = true; // pkg-config knows accel (its -L may be empty: a system directory)
        }
    }
    if !found {
        let system = ["/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"]
            .iter()
            .any(|d| Path::new(d).join("libaccel.so").exists());
        if !system {
            println!(
                "cargo:warning=libaccel was not found: set ACCEL_LIB_DIR to the directory holding \
                 libaccel.so (e.g. ACCEL_LIB_DIR=/path/to/build or /path/to/prefix/lib), or make \
                 `pkg-config --libs-only-L accel` find it (PKG_CONFIG_PATH); trying the linker's default search path"
            );
        }
    }
    println!("cargo:rustc-link-lib=dylib=accel");
}
