//! senergy links libslurm (the public client library, as sacct's API users do); the
//! plugins never link it, so this lives in senergy's build only.
//!
//! Where: `SLURM_PREFIX/lib` for a Slurm built with `--prefix` (and an rpath to it, so
//! the binary finds it without LD_LIBRARY_PATH), else the system's (Debian:
//! libslurm-dev's /usr/lib/x86_64-linux-gnu/libslurm.so).

use std::env;
use std::path::Path;

fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_PREFIX");
    if let Some(prefix) = env::var("SLURM_PREFIX").ok().filter(|p| !p.is_empty()) {
        let lib = Path::new(&prefix).join("lib");
        println!("cargo::rustc-link-search=native={}", lib.display());
        println!("cargo::rustc-link-arg-bins=-Wl,-rpath,{}", lib.display());
    }
    println!("cargo::rustc-link-lib=dylib=slurm");
}
