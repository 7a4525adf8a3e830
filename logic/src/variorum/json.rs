//! Node power from the JSON of every Variorum release.
//!
//! Variorum's power JSON changed shape three times, and its platform ports disagree even
//! within one release, so the parser accepts the union of what any release emits:
//!
//! | release | top level | node key | per-socket keys |
//! |---|---|---|---|
//! | 0.4.0 | flat, `"hostname"` | `power_node` | `power_{cpu,mem,gpu}_socket_<n>` |
//! | 0.4.1 – 0.7.0 | flat, `"host"` | `power_node_watts` | `power_{cpu,mem,gpu}_watts_socket_<n>` |
//! | 0.8.0 (and dev) | `{"<hostname>": {...}}` | `power_node_watts` (may be absent) | `socket_<n>` or `Socket_<n>` objects: `power_{cpu,mem,io}_watts`, `power_gpu_watts` (number or `{"GPU_<k>": W}`), dev `power_apu_watts` |
//!
//! Rules, all from what the releases actually do:
//! - `-1` (any negative value) means "cannot be measured on this platform", and so does an
//!   absent key; neither is 0 W.
//! - Node power is `power_node_watts` when present and > 0; otherwise the sum of every
//!   per-socket component (ARM Neoverse N1 and GPU-only builds emit no node key; Intel's
//!   first call after loading reports 0 W everywhere).
//! - A sample without any usable power is an error, never 0 W: Variorum 0.8.0 returns
//!   success with only `{"<host>":{"timestamp":...}}` on CPUs it has no power code for.
//! - Unknown keys are ignored: later releases add keys (utilization, `num_gpus_per_socket`)
//!   and the dev branch's docs and code disagree on names.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Socket indexes above this are not taken for sockets: a key like `socket_4000000000`
/// would otherwise make the breakdown allocate gigabytes.
pub const MAX_SOCKETS: usize = 1024;

/// Why Variorum's JSON gives no node power.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON (the parser's message).
    #[error("not JSON: {0}")]
    Syntax(String),
    /// A value that should be an object is not (what it is).
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// More than one host in one sample (their names).
    #[error("the sample has several hosts ({0}); expected one")]
    SeveralHosts(String),
    /// No power value at all.
    #[error("no power values in the sample (Variorum may have no power support for this platform)")]
    NoPower,
    /// Every power value is 0 W.
    #[error("every power value in the sample is 0 W")]
    ZeroPower,
}

/// Which generation of Variorum's JSON a sample was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// 0.4.0: flat, keys without `_watts`.
    Flat040,
    /// 0.4.1 to 0.7.0: flat, keys with `_watts`.
    Flat,
    /// 0.8.0 and later: keyed by hostname, one object per socket.
    Nested,
}

/// Where `node_watts` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSource {
    /// Variorum's own node figure (`power_node_watts` / `power_node`).
    Reported,
    /// The sum of the per-socket components, for lack of a usable node figure.
    SumOfComponents,
}

/// One GPU (or APU) of a per-device object, e.g. `"GPU_3": 41.5`.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePower {
    /// The device as Variorum names it.
    pub name: String,
    /// Its power, in watts.
    pub watts: f64,
}

/// What one socket reported; `None` is "absent or not measurable here".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SocketPower {
    /// The CPU's power, in watts.
    pub cpu_watts: Option<f64>,
    /// The memory's power, in watts.
    pub mem_watts: Option<f64>,
    /// Total over the socket's GPUs when Variorum gave a per-GPU object.
    pub gpu_watts: Option<f64>,
    /// ARM Neoverse N1 only (0.8.0 drops it through a bug; kept for later releases).
    pub io_watts: Option<f64>,
    /// AMD MI300A APUs (Variorum dev after 0.8.0).
    pub apu_watts: Option<f64>,
    /// The per-GPU values behind `gpu_watts`, when given per GPU.
    pub gpus: Vec<DevicePower>,
    /// The per-APU values behind `apu_watts`, when given per APU.
    pub apus: Vec<DevicePower>,
}

impl SocketPower {
    /// Sum of the measurable components; `None` when none is.
    pub fn total(&self) -> Option<f64> {
        let parts = [
            self.cpu_watts,
            self.mem_watts,
            self.gpu_watts,
            self.io_watts,
            self.apu_watts,
        ];
        parts
            .into_iter()
            .flatten()
            .fold(None, |acc, w| Some(acc.unwrap_or(0.0) + w))
    }
}

/// One parsed power sample.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePower {
    /// The node's power: > 0 and finite.
    pub node_watts: f64,
    /// Where `node_watts` comes from.
    pub source: NodeSource,
    /// Variorum's node figure as given, when it was a number (also when unusable, e.g. 0).
    pub reported_node_watts: Option<f64>,
    /// Indexed by socket number; sockets Variorum did not mention are all `None`.
    pub sockets: Vec<SocketPower>,
    /// The host Variorum names, if it does.
    pub host: Option<String>,
    /// Microseconds since the epoch, as Variorum stamped the sample.
    pub timestamp_us: Option<u64>,
    /// The JSON layout the sample came in.
    pub schema: Schema,
}

/// Parses one power sample as any Variorum release writes it.
pub fn parse(text: &str) -> Result<NodePower, JsonError> {
    let value: Value = serde_json::from_str(text).map_err(|e| JsonError::Syntax(e.to_string()))?;
    parse_value(&value)
}

/// As [`parse`], for an already decoded document.
pub fn parse_value(value: &Value) -> Result<NodePower, JsonError> {
    let top = value
        .as_object()
        .ok_or_else(|| JsonError::NotAnObject(kind(value)))?;
    // Flat documents (<= 0.7) carry their keys at the top; 0.8 nests everything under the
    // hostname. A top level that has any key of a flat document is read as flat, so a
    // flat document whose GPU key happened to be an object is still not taken for a host.
    if looks_flat(top) {
        return node_from(top, None, false);
    }
    let hosts: Vec<(&String, &Map<String, Value>)> = top
        .iter()
        .filter_map(|(k, v)| v.as_object().map(|o| (k, o)))
        .collect();
    match hosts.as_slice() {
        [] => Err(JsonError::NoPower),
        [(host, node)] => node_from(node, Some(host.as_str()), true),
        several => Err(JsonError::SeveralHosts(
            several
                .iter()
                .take(4)
                .map(|(h, _)| h.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn looks_flat(top: &Map<String, Value>) -> bool {
    top.iter().any(|(k, v)| {
        let k = k.to_ascii_lowercase();
        (k == "timestamp" && v.is_number())
            || (k.starts_with("power_") && !v.is_object())
            || ((k == "host" || k == "hostname") && v.is_string())
    })
}

/// A usable measurement: a finite number >= 0. Negative numbers are Variorum's
/// "not measurable" marker (-1.0); other types are ignored.
fn watts(v: &Value) -> Option<f64> {
    v.as_f64().filter(|w| w.is_finite() && *w >= 0.0)
}

/// A component that is either one number or an object of per-device numbers
/// (`power_gpu_watts`: a bare number on ARM Juno, `{"GPU_0": W, ...}` on NVIDIA/AMD).
fn device_watts(v: &Value) -> (Option<f64>, Vec<DevicePower>) {
    match v {
        Value::Object(devices) => {
            let list: Vec<DevicePower> = devices
                .iter()
                .filter_map(|(name, v)| {
                    watts(v).map(|watts| DevicePower {
                        name: name.clone(),
                        watts,
                    })
                })
                .collect();
            // finite values can still overflow when summed: no total then
            let total = Some(list.iter().map(|d| d.watts).sum::<f64>())
                .filter(|w| !list.is_empty() && w.is_finite());
            (total, list)
        }
        other => (watts(other), Vec::new()),
    }
}

/// `socket_<n>` (any case) to `n`.
fn socket_index(key: &str) -> Option<usize> {
    let lower = key.to_ascii_lowercase();
    let digits = lower.strip_prefix("socket_")?;
    index(digits)
}

fn index(digits: &str) -> Option<usize> {
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n: &usize| n < MAX_SOCKETS)
}

#[derive(Clone, Copy)]
enum Component {
    Cpu,
    Mem,
    Gpu,
    Io,
    Apu,
}

impl Component {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "cpu" => Some(Self::Cpu),
            "mem" => Some(Self::Mem),
            "gpu" => Some(Self::Gpu),
            "io" => Some(Self::Io),
            "apu" => Some(Self::Apu),
            _ => None,
        }
    }
}

/// A flat per-socket key: `power_<c>_watts_socket_<n>` (0.4.1+) or `power_<c>_socket_<n>`
/// (0.4.0). The bool is true for the 0.4.0 form.
fn flat_socket_key(key: &str) -> Option<(Component, usize, bool)> {
    let lower = key.to_ascii_lowercase();
    let rest = lower.strip_prefix("power_")?;
    let (component, rest) = rest.split_once('_')?;
    let component = Component::from_name(component)?;
    if let Some(n) = rest.strip_prefix("watts_socket_") {
        return Some((component, index(n)?, false));
    }
    let n = rest.strip_prefix("socket_")?;
    Some((component, index(n)?, true))
}

/// Sets a component unless it is already set: when a port emits both `socket_0` and
/// `Socket_0` (0.8.0 Neoverse N1 does), the first usable value wins.
fn set(socket: &mut SocketPower, component: Component, value: &Value) {
    let (w, devices) = match component {
        Component::Gpu | Component::Apu => device_watts(value),
        _ => (watts(value), Vec::new()),
    };
    let Some(w) = w else { return };
    let (slot, list) = match component {
        Component::Cpu => (&mut socket.cpu_watts, None),
        Component::Mem => (&mut socket.mem_watts, None),
        Component::Io => (&mut socket.io_watts, None),
        Component::Gpu => (&mut socket.gpu_watts, Some(&mut socket.gpus)),
        Component::Apu => (&mut socket.apu_watts, Some(&mut socket.apus)),
    };
    if slot.is_none() {
        *slot = Some(w);
        if let Some(list) = list {
            *list = devices;
        }
    }
}

fn node_from(
    node: &Map<String, Value>,
    host_key: Option<&str>,
    nested: bool,
) -> Result<NodePower, JsonError> {
    let mut sockets: BTreeMap<usize, SocketPower> = BTreeMap::new();
    let mut reported: Option<f64> = None;
    let mut host = host_key.map(str::to_string);
    let mut timestamp_us = None;
    let mut old_keys = false;
    let mut socket_objects = false;

    for (key, value) in node {
        let lower = key.to_ascii_lowercase();
        match lower.as_str() {
            "power_node_watts" | "power_node" => {
                old_keys |= lower == "power_node";
                // -1 stays "absent"; 0 is kept for the breakdown but is not usable
                reported = reported.or(value.as_f64().filter(|w| w.is_finite() && *w >= 0.0));
            }
            "host" | "hostname" => {
                if host.is_none() {
                    host = value.as_str().map(str::to_string);
                }
            }
            "timestamp" => timestamp_us = value.as_u64(),
            _ => {
                if let Some(n) = socket_index(key) {
                    if let Some(fields) = value.as_object() {
                        socket_objects = true;
                        let socket = sockets.entry(n).or_default();
                        for (field, v) in fields {
                            let field = field.to_ascii_lowercase();
                            let component = field
                                .strip_prefix("power_")
                                .and_then(|f| f.strip_suffix("_watts"))
                                .and_then(Component::from_name);
                            if let Some(c) = component {
                                set(socket, c, v);
                            }
                        }
                    }
                } else if let Some((c, n, old)) = flat_socket_key(key) {
                    old_keys |= old;
                    set(sockets.entry(n).or_default(), c, value);
                }
            }
        }
    }

    let schema = if nested || socket_objects {
        Schema::Nested
    } else if old_keys {
        Schema::Flat040
    } else {
        Schema::Flat
    };
    let components = sockets
        .values()
        .filter_map(SocketPower::total)
        .fold(None, |acc: Option<f64>, w| Some(acc.unwrap_or(0.0) + w));
    let (node_watts, source) = match (reported, components) {
        (Some(w), _) if w > 0.0 => (w, NodeSource::Reported),
        (_, Some(sum)) if sum > 0.0 => (sum, NodeSource::SumOfComponents),
        (None, None) => return Err(JsonError::NoPower),
        _ => return Err(JsonError::ZeroPower),
    };
    if !node_watts.is_finite() {
        // finite parts can still overflow when summed
        return Err(JsonError::NoPower);
    }

    let len = sockets.keys().next_back().map_or(0, |n| n + 1);
    let mut list = vec![SocketPower::default(); len];
    for (n, s) in sockets {
        list[n] = s;
    }
    Ok(NodePower {
        node_watts,
        source,
        reported_node_watts: reported,
        sockets: list,
        host,
        timestamp_us,
        schema,
    })
}

#[cfg(test)]
mod tests;
