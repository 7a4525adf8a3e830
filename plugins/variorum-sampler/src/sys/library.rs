//! Variorum's C API, found by symbol in each release: loading the library, telling its
//! generations apart, and calling its power function. All the sampler's calls into
//! Variorum (and the `unsafe` they need) are here.

use std::ffi::{CStr, c_char, c_int, c_void};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW, Symbol};

/// jansson's `JSON_COMPACT` flag for `json_dumps` (jansson.h: `#define JSON_COMPACT 0x20`).
const JSON_COMPACT: usize = 0x20;

/// jansson's `json_t`, only ever handled by pointer.
#[repr(C)]
pub struct JsonT {
    _opaque: [u8; 0],
}

type StringApi = unsafe extern "C" fn(*mut *mut c_char) -> c_int;
type JanssonApi = unsafe extern "C" fn(*mut JsonT) -> c_int;
type VersionFn = unsafe extern "C" fn() -> *const c_char;
type JsonObjectFn = unsafe extern "C" fn() -> *mut JsonT;
type JsonDumpsFn = unsafe extern "C" fn(*const JsonT, usize) -> *mut c_char;
type JsonDeleteFn = unsafe extern "C" fn(*mut JsonT);

/// The power JSON function of each Variorum generation.
pub enum Api {
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

    /// The function and its signature, for the start-up report.
    pub fn generation(&self) -> &'static str {
        match self {
            Api::Power(_) => "variorum_get_power_json",
            Api::NodeString(_) => "variorum_get_node_power_json(char **)",
            Api::NodeJansson { .. } => "variorum_get_node_power_json(json_t *)",
        }
    }

    /// One call, returning Variorum's JSON text.
    pub fn call(&self) -> Result<String, String> {
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

/// Loads the library for good: it is never unloaded, because Variorum may start threads
/// (IBM's energy sampler) that would run into unmapped code after a dlclose.
pub fn load(path: &str) -> Result<&'static Library, String> {
    // RTLD_NOW: an unresolved symbol fails here, not in the middle of a call.
    // SAFETY: running the library's initialisers is the point; whatever they do
    // (print, exit, crash) stays in this process.
    let lib =
        unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| e.to_string())?;
    Ok(Box::leak(Box::new(lib)))
}

/// # Safety
/// `T` must be the symbol's real type.
unsafe fn lookup<T: Copy>(lib: &'static Library, name: &str) -> Option<T> {
    // SAFETY: the caller names the right type; the library is never unloaded (`load`).
    let symbol: Symbol<T> = unsafe { lib.get(name.as_bytes()) }.ok()?;
    Some(*symbol)
}

/// Finds the power function by symbol, and what `variorum_get_current_version` says if
/// the library has it: the runtime version string cannot be trusted (0.8.0 reports
/// "0.5.0"), and 0.4–0.7 share one name with two signatures.
pub fn detect(lib: &'static Library) -> Result<(Api, Option<String>), String> {
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
