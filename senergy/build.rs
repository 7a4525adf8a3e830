//! senergy links libslurm (the public client library, as sacct's API users do); the
//! plugins never link it, so this lives in senergy's build only.
//!
//! Where: the `lib` beside the headers the bindings came from (`SLURM_PREFIX/lib`, or
//! `SLURM_INCLUDE_DIR/../lib`) when it holds libslurm.so, with an rpath to it so the
//! binary finds it without LD_LIBRARY_PATH; else the system's (Debian: libslurm-dev's
//! /usr/lib/x86_64-linux-gnu/libslurm.so).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_PREFIX");
    println!("cargo::rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let nonempty = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    let candidates = [
        nonempty("SLURM_PREFIX").map(|p| PathBuf::from(p).join("lib")),
        nonempty("SLURM_INCLUDE_DIR").map(|i| PathBuf::from(i).join("../lib")),
    ];
    if let Some(lib) = candidates
        .into_iter()
        .flatten()
        .find(|dir| dir.join("libslurm.so").exists())
    {
        println!("cargo::rustc-link-search=native={}", lib.display());
        println!("cargo::rustc-link-arg-bins=-Wl,-rpath,{}", lib.display());
    }
    println!("cargo::rustc-link-lib=dylib=slurm");
}
