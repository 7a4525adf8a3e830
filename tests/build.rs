//! The driver is a Slurm client program: unlike the plugins it links libslurmfull, from
//! `SLURM_LIB_DIR`, else `SLURM_PREFIX/lib/slurm` (a Slurm built with `--prefix`), else
//! Debian's directory.
fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_LIB_DIR");
    println!("cargo::rerun-if-env-changed=SLURM_PREFIX");
    let nonempty = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let dir = nonempty("SLURM_LIB_DIR")
        .or_else(|| nonempty("SLURM_PREFIX").map(|p| format!("{p}/lib/slurm")))
        .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/slurm-wlm".into());
    println!("cargo::rustc-link-search=native={dir}");
    println!("cargo::rustc-link-arg-bin=energy-driver=-lslurmfull");
    println!("cargo::rustc-link-arg-bin=energy-driver=-Wl,-rpath,{dir}");
}
