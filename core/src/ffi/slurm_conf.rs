//! The values of slurm.conf the plugins depend on (`EnergyAttribution=shared`'s, how many
//! energy plugins are stacked, what `PrivateData` hides), from the daemon's `slurm_conf`
//! (looked up at run time, as every symbol not exported alike by all releases).

use core::ffi::c_char;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

use slurm_sys::slurm_conf_t;

use slurm_energy_logic::GresOrder;
use slurm_energy_logic::PrivateData;
use slurm_energy_logic::{Site, cgroup_mountpoint, spool_for_node};

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string of slurm_conf, which lives as long as the daemon.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// libslurmfull's `slurm_conf`, which the daemon filled from slurm.conf before it loaded
/// the energy plugins.
fn slurm_conf() -> Option<&'static slurm_conf_t> {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the daemon's symbols.
    let conf =
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"slurm_conf".as_ptr()) }.cast::<slurm_conf_t>();
    // SAFETY: libslurmfull's slurm_conf, of the layout of the headers built against (the
    // running release's: plugin_version makes Slurm refuse any other), alive until exit.
    unsafe { conf.as_ref() }
}

/// How many plugins `AcctGatherEnergyType` stacks (Slurm sums their figures). Asked at
/// every step poll, so looked up once: changing the plugins takes a daemon restart.
pub fn energy_plugin_count() -> Option<usize> {
    static COUNT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        let names = text(slurm_conf()?.acct_gather_energy_type);
        Some(names.split(',').filter(|n| !n.trim().is_empty()).count())
    })
}

/// The plugins `AcctGatherEnergyType` names, as written there; looked up once.
pub fn energy_plugin_types() -> Vec<String> {
    static TYPES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TYPES
        .get_or_init(|| {
            slurm_conf()
                .map(|conf| {
                    text(conf.acct_gather_energy_type)
                        .split(',')
                        .map(|n| n.trim().to_string())
                        .filter(|n| !n.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        })
        .clone()
}

/// slurm.h's `PRIVATE_DATA_*` bits for jobs, accounting usage and users: function-like
/// macros (`SLURM_BIT(n)`) bindgen cannot expand, the same bits from 22.05 to 26.11.
const PRIVATE_DATA_JOBS: u16 = 1 << 0;
const PRIVATE_DATA_USAGE: u16 = 1 << 3;
const PRIVATE_DATA_USERS: u16 = 1 << 4;

/// What slurm.conf's `PrivateData` hides (`all` sets every bit); nothing where this Slurm
/// exports no `slurm_conf`.
pub fn private_data() -> PrivateData {
    let bits = slurm_conf().map_or(0, |conf| conf.private_data);
    PrivateData {
        jobs: bits & PRIVATE_DATA_JOBS != 0,
        usage: bits & PRIVATE_DATA_USAGE != 0,
        users: bits & PRIVATE_DATA_USERS != 0,
    }
}

/// SlurmUser's uid (slurmd and slurmstepd trust its directories as root's).
pub fn slurm_user() -> Option<u32> {
    slurm_conf().map(|conf| conf.slurm_user_id)
}

/// This node's name: its hostname (as slurmd's `-N` in the test cluster, and `%n` where
/// NodeName is the hostname).
pub(super) fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// SlurmdSpoolDir, expanded for this node.
pub fn spool_dir() -> Result<PathBuf, String> {
    let conf = slurm_conf().ok_or("this Slurm exports no slurm_conf")?;
    Ok(spool_for_node(&text(conf.slurmd_spooldir), &node_name()))
}

/// This node's site. The cgroup mount is cgroup.conf's CgroupMountpoint: Slurm reads
/// cgroup.conf beside slurm.conf (in configless mode, both are in slurmd's cache, where
/// `slurm_conf.slurm_conf` points), and without it uses the default.
pub fn attribution_site() -> Result<Site, String> {
    let conf = slurm_conf().ok_or("this Slurm exports no slurm_conf")?;
    let slurm_conf = text(conf.slurm_conf);
    let cgroup_conf = Path::new(&slurm_conf)
        .parent()
        .map(|dir| dir.join("cgroup.conf"))
        .and_then(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default();
    Site::from_conf(
        spool_dir()?,
        &text(conf.proctrack_type),
        &text(conf.task_plugin),
        &cgroup_mountpoint(&cgroup_conf),
    )
}

/// How slurmd numbers this node's GPUs: from gres.conf beside slurm.conf (in configless
/// mode both are in slurmd's cache, where `slurm_conf.slurm_conf` points).
pub fn gres_order() -> Result<GresOrder, String> {
    let conf = slurm_conf().ok_or("this Slurm exports no slurm_conf")?;
    let path = Path::new(&text(conf.slurm_conf))
        .parent()
        .map(|dir| dir.join("gres.conf"))
        .ok_or("slurm.conf has no directory")?;
    let gres = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    GresOrder::parse(&gres, &node_name()).map_err(|e| format!("{}: {e}", path.display()))
}
