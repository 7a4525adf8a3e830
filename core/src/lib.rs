//! The Slurm glue of the Rust `acct_gather_energy` plugins.
//!
//! Layers: [`ffi`] is the only place that touches Slurm (raw pointers, `unsafe`, calls
//! into libslurmfull); [`energy_plugin!`] exports every symbol Slurm's loader looks up and
//! turns Slurm's calls into calls on the safe [`Runtime`](slurm_energy_logic::Runtime), which
//! opens the [`Plugin`](slurm_energy_logic::Plugin)'s source and keeps a meter polling it.
//! Everything but [`ffi`] is the crate `slurm-energy-logic`, whose plugins' descriptors
//! are re-exported here (`slurm_energy::Rapl`, ...): plain Rust over files, which builds and
//! unit-tests without Slurm or the hardware, and forbids `unsafe`.
//!
//! `unsafe` is denied in this crate but in [`ffi`] (the only exception: a unit test fails
//! on any other), so that the unsafe part stays small enough to review line by line. The
//! logic's C libraries that need `unsafe` calls run in the sampler crate (Variorum, which
//! may crash or exit) or, where made to be called in-process, in the crate
//! `slurm-energy-gpu-libs` (NVML and amd-smi), the one other place allowed `unsafe`.
#![deny(unsafe_code)]

// The one exception: raw pointers from Slurm and calls into libslurmfull.
#[allow(unsafe_code)]
pub mod ffi;

// The plugins' descriptors, one per plugin crate (`slurm_energy::Rapl`, ...): those the
// family declares, each under the features its crate asks for.
pub use slurm_energy_logic::descriptors::*;

#[cfg(test)]
mod rules {
    use std::path::Path;

    fn sources(dir: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                found.push((path.display().to_string(), text));
            }
        }
    }

    /// The crates of the plugins' code and senergy's, from this one's directory: each with
    /// its root (lib.rs or main.rs), the lint level the root sets and the one `allow` it may
    /// have (the root's line, the next line).
    const CRATES: [(&str, &str, &str, Option<&str>); 5] = [
        ("../logic", "lib.rs", "#![forbid(unsafe_code)]", None),
        (
            "../logic/gpu-libs",
            "lib.rs",
            "#![deny(unsafe_code)]",
            Some("mod vendors;"),
        ),
        (".", "lib.rs", "#![deny(unsafe_code)]", Some("pub mod ffi;")),
        (
            "../senergy",
            "main.rs",
            "#![deny(unsafe_code)]",
            Some("mod ffi;"),
        ),
        (
            "../plugins/variorum-sampler",
            "main.rs",
            "#![deny(unsafe_code)]",
            Some("mod sys;"),
        ),
    ];

    /// `#![forbid(unsafe_code)]` fails the build on any `unsafe` in the logic, and
    /// `#![deny(unsafe_code)]` on `unsafe` outside `ffi` here and in senergy, outside the
    /// NVML and amd-smi calls of gpu-libs and outside the Variorum sampler's `sys`; this fails the tests on a lint level that is gone, or on
    /// a second `allow` (or an `expect`, or a crate-wide `allow`) that would open another
    /// door.
    #[test]
    fn unsafe_is_allowed_in_ffi_and_the_gpu_vendor_calls_only() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (dir, root, level, door) in CRATES {
            let mut files = Vec::new();
            sources(&here.join(dir).join("src"), &mut files);
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
            match door {
                None => assert!(doors.is_empty(), "{dir}: {doors:#?}"),
                Some(door) => {
                    assert_eq!(doors.len(), 1, "{dir}: {doors:#?}");
                    assert!(
                        doors[0].contains(&format!("src/{root}"))
                            && doors[0].ends_with(&format!("/ {door}")),
                        "{dir}: {doors:#?}"
                    );
                }
            }
            let root_file = files
                .iter()
                .find(|(path, _)| path.ends_with(&format!("src/{root}")))
                .expect("the crate's root");
            assert!(
                root_file.1.contains(&format!("\n{level}\n")),
                "{dir}: no {level}"
            );
        }
    }
}
