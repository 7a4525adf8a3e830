//! The driver is a Slurm client program: unlike the plugins it links libslurmfull, from
//! `SLURM_LIB_DIR`, else `SLURM_PREFIX/lib/slurm` (a Slurm built with `--prefix`), else
//! Debian's directory for the architecture built for (`/usr/lib/<multiarch>/slurm-wlm`).
//! The tests get that directory as `ENERGY_TESTS_SLURM_LIB_DIR`, and Debian's as
//! `ENERGY_TESTS_DEBIAN_SLURM_DIR` (its plugins are there too).
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_LIB_DIR");
    println!("cargo::rerun-if-env-changed=SLURM_PREFIX");
    let nonempty = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let debian = format!("/usr/lib/{}/slurm-wlm", multiarch());
    let dir = nonempty("SLURM_LIB_DIR")
        .or_else(|| nonempty("SLURM_PREFIX").map(|p| format!("{p}/lib/slurm")))
        .unwrap_or_else(|| debian.clone());
    println!("cargo::rustc-link-search=native={dir}");
    println!("cargo::rustc-link-arg-bin=energy-driver=-lslurmfull");
    println!("cargo::rustc-link-arg-bin=energy-driver=-Wl,-rpath,{dir}");
    println!("cargo::rustc-env=ENERGY_TESTS_SLURM_LIB_DIR={dir}");
    println!("cargo::rustc-env=ENERGY_TESTS_DEBIAN_SLURM_DIR={debian}");
}

/// Debian's multiarch tuple of the target (`x86_64-linux-gnu`, `aarch64-linux-gnu`, ...):
/// what dpkg says for the host, else what the C compiler says, else `<arch>-linux-gnu`,
/// which it is for the 64-bit Debian ports.
fn multiarch() -> String {
    let ask = |program: &str, args: &[&str]| {
        let out = Command::new(program).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    let asked = if native {
        ask("dpkg-architecture", &["-qDEB_HOST_MULTIARCH"])
            .or_else(|| ask("gcc", &["-print-multiarch"]))
    } else {
        None
    };
    asked.unwrap_or_else(|| {
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
        format!("{arch}-linux-gnu")
    })
}
