//! Where a cluster keeps everything (configs, munge key, MariaDB datadir, spool/state, logs,
//! pid records, client wrappers: all under its directory, nothing under /etc), what `up`
//! saves there for the other commands, and the errors of the harness.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::slots::Slot;

/// The file that says a directory is a test cluster's (a slot whose owner lacks it is free).
pub const MARKER: &str = ".slurm-test-cluster";

#[derive(Debug)]
pub enum Error {
    /// A wrong command line or setting.
    Usage(String),
    /// Something the cluster needs is missing or could not be made.
    Setup(String),
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A daemon died or did not get ready; the text has its logs.
    Failed(String),
}

impl Error {
    pub fn io(path: &Path, e: std::io::Error) -> Error {
        Error::Io(path.to_path_buf(), e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Setup(m) | Error::Failed(m) => f.write_str(m),
            Error::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for Error {}

/// FNV-1a: names derived from the directory (namespaces, cluster name, first slot tried)
/// that stay the same from one build to the next.
pub fn dir_hash(dir: &Path) -> u64 {
    dir.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// A cluster's directory and the names derived from it.
pub struct Layout {
    pub dir: PathBuf,
    /// Network namespaces are `PREFIX-ctl`, `PREFIX-n1`, ...
    pub ns_prefix: String,
    pub default_cluster: String,
}

impl Layout {
    /// The layout of the cluster in `dir` (absolute; it need not exist yet).
    pub fn new(dir: &Path) -> Result<Layout, Error> {
        let dir = std::path::absolute(dir).map_err(|e| Error::io(dir, e))?;
        let dir = normalize(&dir);
        if ["/", "/tmp", "/root", "/home", "/usr", "/var", "/etc"]
            .iter()
            .any(|d| dir == Path::new(d))
        {
            return Err(Error::Usage(format!(
                "refusing to use {} as cluster directory",
                dir.display()
            )));
        }
        let h = format!("{:08x}", dir_hash(&dir) & 0xffff_ffff);
        Ok(Layout {
            dir,
            ns_prefix: format!("slc{h}"),
            default_cluster: format!("t{h}"),
        })
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    pub fn pid_dir(&self) -> PathBuf {
        self.dir.join("run/pid")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.join("log").join(name)
    }

    /// The munge socket of AuthInfo (in a node's mount namespace its own munged's).
    pub fn munge_socket(&self) -> PathBuf {
        self.dir.join("run/munge/munge.sock")
    }

    /// The file a node supervisor writes when slurmd exits on its own.
    pub fn exit_file(&self, node: &str) -> PathBuf {
        self.dir.join(format!("run/slurmd-{node}.exit"))
    }

    pub fn ctl_netns(&self) -> String {
        format!("{}-ctl", self.ns_prefix)
    }

    pub fn state_file(&self) -> PathBuf {
        self.dir.join("run/cluster.json")
    }
}

/// `..` and `.` resolved by text, as `realpath -m` does for paths without links.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// What `up` saves for the other commands.
#[derive(Clone, Debug)]
pub struct State {
    pub nodes: usize,
    pub netns: bool,
    pub bin: PathBuf,
    pub sbin: PathBuf,
    pub cluster: String,
    pub slot: Slot,
}

impl State {
    pub fn save(&self, layout: &Layout) -> Result<(), Error> {
        let text = serde_json::json!({
            "nodes": self.nodes,
            "netns": self.netns,
            "bin": self.bin,
            "sbin": self.sbin,
            "cluster": self.cluster,
            "slot": self.slot.0,
        })
        .to_string();
        let path = layout.state_file();
        fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    /// The state `up` saved; `None` when there is none (never up, or a broken file).
    pub fn load(layout: &Layout) -> Option<State> {
        let text = fs::read_to_string(layout.state_file()).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some(State {
            nodes: usize::try_from(v["nodes"].as_u64()?).ok()?,
            netns: v["netns"].as_bool()?,
            bin: v["bin"].as_str()?.into(),
            sbin: v["sbin"].as_str()?.into(),
            cluster: v["cluster"].as_str()?.into(),
            slot: Slot(u32::try_from(v["slot"].as_u64()?).ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_directory_and_system_directories_are_refused() {
        let a = Layout::new(Path::new("/tmp/x/../a/./cluster")).expect("a");
        assert_eq!(a.dir, Path::new("/tmp/a/cluster"));
        let b = Layout::new(Path::new("/tmp/b/cluster")).expect("b");
        assert_ne!(a.ns_prefix, b.ns_prefix);
        assert_eq!(
            a.ns_prefix.len(),
            11,
            "short enough for an interface-free netns name"
        );
        assert!(Layout::new(Path::new("/tmp/x/..")).is_err());
    }
}
