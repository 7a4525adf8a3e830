//! `acct_gather_energy_rust_variorum_sampler`: calls LLNL Variorum for
//! `acct_gather_energy/rust_variorum`, in a process of its own.
//!
//! Variorum may `exit()`, crash, hang or print to stdout, and is not thread-safe, so slurmd
//! never loads it: the plugin starts this program and reads one line per sample from a
//! pipe. Usage:
//!
//! ```text
//! acct_gather_energy_rust_variorum_sampler --library <path or name> --period <seconds>
//!     [--result-fd <fd, default 1>] [--parent <pid>]
//! ```
//!
//! Before the library is loaded, the result pipe is moved to a private close-on-exec
//! descriptor and fds 1 and 2 point at a scratch memfd, so that nothing Variorum prints can
//! reach the pipe (what it printed around a failed call is quoted in the error line). Every
//! other descriptor inherited from slurmd is closed. Lines written on the pipe:
//!
//! - `{"ready":true,"api":"<symbol>","version":"<variorum_get_current_version()>"}` once,
//!   after loading and one successful (discarded) call;
//! - `{"ok":true,"json":"<Variorum's JSON as a string>","t_ns":<CLOCK_MONOTONIC of the call>}`
//!   every period;
//! - `{"ok":false,"error":"<why>"}` for a failed call, or a failed start (then exit 1).
//!
//! The sampler exits when its parent dies (`PR_SET_PDEATHSIG` = SIGKILL, plus a check of
//! `getppid()` each period) and when writing to the pipe fails (the reader is gone).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::time::Duration;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW, Symbol};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// Intel power in Variorum is the energy delta since the previous call divided by the
/// time, and the first call after loading returns 0 W; so one call is made and discarded
/// before the first sample, which then averages over this long. The plugin adds the same
/// to its first wait (`SAMPLER_WARMUP` in core/src/variorum/mod.rs).
const WARMUP: Duration = Duration::from_millis(250);

/// How much of what the library printed is quoted in an error line.
const OUTPUT_TAIL: usize = 600;

/// jansson's `JSON_COMPACT` flag for `json_dumps` (jansson.h: `#define JSON_COMPACT 0x20`).
const JSON_COMPACT: usize = 0x20;

/// jansson's `json_t`, only ever handled by pointer.
#[repr(C)]
struct JsonT {
    _opaque: [u8; 0],
}

type StringApi = unsafe extern "C" fn(*mut *mut c_char) -> c_int;
type JanssonApi = unsafe extern "C" fn(*mut JsonT) -> c_int;
type VersionFn = unsafe extern "C" fn() -> *const c_char;
type JsonObjectFn = unsafe extern "C" fn() -> *mut JsonT;
type JsonDumpsFn = unsafe extern "C" fn(*const JsonT, usize) -> *mut c_char;
type JsonDeleteFn = unsafe extern "C" fn(*mut JsonT);

/// The power JSON function of each Variorum generation.
enum Api {
    /// 0.8.0+: `int variorum_get_power_json(char **)`, nested JSON.
    Power(StringApi),
    /// 0.6.0–0.7.0: `int variorum_get_node_power_json(char **)`, flat JSON.
    NodeString(StringApi),
    /// 0.4.x–0.5.0: `int variorum_get_node_power_json(json_t *)` filling the caller's
    /// object, which we create, serialize and delete with the jansson that libvariorum
    /// itself links (looked up through the library's handle).
    NodeJansson {
        fill: JanssonApi,
        object: JsonObjectFn,
        dumps: JsonDumpsFn,
        delete: JsonDeleteFn,
    },
}

impl Api {
    fn symbol(&self) -> &'static str {
        match self {
            Api::Power(_) => "variorum_get_power_json",
            Api::NodeString(_) | Api::NodeJansson { .. } => "variorum_get_node_power_json",
        }
    }

    fn generation(&self) -> &'static str {
        match self {
            Api::Power(_) => "variorum_get_power_json",
            Api::NodeString(_) => "variorum_get_node_power_json(char **)",
            Api::NodeJansson { .. } => "variorum_get_node_power_json(json_t *)",
        }
    }

    /// One call, returning Variorum's JSON text.
    fn call(&self) -> Result<String, String> {
        let name = self.symbol();
        match self {
            Api::Power(f) | Api::NodeString(f) => {
                let mut s: *mut c_char = std::ptr::null_mut();
                // SAFETY: the symbol has this signature in the releases that export it
                // under this name (0.6+ for node_power, 0.8+ for power); `s` is a valid
                // out-pointer initialised to NULL (a later dev revision may return 0
                // without setting it).
                let rc = unsafe { f(&mut s) };
                // Variorum 0.8.0 can set the string and still return -1 (when
                // variorum_exit fails), so free whatever came back.
                let text = take_malloced(s);
                match (rc, text) {
                    (0, Some(text)) => Ok(text),
                    (0, None) => Err(format!("{name} returned 0 but no JSON")),
                    (rc, _) => Err(format!("{name} returned {rc}")),
                }
            }
            Api::NodeJansson {
                fill,
                object,
                dumps,
                delete,
            } => {
                // SAFETY: jansson's `json_t *json_object(void)`.
                let obj = unsafe { object() };
                if obj.is_null() {
                    return Err("jansson's json_object() failed".into());
                }
                // SAFETY: 0.4/0.5 take a caller-owned jansson object and add keys to it.
                let rc = unsafe { fill(obj) };
                // SAFETY: `obj` is a live object; json_dumps returns a malloc'd string
                // (jansson's default allocator, which Variorum never replaces) or NULL.
                let s = unsafe { dumps(obj, JSON_COMPACT) };
                // SAFETY: we hold the only reference (refcount 1), so this is what
                // json_decref, an inline function of jansson.h, would do.
                unsafe { delete(obj) };
                let text = take_malloced(s);
                match (rc, text) {
                    (0, Some(text)) => Ok(text),
                    (0, None) => Err("jansson's json_dumps() failed".into()),
                    (rc, _) => Err(format!("{name} returned {rc}")),
                }
            }
        }
    }
}

/// Copies a C string allocated with malloc and frees it with libc's free (never Rust's
/// allocator).
fn take_malloced(s: *mut c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: a non-NULL result of these APIs is a NUL-terminated string from malloc.
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    // SAFETY: it came from malloc (json_dumps in Variorum) and is freed exactly once.
    unsafe { libc::free(s.cast::<c_void>()) };
    Some(text)
}

struct Args {
    library: String,
    period: Duration,
    result_fd: RawFd,
    parent: Option<i32>,
}

fn parse_args() -> Result<Args, String> {
    let mut library = None;
    let mut period = None;
    let mut result_fd = 1;
    let mut parent = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--library" => library = Some(value),
            "--period" => {
                let secs: f64 = value
                    .parse()
                    .map_err(|_| format!("--period {value}: expected seconds"))?;
                period = Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|p| !p.is_zero() && p.as_secs() <= 86_400);
                if period.is_none() {
                    return Err(format!("--period {value}: expected 0 < seconds <= 86400"));
                }
            }
            "--result-fd" => {
                result_fd = value
                    .parse()
                    .ok()
                    .filter(|fd| *fd >= 0)
                    .ok_or_else(|| format!("--result-fd {value}: expected a descriptor"))?;
            }
            "--parent" => {
                parent = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("--parent {value}: expected a pid"))?,
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        library: library.ok_or("--library is required")?,
        period: period.ok_or("--period is required")?,
        result_fd,
        parent,
    })
}

/// Pushes out what the library printed with stdio: stdout is not a terminal, so printf
/// output waits in libc's buffer.
fn flush_stdio() {
    // SAFETY: fflush(NULL) flushes every open stdio output stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

/// Where the library's stdout and stderr go: a scratch memfd, emptied before each call,
/// so its last words can be quoted when a call fails.
struct Scratch(Option<File>);

impl Scratch {
    /// Points fds 1 and 2 at a memfd (or /dev/null): never at the result pipe.
    fn install() -> Result<Scratch, String> {
        let file = nix::sys::memfd::memfd_create(
            c"variorum-output",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .ok()
        .map(File::from);
        let target: OwnedFd = match &file {
            Some(f) => f.as_fd().try_clone_to_owned().map_err(|e| e.to_string())?,
            None => File::options()
                .write(true)
                .open("/dev/null")
                .map_err(|e| format!("/dev/null: {e}"))?
                .into(),
        };
        nix::unistd::dup2_stdout(&target).map_err(|e| e.to_string())?;
        nix::unistd::dup2_stderr(&target).map_err(|e| e.to_string())?;
        Ok(Scratch(file))
    }

    fn reset(&mut self) {
        flush_stdio();
        if let Some(f) = &mut self.0 {
            // fds 1 and 2 share this file's offset: rewinding here rewinds them too
            let _ = f.set_len(0);
            let _ = f.seek(SeekFrom::Start(0));
        }
    }

    /// " (library output: ...)" with the end of what was printed since `reset`.
    fn tail(&mut self) -> String {
        flush_stdio();
        let Some(f) = &mut self.0 else {
            return String::new();
        };
        // only the end matters, however much the library printed
        let len = f.metadata().map_or(0, |m| m.len());
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(len.saturating_sub(8192))).is_err()
            || f.read_to_end(&mut bytes).is_err()
        {
            return String::new();
        }
        let text = String::from_utf8_lossy(&bytes);
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return String::new();
        }
        let start = text
            .char_indices()
            .rev()
            .nth(OUTPUT_TAIL)
            .map_or(0, |(i, _)| i);
        let ellipsis = if start > 0 { "..." } else { "" };
        format!(" (library output: {ellipsis}{})", &text[start..])
    }
}

/// The pipe to the plugin.
struct Results(File);

impl Results {
    /// One line per write, so the reader never sees half a line from us: the pipe is
    /// ours alone, and lines are far below the pipe's capacity.
    fn send(&mut self, value: &Value) -> std::io::Result<()> {
        let mut line = value.to_string();
        line.push('\n');
        self.0.write_all(line.as_bytes())
    }
}

/// Closes every descriptor >= 3 except `keep`: slurmd's sockets and files must not stay
/// open in a process that lives as long as the node.
fn close_inherited(keep: RawFd) {
    let ranges: &[(u32, u32)] = if keep >= 3 {
        let k = keep.unsigned_abs();
        &[(3, k - 1), (k + 1, u32::MAX)]
    } else {
        &[(3, u32::MAX)]
    };
    for &(first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: close_range only closes descriptors; nothing in this process holds
        // one yet (std's own stdio handles are fds 0-2).
        if unsafe { libc::close_range(first, last, 0) } != 0 {
            close_inherited_slowly(keep);
            return;
        }
    }
}

/// For kernels before 5.9 (no close_range).
fn close_inherited_slowly(keep: RawFd) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds.into_iter().filter(|&fd| fd >= 3 && fd != keep) {
        // SAFETY: as above; the read_dir descriptor is already closed (EBADF is harmless).
        unsafe { libc::close(fd) };
    }
}

/// Moves the result pipe to a private close-on-exec descriptor >= 3.
fn take_result_fd(fd: RawFd) -> Result<File, String> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor number; fails cleanly if it is not open.
    let private = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if private < 0 {
        return Err(format!(
            "result fd {fd}: {}",
            std::io::Error::last_os_error()
        ));
    }
    if fd >= 3 {
        // SAFETY: the original is ours to close now that it is duplicated.
        unsafe { libc::close(fd) };
    }
    // SAFETY: `private` is a fresh descriptor owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(private) }))
}

fn parent_gone(parent: Option<i32>) -> bool {
    parent.is_some_and(|p| nix::unistd::getppid().as_raw() != p)
}

fn load(path: &str) -> Result<Library, String> {
    // RTLD_NOW: an unresolved symbol fails here, not in the middle of a call.
    // SAFETY: running the library's initialisers is the point; whatever they do
    // (print, exit, crash) stays in this process.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| e.to_string())
}

/// # Safety
/// `T` must be the symbol's real type.
unsafe fn lookup<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller names the right type; the library is never unloaded (see main).
    let symbol: Symbol<T> = unsafe { lib.get(name.as_bytes()) }.ok()?;
    Some(*symbol)
}

/// Finds the power function by symbol: the runtime version string cannot be trusted
/// (0.8.0 reports "0.5.0"), and 0.4–0.7 share one name with two signatures.
fn detect(lib: &Library) -> Result<(Api, Option<String>), String> {
    // SAFETY: `char *variorum_get_current_version(void)` in every release that has it.
    let version =
        unsafe { lookup::<VersionFn>(lib, "variorum_get_current_version") }.and_then(|f| {
            // SAFETY: returns a string literal (QuoteMacro(VARIORUM_VERSION)), not freed.
            let s = unsafe { f() };
            // SAFETY: non-NULL, NUL-terminated literal.
            (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
        });
    // SAFETY: `int variorum_get_power_json(char **)` since 0.8.0, its only signature.
    if let Some(f) = unsafe { lookup::<StringApi>(lib, "variorum_get_power_json") } {
        return Ok((Api::Power(f), version));
    }
    let neither = "the library has neither variorum_get_power_json (Variorum 0.8+) nor \
                   variorum_get_node_power_json (0.4-0.7)";
    // variorum_get_current_version came in 0.6.0 together with the switch of
    // variorum_get_node_power_json from json_t * to char ** (ChangeLog of 0.6.0; header
    // diff v0.5.0..v0.6.0), so its presence tells the two signatures apart.
    if version.is_some() {
        // SAFETY: the char ** signature of 0.6/0.7, told apart just above.
        return unsafe { lookup::<StringApi>(lib, "variorum_get_node_power_json") }
            .map(|f| (Api::NodeString(f), version))
            .ok_or_else(|| neither.to_string());
    }
    // SAFETY: the json_t * signature of 0.4/0.5 (no variorum_get_current_version).
    let Some(fill) = (unsafe { lookup::<JanssonApi>(lib, "variorum_get_node_power_json") }) else {
        return Err(neither.into());
    };
    // dlsym through libvariorum's handle searches its dependencies too, so these are the
    // functions of the very jansson that Variorum fills the object with.
    // SAFETY: the signatures declared in jansson.h (2.x).
    let jansson = unsafe {
        (
            lookup::<JsonObjectFn>(lib, "json_object"),
            lookup::<JsonDumpsFn>(lib, "json_dumps"),
            lookup::<JsonDeleteFn>(lib, "json_delete"),
        )
    };
    match jansson {
        (Some(object), Some(dumps), Some(delete)) => Ok((
            Api::NodeJansson {
                fill,
                object,
                dumps,
                delete,
            },
            None,
        )),
        _ => Err(
            "variorum_get_node_power_json without variorum_get_current_version is the \
             json_t * API of Variorum 0.4/0.5, but jansson's json_object, json_dumps and \
             json_delete are not reachable through the library"
                .into(),
        ),
    }
}

/// Leaves without running exit handlers or library destructors: Variorum's could hang
/// or crash, and a sampler that is done must be gone. Our writes are unbuffered.
fn quit(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

fn fail(out: &mut Results, error: String) -> ! {
    let _ = out.send(&json!({"ok": false, "error": error}));
    quit(1)
}

fn main() -> ExitCode {
    // First of all: a sampler must never outlive the plugin that reads it.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            let line = json!({"ok": false, "error": format!("sampler: {e}")});
            let _ = writeln!(std::io::stdout(), "{line}");
            return ExitCode::from(2);
        }
    };
    // The parent may have died before prctl: then nobody would ever signal us.
    if parent_gone(args.parent) {
        return ExitCode::SUCCESS;
    }
    // A library that crashes at every restart would otherwise leave a core file per
    // attempt in slurmd's working directory.
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);

    close_inherited(args.result_fd);
    let mut out = match take_result_fd(args.result_fd) {
        Ok(file) => Results(file),
        Err(_) => return ExitCode::from(2),
    };
    let mut scratch = match Scratch::install() {
        Ok(scratch) => scratch,
        Err(e) => fail(&mut out, format!("sampler: cannot redirect stdout: {e}")),
    };

    scratch.reset();
    let lib: &'static Library = match load(&args.library) {
        // Never unloaded: Variorum may start threads (IBM's energy sampler) that would
        // run into unmapped code after a dlclose.
        Ok(lib) => Box::leak(Box::new(lib)),
        Err(e) => {
            let tail = scratch.tail();
            fail(&mut out, format!("cannot load {}: {e}{tail}", args.library))
        }
    };
    let (api, version) = match detect(lib) {
        Ok(found) => found,
        Err(e) => fail(&mut out, format!("{}: {e}", args.library)),
    };

    // The warm-up call: its result is discarded (see WARMUP), its failure is not.
    scratch.reset();
    if let Err(e) = api.call() {
        let tail = scratch.tail();
        fail(&mut out, format!("{e}{tail}"));
    }
    let mut ready = json!({"ready": true, "api": api.generation()});
    if let Some(v) = &version {
        ready["version"] = json!(v);
    }
    if out.send(&ready).is_err() {
        quit(0);
    }
    std::thread::sleep(WARMUP);

    loop {
        scratch.reset();
        let line = match api.call() {
            // when the power was read, on the clock the plugin shares (CLOCK_MONOTONIC is
            // system-wide): it integrates with the sample's time, not the time it read it
            Ok(text) => json!({"ok": true, "json": text, "t_ns": monotonic_ns()}),
            Err(e) => json!({"ok": false, "error": format!("{e}{}", scratch.tail())}),
        };
        // The reader is gone: nothing to sample for.
        if out.send(&line).is_err() || parent_gone(args.parent) {
            quit(0);
        }
        std::thread::sleep(args.period);
        if parent_gone(args.parent) {
            quit(0);
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}
