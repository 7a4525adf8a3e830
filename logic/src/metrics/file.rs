//! The metrics file: who may read it (its mode, group and owners in effect, which
//! slurm.conf's `PrivateData` decides where the admin did not) and its writing, whole,
//! through a temporary file renamed over the old one ([`crate::replace`]).

use std::path::{Path, PathBuf};

use super::config::{FILE_KEY, GROUP_KEY, GroupName, MODE_KEY, MetricsConfig, OWNERS_KEY};
use crate::config::{ConfigError, yes_no};
use crate::replace::{Access, Directory};

/// Readable by all, node_exporter's user included: what the file's mode was before it
/// could be set, and still is where Slurm does not hide jobs from other users.
const DEFAULT_MODE: u32 = 0o644;
/// Where `PrivateData` hides jobs: root's only, or root's and [`GROUP_KEY`]'s.
const PRIVATE_MODE: u32 = 0o600;
const PRIVATE_GROUP_MODE: u32 = 0o640;

/// What slurm.conf's `PrivateData` hides from users other than a job's own (Slurm's
/// `PrivateData=jobs,usage,users`, each set by `all` too); the other flags say nothing of
/// jobs and their owners.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrivateData {
    /// `PrivateData=jobs`.
    pub jobs: bool,
    /// `PrivateData=usage`.
    pub usage: bool,
    /// `PrivateData=users`.
    pub users: bool,
}

impl PrivateData {
    /// Whether Slurm hides who runs which job, or how much it used, from other users: then
    /// so must the file.
    fn hides_jobs(self) -> bool {
        self.jobs || self.usage || self.users
    }
}

/// The file's mode and whether it names owners, as in effect: each key the admin set wins;
/// a key left out takes its default, which is private where [`PrivateData`] hides jobs
/// (mode 0600, or 0640 with [`GROUP_KEY`]; no owners) and otherwise what it always was
/// (0644, owners named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InEffect {
    pub mode: u32,
    pub owners: bool,
    /// Whether `PrivateData` chose the mode, the owners: `scontrol show config` says so.
    private_mode: bool,
    private_owners: bool,
}

impl InEffect {
    /// The line slurmd logs once when it starts writing `path` (group as the admin named
    /// it): who can read the file, and, where not everyone, how node_exporter can.
    pub fn describe(&self, path: &Path, group: Option<&GroupName>) -> String {
        let path = path.display();
        let owners = if self.owners {
            "names each job's owner"
        } else {
            "names no job's owner"
        };
        let why = if self.private_mode {
            "slurm.conf's PrivateData hides jobs, users or usage, so "
        } else {
            ""
        };
        let mode = self.mode;
        if mode & 0o004 != 0 {
            return format!(
                "the energy metrics file {path} is readable by every user of this node \
                 (mode {mode:04o}) and {owners} ({OWNERS_KEY})"
            );
        }
        let how = match group {
            Some(group) if mode & 0o040 != 0 => format!(
                "readable by root and group {group} only (mode {mode:04o}, {GROUP_KEY}: \
                 node_exporter's user must be in it)"
            ),
            Some(group) => format!(
                "readable by root only (mode {mode:04o}); set {MODE_KEY}=0640 to let \
                 node_exporter read it through group {group} ({GROUP_KEY})"
            ),
            None => format!(
                "readable by root only (mode {mode:04o}); set {GROUP_KEY} to \
                 node_exporter's group to let node_exporter read it"
            ),
        };
        format!("{why}the energy metrics file {path} is {how}; it {owners} ({OWNERS_KEY})")
    }

    /// `scontrol show config`'s value for [`MODE_KEY`] and [`OWNERS_KEY`].
    fn show(&self, key: &str) -> Option<String> {
        let because = |private: bool| if private { " (PrivateData)" } else { "" };
        match key {
            MODE_KEY => Some(format!("{:04o}{}", self.mode, because(self.private_mode))),
            OWNERS_KEY => Some(format!(
                "{}{}",
                yes_no(&self.owners),
                because(self.private_owners)
            )),
            _ => None,
        }
    }
}

impl MetricsConfig {
    /// The mode and owners in effect where slurm.conf's PrivateData is `private`.
    pub fn in_effect(&self, private: PrivateData) -> InEffect {
        let hides = private.hides_jobs();
        let private_mode = if self.group.is_some() {
            PRIVATE_GROUP_MODE
        } else {
            PRIVATE_MODE
        };
        InEffect {
            mode: self
                .mode
                .unwrap_or(if hides { private_mode } else { DEFAULT_MODE }),
            owners: self.owners.unwrap_or(!hides),
            private_mode: hides && self.mode.is_none(),
            private_owners: hides && self.owners.is_none(),
        }
    }

    /// `(key, value)` for `scontrol show config`: the values in effect where slurm.conf's
    /// PrivateData is `private`, and why where it chose them.
    pub fn shown(&self, private: PrivateData) -> Vec<(&'static str, String)> {
        let effect = self.in_effect(private);
        self.show()
            .into_iter()
            .map(|(key, value)| (key, effect.show(key).unwrap_or(value)))
            .collect()
    }

    /// Who may read the file as `effect` says, its group looked up on this node; an error
    /// names the key and the value.
    pub fn access(&self, effect: &InEffect) -> Result<Access, ConfigError> {
        let group = match &self.group {
            None => None,
            Some(GroupName::Id(gid)) => Some(*gid),
            Some(GroupName::Name(name)) => match nix::unistd::Group::from_name(name) {
                Ok(Some(group)) => Some(group.gid.as_raw()),
                Ok(None) => {
                    return Err(ConfigError::new(
                        GROUP_KEY,
                        name,
                        "no such group on this node",
                    ));
                }
                Err(e) => {
                    return Err(ConfigError::new(
                        GROUP_KEY,
                        name,
                        format!("cannot look the group up: {e}"),
                    ));
                }
            },
        };
        Ok(Access {
            mode: effect.mode,
            group,
        })
    }
}

/// The file the metrics are written to, in the directory opened once when slurmd started
/// (`Directory`); a failure is logged once per episode.
pub(crate) struct MetricsFile {
    dir: Directory,
    name: String,
    access: Access,
    failing: bool,
}

impl Drop for MetricsFile {
    /// slurmd stops measuring: the file goes, or node_exporter would serve its last
    /// figures as current for ever. Removed from the directory first opened, whatever its
    /// path names now.
    fn drop(&mut self) {
        let _ = self.dir.remove(&self.name);
    }
}

impl MetricsFile {
    /// Writes to `path`, readable as `access` says, once the temporary files a killed
    /// slurmd left beside it are gone. Its
    /// directory is opened now, for good: a link in its path is refused (an error naming
    /// [`FILE_KEY`]), and a directory on the way that others can write is logged.
    pub(crate) fn open(path: &Path, access: Access) -> Result<Self, ConfigError> {
        let refused = |why: String| ConfigError::new(FILE_KEY, &path.display().to_string(), why);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Err(refused("expected a file name in a directory".into()));
        };
        let (dir, exposed) = Directory::open_checked(dir).map_err(|e| refused(e.to_string()))?;
        for exposure in exposed {
            log::warn!("{FILE_KEY}: {exposure}");
        }
        dir.sweep(name);
        Ok(Self {
            dir,
            name: name.to_string(),
            access,
            failing: false,
        })
    }

    /// Its path as it was when opened.
    fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// Replaces the file with `text`, readable by node_exporter's user as configured,
    /// through a temporary file beside it that the collector skips (`Directory::replace`).
    pub(crate) fn write(&mut self, text: &str) {
        let written = self.dir.replace(&self.name, text.as_bytes(), self.access);
        match written {
            Ok(()) if self.failing => {
                log::info!(
                    "the energy metrics are written to {} again",
                    self.path().display()
                );
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                log::error!(
                    "cannot write the energy metrics to {}: {e}",
                    self.path().display()
                );
                self.failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
