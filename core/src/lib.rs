//! The shared core of the Rust `acct_gather_energy` plugins.
//!
//! Layers: [`ffi`] is the only place that touches Slurm (raw pointers, `unsafe`); it turns
//! Slurm's calls into calls on the safe [`runtime`], which keeps a [`meter`] sampling the
//! plugin's [`source::Source`] into [`accounting`]. Sources (`rapl`, ...) are plain Rust
//! over files, testable without Slurm or the hardware. Every background thread is a
//! [`worker::Worker`].
//!
//! `unsafe` is denied everywhere but in [`ffi`] (the only exception: CI fails on any
//! other), so that the logic stays safe Rust and the unsafe part stays small enough to
//! review line by line. Hardware is reached through safe wrappers (nix's `pread`, ioctls
//! of ipmi-rs); C libraries that need `unsafe` calls run in the sampler crate (Variorum,
//! which may crash or exit) or, where made to be called in-process, in `ffi` (NVML and
//! amd-smi, `ffi::gpu`).
#![deny(unsafe_code)]

pub mod accounting;
pub mod attribution;
pub mod config;
pub mod counter;
// The one exception: raw pointers from Slurm and calls into libslurmfull.
#[allow(unsafe_code)]
pub mod ffi;
#[cfg(feature = "gpu")]
pub mod gpu;
mod guard;
#[cfg(feature = "ipmi")]
pub mod ipmi;
pub mod meter;
pub mod pm_counters;
pub mod power;
pub mod rapl;
#[cfg(feature = "redfish")]
pub mod redfish;
pub mod runtime;
pub mod source;
#[cfg(feature = "variorum")]
pub mod variorum;
pub mod worker;

#[cfg(test)]
mod rules {
    use std::path::Path;

    fn sources(dir: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("core/src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                found.push((path.display().to_string(), text));
            }
        }
    }

    /// `#![deny(unsafe_code)]` fails the build on `unsafe` outside `ffi`; this fails the
    /// tests on a second `allow` (or an `expect`, or a crate-wide `allow`) that would
    /// open another door.
    #[test]
    fn unsafe_is_allowed_in_ffi_only() {
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut doors = Vec::new();
        for (path, text) in &files {
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                let opens = ["allow", "expect", "warn"]
                    .iter()
                    .any(|level| code.contains(&format!("{level}(unsafe_code")));
                if opens {
                    let next = text.lines().nth(n + 1).unwrap_or_default().trim();
                    doors.push(format!("{path}:{}: {} / {next}", n + 1, line.trim()));
                }
            }
        }
        assert_eq!(doors.len(), 1, "{doors:#?}");
        assert!(
            doors[0].contains("src/lib.rs") && doors[0].ends_with("/ pub mod ffi;"),
            "{doors:#?}"
        );
        let lib = files
            .iter()
            .find(|(path, _)| path.ends_with("src/lib.rs"))
            .expect("lib.rs");
        assert!(lib.1.contains("\n#![deny(unsafe_code)]\n"));
    }
}
