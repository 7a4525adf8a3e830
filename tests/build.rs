//! The driver is a Slurm client program: unlike the plugins it links libslurmfull.
fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_LIB_DIR");
    let dir = std::env::var("SLURM_LIB_DIR")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/slurm-wlm".into());
    println!("cargo::rustc-link-search=native={dir}");
    println!("cargo::rustc-link-arg-bin=energy-driver=-lslurmfull");
    println!("cargo::rustc-link-arg-bin=energy-driver=-Wl,-rpath,{dir}");
}
