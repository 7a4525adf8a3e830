//! Builds and drives the fake `libvariorum.so` (fakevariorum.c) for the rust_variorum
//! tests. Included with `#[path]` by the test files that use it, in two packages.
#![allow(dead_code)] // each including test file uses a different part

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// One API generation of Variorum, with the JSON shape of its releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Generation {
    /// 0.4.0: `variorum_get_node_power_json(json_t *)`, flat keys without units.
    V040,
    /// 0.4.1 – 0.5.0: `variorum_get_node_power_json(json_t *)`, flat `_watts` keys.
    V050,
    /// 0.6.0 – 0.7.0: `variorum_get_node_power_json(char **)`, flat.
    V070,
    /// 0.8.0: `variorum_get_power_json(char **)`, nested under the hostname.
    V080,
}

impl Generation {
    pub const ALL: [Generation; 4] = [
        Generation::V040,
        Generation::V050,
        Generation::V070,
        Generation::V080,
    ];

    fn defines(self) -> &'static [&'static str] {
        match self {
            Generation::V040 => &["-DFAKE_API_NODE_JANSSON", "-DFAKE_SHAPE_040"],
            Generation::V050 => &["-DFAKE_API_NODE_JANSSON"],
            Generation::V070 => &["-DFAKE_API_NODE_STRING"],
            Generation::V080 => &["-DFAKE_API_POWER_JSON"],
        }
    }

    pub fn needs_jansson(self) -> bool {
        matches!(self, Generation::V040 | Generation::V050)
    }

    /// What the sampler reports as the API it found.
    pub fn api(self) -> &'static str {
        match self {
            Generation::V040 | Generation::V050 => "variorum_get_node_power_json(json_t *)",
            Generation::V070 => "variorum_get_node_power_json(char **)",
            Generation::V080 => "variorum_get_power_json",
        }
    }

    /// Whether the JSON can carry per-GPU objects and `Socket_N` keys (0.8 only).
    pub fn nested(self) -> bool {
        self == Generation::V080
    }
}

fn source() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let candidate = dir.join("tests/fakevariorum/fakevariorum.c");
        if candidate.exists() {
            return candidate;
        }
        assert!(
            dir.pop(),
            "tests/fakevariorum/fakevariorum.c not found above the package"
        );
    }
}

/// The system's jansson (Debian: libjansson4, a dependency of binutils and of Slurm's
/// libjwt0), which the 0.4/0.5 fakes link against as the real Variorum does: where gcc,
/// which links them, finds it for this machine's architecture.
pub fn jansson() -> Option<PathBuf> {
    let out = Command::new("gcc")
        .arg("-print-file-name=libjansson.so.4")
        .output()
        .ok()?;
    // gcc prints the bare name back when it finds no such file
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_absolute() && path.exists()).then_some(path)
}

/// Like the other energy tests: a missing prerequisite fails loudly unless
/// ENERGY_TESTS_ALLOW_SKIP=1 says skipping is intended.
pub fn skip_or_panic(test: &str, why: &str) -> bool {
    if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("SKIPPED {test}: {why} (ENERGY_TESTS_ALLOW_SKIP=1)");
        return true;
    }
    panic!("{test}: {why}; set ENERGY_TESTS_ALLOW_SKIP=1 to skip");
}

struct Built {
    dir: tempfile::TempDir,
    libs: HashMap<Generation, PathBuf>,
}

static BUILT: OnceLock<Mutex<Built>> = OnceLock::new();

/// Compiles the fake for `generation` once per test process.
fn build(generation: Generation) -> Result<PathBuf, String> {
    let built = BUILT.get_or_init(|| {
        Mutex::new(Built {
            dir: tempfile::Builder::new()
                .prefix("fakevariorum-build")
                .tempdir()
                .expect("temp dir"),
            libs: HashMap::new(),
        })
    });
    let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(lib) = built.libs.get(&generation) {
        return Ok(lib.clone());
    }
    let out = built.dir.path().join(format!("{generation:?}.so"));
    let mut gcc = Command::new("gcc");
    gcc.args([
        "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o",
    ])
    .arg(&out)
    .arg(source())
    .args(generation.defines());
    if generation.needs_jansson() {
        gcc.arg(jansson().ok_or("no libjansson.so.4 on this machine (Debian: libjansson4)")?);
    }
    let result = gcc.output().map_err(|e| format!("cannot run gcc: {e}"))?;
    if !result.status.success() {
        return Err(format!(
            "gcc failed for {generation:?}: {}",
            String::from_utf8_lossy(&result.stderr)
        ));
    }
    built.libs.insert(generation, out.clone());
    Ok(out)
}

/// A fake `libvariorum.so` in a directory of its own, with its control files beside it.
pub struct FakeLib {
    pub dir: tempfile::TempDir,
    pub lib: PathBuf,
    pub generation: Generation,
}

impl FakeLib {
    /// `None` when the prerequisites (gcc, jansson) are missing and skipping is allowed.
    pub fn new(test: &str, generation: Generation) -> Option<FakeLib> {
        let built = match build(generation) {
            Ok(path) => path,
            Err(why) => {
                skip_or_panic(test, &why);
                return None;
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("fakevariorum")
            .tempdir()
            .expect("temp dir");
        let lib = dir.path().join("libvariorum.so");
        fs::copy(&built, &lib).expect("copy the fake library");
        let fake = FakeLib {
            dir,
            lib,
            generation,
        };
        fake.set_mode("ok");
        Some(fake)
    }

    pub fn library(&self) -> String {
        self.lib.display().to_string()
    }

    /// Replaces a control file whole, so a call never reads half of it.
    fn write(&self, name: &str, text: &str) {
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        fs::write(&tmp, text).expect("write control file");
        fs::rename(&tmp, self.dir.path().join(name)).expect("rename control file");
    }

    /// See fakevariorum.c: `node=W cpuN=W memN=W gpuN=W[,W...] ioN=W host=H case=upper`.
    pub fn set_power(&self, spec: &str) {
        self.write("power", spec);
    }

    pub fn set_mode(&self, mode: &str) {
        self.write("mode", mode);
    }

    /// `(pid, mode)` of every call so far.
    pub fn calls(&self) -> Vec<(u32, String)> {
        let text = fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let (pid, mode) = l.split_once(' ')?;
                Some((pid.parse().ok()?, mode.to_string()))
            })
            .collect()
    }

    /// Waits until the library has been called at least `n` times in total.
    pub fn wait_for_calls(&self, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.calls().len() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// The state letter of `/proc/<pid>/stat` ('Z' for a zombie), `None` when there is no
/// such process.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name is in parentheses and may contain spaces
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The parent pid of `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Waits until `pid` is gone or a zombie (dead, waiting for a parent that is not us).
pub fn wait_dead(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        match process_state(pid) {
            None | Some('Z') | Some('X') => return true,
            Some(_) if Instant::now() >= deadline => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Where each of the process's descriptors points (`/proc/<pid>/fd`).
pub fn open_fds(pid: u32) -> Vec<(i32, String)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut fds: Vec<(i32, String)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = fs::read_link(e.path()).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect();
    fds.sort();
    fds
}

/// Processes whose command line mentions `needle` (e.g. a fake library's unique path),
/// with their state letter.
pub fn processes_with(needle: &str) -> Vec<(u32, char)> {
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if !cmdline.contains(needle) {
                return None;
            }
            Some((pid, process_state(pid)?))
        })
        .collect()
}
