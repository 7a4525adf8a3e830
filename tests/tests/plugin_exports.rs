//! Every plugin the workspace builds, checked as Slurm's loader and the dynamic linker see
//! it: it exports exactly the symbols Slurm looks up (`plugin_name`, `plugin_type`,
//! `plugin_version`, `init`, `fini` and the six `acct_gather_energy_p_*`), its
//! `plugin_version` is the `SLURM_VERSION_NUMBER` of the headers it was built with, and
//! every symbol it needs is exported by the libslurmfull it was built for (the daemons'
//! own library, which they load globally) or by libc's family (libc, libm, libgcc_s, the
//! dynamic linker). The plugins are found through `cargo metadata` (each `cdylib` of the
//! workspace, [`support::built_plugins`]), so a new plugin is checked without touching
//! this file.
//!
//! Build the workspace first (`cargo build --release --workspace`; ci/test.sh does).

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_LOCAL, RTLD_NOW};
use object::{Object, ObjectSymbol, SymbolKind};

use energy_tests as support;
use support::built_plugins as plugins;

/// What `plugin_load_from_file` and `acct_gather_energy_init` look up (slurm-abi.md §1.1).
const DATA: [&str; 3] = ["plugin_name", "plugin_type", "plugin_version"];
const FUNCTIONS: [&str; 8] = [
    "init",
    "fini",
    "acct_gather_energy_p_update_node_energy",
    "acct_gather_energy_p_get_data",
    "acct_gather_energy_p_set_data",
    "acct_gather_energy_p_conf_options",
    "acct_gather_energy_p_conf_set",
    "acct_gather_energy_p_conf_values",
];

/// The libraries a plugin may need besides libslurmfull: glibc's (libpthread, libdl and
/// librt are separate before glibc 2.34), libgcc_s for unwinding, and the dynamic
/// linker (`ld-linux-x86-64.so.2`, `ld-linux-aarch64.so.1`, ...). By soname prefix.
const SYSTEM_LIBRARIES: [&str; 8] = [
    "libc.so.",
    "libm.so.",
    "libgcc_s.so.",
    "libpthread.so.",
    "libdl.so.",
    "librt.so.",
    "ld-linux",
    "linux-vdso.so.",
];

/// The libslurmfull the plugins were built for (tests/build.rs: `SLURM_LIB_DIR`, else
/// `SLURM_PREFIX/lib/slurm`, else Debian's for this architecture).
fn libslurmfull() -> PathBuf {
    let path = Path::new(env!("ENERGY_TESTS_SLURM_LIB_DIR")).join("libslurmfull.so");
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// The defined, global dynamic symbols of a shared object, with their kinds (libc's
/// string functions are IFUNCs, of kind `Unknown`).
fn exports(file: &object::File) -> Vec<(String, SymbolKind)> {
    file.dynamic_symbols()
        .filter(|s| !s.is_undefined() && s.is_global())
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.kind())))
        .collect()
}

/// The symbols a shared object needs from others (weak references may stay unresolved).
fn imports(file: &object::File) -> BTreeSet<String> {
    file.dynamic_symbols()
        .filter(|s| s.is_undefined() && !s.is_weak())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|name| !name.is_empty())
        .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What the dynamic linker loads with `path` (ldd: the real loader's search), as
/// (soname, file) pairs.
fn dependencies(path: &Path) -> Vec<(String, Option<PathBuf>)> {
    let out = Command::new("ldd").arg(path).output().expect("run ldd");
    assert!(out.status.success(), "ldd {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)",
            // "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)"
            let line = line.trim();
            let (left, right) = match line.split_once(" => ") {
                Some((soname, rest)) => (soname.to_string(), rest),
                None => {
                    let file = line.split_whitespace().next()?;
                    let soname = Path::new(file).file_name()?.to_str()?.to_string();
                    (soname, file)
                }
            };
            let file = right
                .split_whitespace()
                .next()
                .filter(|f| f.starts_with('/'))
                .map(PathBuf::from);
            Some((left, file))
        })
        .collect()
}

/// The address of a data symbol (libloading's `Symbol<*const T>` is dlsym's result).
fn address<T>(lib: &Library, name: &str) -> *const T {
    // SAFETY: only the address is taken; what is read through it is the caller's.
    let symbol = unsafe { lib.get::<*const T>(name.as_bytes()) };
    *symbol.unwrap_or_else(|e| panic!("dlsym {name}: {e}"))
}

fn c_string(lib: &Library, name: &str) -> String {
    // SAFETY: `plugin_name` and `plugin_type` are NUL-terminated char arrays (their
    // kind is checked in every_plugin_exports_what_slurm_needs_and_nothing_else), and
    // the library stays loaded while the string is copied.
    unsafe { CStr::from_ptr(address::<c_char>(lib, name)) }
        .to_string_lossy()
        .into_owned()
}

type PluginHandle = *mut c_void;
type LoadFromFile = unsafe extern "C" fn(*mut PluginHandle, *const c_char) -> c_int;
type GetSyms =
    unsafe extern "C" fn(PluginHandle, c_int, *const *const c_char, *mut *mut c_void) -> c_int;
type Unload = unsafe extern "C" fn(PluginHandle);

/// Slurm's own loader, from libslurmfull (src/common/plugin.c, the same in every
/// release tested): what slurmd does with the file before anything else.
struct Loader {
    load_from_file: LoadFromFile,
    get_syms: GetSyms,
    unload: Unload,
}

impl Loader {
    fn new(slurm: &Library) -> Loader {
        // SAFETY: the signatures of plugin.h (`plugin_handle_t` is `void *`).
        unsafe {
            Loader {
                load_from_file: *slurm
                    .get(b"plugin_load_from_file")
                    .expect("plugin_load_from_file"),
                get_syms: *slurm.get(b"plugin_get_syms").expect("plugin_get_syms"),
                unload: *slurm.get(b"plugin_unload").expect("plugin_unload"),
            }
        }
    }

    /// Loads the plugin as slurmd does (checks name, type and version, calls `init`),
    /// counts the operations it finds, and unloads it (calling `fini`).
    fn accepts(&self, path: &Path, operations: &[&str]) -> Result<usize, c_int> {
        let path = CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        let mut handle: PluginHandle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and path.
        let rc = unsafe { (self.load_from_file)(&mut handle, path.as_ptr()) };
        if rc != 0 {
            return Err(rc);
        }
        let names: Vec<CString> = operations
            .iter()
            .map(|n| CString::new(*n).expect("name"))
            .collect();
        let pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut found = vec![std::ptr::null_mut(); names.len()];
        let count = c_int::try_from(names.len()).expect("count");
        // SAFETY: `count` names and as many result slots, the handle just loaded.
        let n = unsafe { (self.get_syms)(handle, count, pointers.as_ptr(), found.as_mut_ptr()) };
        // SAFETY: the handle loaded above, unloaded once.
        unsafe { (self.unload)(handle) };
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

#[test]
fn every_plugin_exports_what_slurm_needs_and_nothing_else() {
    let wanted: BTreeSet<&str> = DATA.iter().chain(&FUNCTIONS).copied().collect();
    for (name, path) in plugins() {
        let data = read(&path);
        let file = object::File::parse(&*data).expect("an ELF shared object");
        let exported = exports(&file);
        let names: BTreeSet<&str> = exported.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            wanted,
            "{name}: exports {:?} too many, {:?} missing",
            names.difference(&wanted).collect::<Vec<_>>(),
            wanted.difference(&names).collect::<Vec<_>>()
        );
        for (symbol, kind) in &exported {
            let expected = if DATA.contains(&symbol.as_str()) {
                SymbolKind::Data
            } else {
                SymbolKind::Text
            };
            assert_eq!(*kind, expected, "{name}: {symbol}");
        }
    }
}

/// The real dynamic link: libslurmfull loaded globally (as in slurmd, slurmstepd and
/// every Slurm command), then each plugin with RTLD_NOW, so that any symbol it needs and
/// nothing provides fails here; then what the loader reads from it, and the loader
/// itself.
#[test]
fn every_plugin_links_against_libslurmfull_and_has_its_version() {
    // SAFETY: libslurmfull's initialisers are what every Slurm program runs; it stays
    // loaded until the test process ends.
    let slurm = unsafe { Library::open(Some(libslurmfull()), RTLD_NOW | RTLD_GLOBAL) }
        .unwrap_or_else(|e| panic!("dlopen libslurmfull: {e}"));
    let loader = Loader::new(&slurm);
    for (name, path) in plugins() {
        // SAFETY: a Rust cdylib has no initialisers of its own; its symbols are
        // resolved against libslurmfull and libc, which is what is being tested.
        let plugin = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }
            .unwrap_or_else(|e| panic!("{name} does not link against libslurmfull: {e}"));
        // SAFETY: `const uint32_t plugin_version`, read the way plugin.c does.
        let version = unsafe { *address::<u32>(&plugin, "plugin_version") };
        assert_eq!(
            version,
            slurm_sys::SLURM_VERSION_NUMBER,
            "{name}: plugin_version {version:#x}, the headers say {:#x}",
            slurm_sys::SLURM_VERSION_NUMBER
        );
        // Slurm finds the plugin by type: "acct_gather_energy/x" is acct_gather_energy_x.so
        let kind = name.trim_start_matches("acct_gather_energy_");
        assert_eq!(
            c_string(&plugin, "plugin_type"),
            format!("acct_gather_energy/{kind}")
        );
        assert!(!c_string(&plugin, "plugin_name").is_empty(), "{name}");
        drop(plugin);
        // and Slurm's loader, which compares plugin_version with its own release
        let operations = &FUNCTIONS[2..];
        assert_eq!(
            loader.accepts(&path, operations),
            Ok(operations.len()),
            "{name}: refused by Slurm's plugin_load_from_file (its error is logged above)"
        );
    }
    drop(slurm);
}

/// Statically, with names: each symbol a plugin needs is exported by libslurmfull or by
/// one of the system libraries it depends on, and it depends on no other library.
#[test]
fn every_plugin_needs_only_libslurmfull_and_libc() {
    let slurm_data = read(&libslurmfull());
    let slurm = object::File::parse(&*slurm_data).expect("libslurmfull is ELF");
    let slurm_exports: BTreeSet<String> = exports(&slurm).into_iter().map(|(n, _)| n).collect();
    assert!(slurm_exports.contains("slurm_conf"), "not libslurmfull?");
    for (name, path) in plugins() {
        let data = read(&path);
        let file = object::File::parse(&*data).expect("ELF");
        let mut provided = slurm_exports.clone();
        for (soname, library) in dependencies(&path) {
            assert!(
                SYSTEM_LIBRARIES.iter().any(|s| soname.starts_with(s)),
                "{name} depends on {soname}: a plugin may need only libslurmfull and libc's family"
            );
            if let Some(library) = library {
                let bytes = read(&library);
                let lib = object::File::parse(&*bytes).expect("ELF");
                provided.extend(exports(&lib).into_iter().map(|(n, _)| n));
            }
        }
        let missing: Vec<String> = imports(&file).difference(&provided).cloned().collect();
        assert!(
            missing.is_empty(),
            "{name} needs symbols that neither {} nor libc's family exports: {missing:?}",
            libslurmfull().display()
        );
    }
}
