//! The metrics' keys in acct_gather.conf: where the file goes, its mode, its group and
//! whether it names owners, each value checked and a bad one named. What the mode and owners
//! are in effect where a key is left out is the file's business (`super::file`).

use std::path::{Path, PathBuf};

use crate::config::{ConfigError, KeyValues, config_keys, yes_no};

/// The keys every plugin of the family reads for its metrics.
pub const KEYS: &[&str] = MetricsConfig::KEYS;

config_keys! {
    /// Where the metrics go, if anywhere, and who may read them. An empty value is the key
    /// left out.
    #[derive(Debug, Clone, PartialEq)]
    pub struct MetricsConfig {
        /// Where slurmd writes the node's and its jobs' energy and power, in Prometheus's
        /// text format, for node_exporter's textfile collector: an absolute path ending in
        /// `.prom`, whose directory is reached through no symbolic link. `%n` in it is the
        /// node's name and `%h` its host's. Stacked plugins each write their own file,
        /// named after the plugin (`energy.rust_gpu.prom` for `energy.prom`). Not set: no
        /// file is written. See docs/prometheus.md.
        pub file: Option<PathBuf> = None, {
            FILE_KEY = "EnergyMetricsFile": parse(parse_file),
                show(|f| f.as_ref().map_or("(none)".to_string(), |f| f.display().to_string()));
        }
        /// The file's permission bits, in octal, set exactly (slurmd's umask does not
        /// apply); writable by root alone: `0664` or `0666` is refused, as the figures are
        /// billed. Not set: `0644`, every local user reads the file; where slurm.conf's
        /// `PrivateData` has `jobs`, `users` or `usage` (or `all`), `0600`, or `0640` with
        /// `EnergyMetricsFileGroup`. `scontrol show config` shows the mode in effect and
        /// whether `PrivateData` chose it.
        pub mode: Option<u32> = None, {
            MODE_KEY = "EnergyMetricsFileMode": parse(parse_mode),
                show(|m| m.map_or("(default)".to_string(), |m| format!("{m:04o}")));
        }
        /// The file's group, by name or number (a name is looked up on the node):
        /// node_exporter's, so that with mode `0640` node_exporter reads the file and other
        /// users do not. Not set: slurmd's group.
        pub group: Option<GroupName> = None, {
            GROUP_KEY = "EnergyMetricsFileGroup":
                parse(|_, v| if v.is_empty() { Ok(None) } else { parse_group(v).map(Some) }),
                show(|g| g.as_ref().map_or("(slurmd's)".to_string(), GroupName::to_string));
        }
        /// Whether the file says who runs each job (the `slurm_energy_job_info` series, the
        /// `user` label). `no` is for sites where Slurm hides users from each other and
        /// node_exporter serves everyone. Not set: `yes`, or `no` where slurm.conf's
        /// `PrivateData` has `jobs`, `users` or `usage` (or `all`). `scontrol show config`
        /// shows the value in effect and whether `PrivateData` chose it.
        pub owners: Option<bool> = None, {
            OWNERS_KEY = "EnergyMetricsOwners": parse(|k, v| match v.to_ascii_lowercase().as_str() {
                "yes" => Ok(Some(true)),
                "no" => Ok(Some(false)),
                "" => Ok(None),
                _ => Err(ConfigError::new(k, v, "expected yes or no")),
            }),
            show(|o| o.as_ref().map_or("(default)".to_string(), yes_no));
        }
    }
}

/// A group as acct_gather.conf names it: by number, or by name (looked up on the node that
/// writes the file: the controller, which shows the configuration, may not know it).
#[derive(Debug, Clone, PartialEq)]
pub enum GroupName {
    Id(u32),
    Name(String),
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(gid) => write!(f, "{gid}"),
            Self::Name(name) => f.write_str(name),
        }
    }
}

/// [`MODE_KEY`]'s value: octal permission bits, writable by the owner (root) only: the
/// figures are billed, and a file others could write between two updates could lie.
fn parse_mode(key: &'static str, v: &str) -> Result<Option<u32>, ConfigError> {
    if v.is_empty() {
        return Ok(None);
    }
    let bad = || {
        ConfigError::new(
            key,
            v,
            "expected octal permission bits writable by root only, such as 0644 or 0640",
        )
    };
    if v.len() > 4 || !v.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    u32::from_str_radix(v, 8)
        .ok()
        .filter(|m| m & !0o777 == 0 && m & 0o022 == 0)
        .map(Some)
        .ok_or_else(bad)
}

/// [`GROUP_KEY`]'s value: a number, or a name as `groupadd` allows one.
fn parse_group(v: &str) -> Result<GroupName, ConfigError> {
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse()
            .map(GroupName::Id)
            .map_err(|_| ConfigError::new(GROUP_KEY, v, "expected a group id below 2^32"));
    }
    let name = v.len() <= 32
        && !v.starts_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if name {
        Ok(GroupName::Name(v.to_string()))
    } else {
        Err(ConfigError::new(
            GROUP_KEY,
            v,
            "expected a group name or number",
        ))
    }
}

/// [`FILE_KEY`]'s value: an absolute path for node_exporter's textfile collector.
fn parse_file(key: &'static str, v: &str) -> Result<Option<PathBuf>, ConfigError> {
    if v.is_empty() {
        return Ok(None);
    }
    let path = Path::new(v);
    if !path.is_absolute() {
        return Err(ConfigError::new(key, v, "expected an absolute path"));
    }
    if path.extension().is_none_or(|e| e != "prom") || path.file_stem().is_none() {
        return Err(ConfigError::new(
            key,
            v,
            "expected a file name ending in .prom (node_exporter's textfile collector \
             reads only those)",
        ));
    }
    Ok(Some(path.to_path_buf()))
}

impl MetricsConfig {
    /// name and `%h` the host's (one acct_gather.conf for nodes sharing a file system), or where
    /// energy plugins are stacked one per plugin beside it (`energy.prom`:
    /// `energy.rust_gpu.prom`), each with its own `source` label.
    pub fn path_for(&self, source: &str, stacked: bool, node: &str) -> Option<PathBuf> {
        let text = self.file.as_ref()?.to_str()?;
        let file = PathBuf::from(crate::source::expand_node(text, node));
        if !stacked {
            return Some(file);
        }
        let stem = file.file_stem()?.to_string_lossy();
        Some(file.with_file_name(format!("{stem}.{source}.prom")))
    }
}

#[cfg(test)]
mod tests;
