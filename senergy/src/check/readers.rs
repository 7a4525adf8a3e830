//! The independent readers `senergy check --compare` sets beside slurmd's figure: each reads
//! the node's hardware through another path than the plugin's. RAPL through the kernel's
//! perf PMU (not powercap, not the MSR files); the BMC through `ipmitool` or FreeIPMI's
//! `ipmi-dcmi`; GPUs through `nvidia-smi` and `amd-smi`; a Redfish BMC by its own request;
//! a Cray node controller's pm_counters files. Each says what it covers; one that is not
//! there, or may not be read, says so ([`Unavailable`]) and is never an error of the check.
//! The parsers take the tools' real output formats and are unit-tested here.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use slurm_energy_logic::config::{KeyValues, file_value};
use slurm_energy_logic::ipmi::{IpmiConfig, Target};
use slurm_energy_logic::pm_counters::{PmCountersConfig, parse_value};
use slurm_energy_logic::power::PowerSensor;
use slurm_energy_logic::redfish::Bmc as RedfishBmc;
use slurm_energy_logic::source::Source;

use super::perf::Counter;

/// Where the kernel lists the RAPL perf PMU.
pub const PERF_POWER_PMU: &str = "/sys/bus/event_source/devices/power";
/// How long one run of a tool may take before it counts as hung.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a reader gives nothing: the hardware or tool is not there, reading it is not
/// allowed, or it answered something unusable.
#[derive(Debug, Clone, PartialEq)]
pub enum Unavailable {
    Absent(String),
    Denied(String),
    Failed(String),
}

impl Unavailable {
    /// As the JSON's `status` names it.
    pub fn status(&self) -> &'static str {
        match self {
            Unavailable::Absent(_) => "absent",
            Unavailable::Denied(_) => "no permission",
            Unavailable::Failed(_) => "failed",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Unavailable::Absent(d) | Unavailable::Denied(d) | Unavailable::Failed(d) => d,
        }
    }
}

/// What one read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// A counter's joules: the energy of a window is the difference of two reads.
    Energy,
    /// Watts now: the energy of a window is its samples integrated.
    Power,
}

/// What the hardware a reader reads covers, which decides what it can be set against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The CPU packages and their DRAM (RAPL).
    Packages,
    /// The whole node at its power supplies, as its BMC or node controller sees it.
    WholeNode,
    /// GPU boards.
    Gpus,
}

/// An open reader (its name is its [`Slot`]'s: the BMC's is `bmc` whichever tool reads it,
/// and [`super::compare::pairing`] names readers so).
pub trait Reader {
    /// Through what, for the report (the BMC's: which tool).
    fn path(&self) -> String;
    fn scope(&self) -> Scope;
    fn quantity(&self) -> Quantity;
    /// Joules ([`Quantity::Energy`]) or watts ([`Quantity::Power`]).
    fn read(&mut self) -> Result<f64, Unavailable>;
    /// When the hardware took the value the last read returned, where it says so (a node
    /// controller's scan time): the value is of then, not of the read, which a loaded node
    /// may make late by a scan or more.
    fn stamped(&self) -> Option<std::time::SystemTime> {
        None
    }
}

/// A reader that could be opened (it has answered once), or why not.
pub struct Slot {
    /// `rapl-perf`, `bmc`, `redfish`, `pm_counters`, `nvidia-smi`, `amd-smi`.
    pub name: &'static str,
    pub scope: Scope,
    pub reader: Result<Box<dyn Reader>, Unavailable>,
}

/// What the readers are opened from.
pub struct NodeConf<'a> {
    pub node: &'a str,
    /// acct_gather.conf's text (empty where there is none).
    pub acct_gather: &'a str,
    /// The perf PMU's sysfs directory ([`PERF_POWER_PMU`]).
    pub perf_pmu: &'a Path,
    /// Whether RAPL's DRAM domains count (what the plugin measures says so).
    pub rapl_dram: bool,
    /// Whether the plugins include rust_redfish (only then is a Redfish BMC configured).
    pub redfish: bool,
}

/// Every reader this node may have, each opened and read once.
pub fn open_all(site: &NodeConf) -> Vec<Slot> {
    let mut slots = vec![Slot {
        name: "rapl-perf",
        scope: Scope::Packages,
        reader: RaplPerf::open(site.perf_pmu, site.rapl_dram).map(boxed),
    }];
    slots.push(bmc_slot(site));
    if site.redfish {
        slots.push(Slot {
            name: "redfish",
            scope: Scope::WholeNode,
            reader: Redfish::open(site).map(boxed),
        });
    }
    let pm_dir = configured::<PmCountersSource>(site)
        .map(|c| c.dir)
        .unwrap_or_else(|_| PmCountersConfig::default().dir);
    slots.push(Slot {
        name: "pm_counters",
        scope: Scope::WholeNode,
        reader: PmCounters::open(pm_dir).map(boxed),
    });
    for tool in [GpuTool::Nvidia, GpuTool::Amd] {
        slots.push(Slot {
            name: tool.name(),
            scope: Scope::Gpus,
            reader: tool.open().map(boxed),
        });
    }
    slots
}

fn boxed<R: Reader + 'static>(r: R) -> Box<dyn Reader> {
    Box::new(r)
}

/// The BMC through ipmitool, else FreeIPMI's ipmi-dcmi; one slot, the BMC is one.
fn bmc_slot(site: &NodeConf) -> Slot {
    let ipmi = configured::<slurm_energy_logic::ipmi::Bmc>(site).unwrap_or_default();
    let first = BmcTool::open(BmcTool::Ipmitool, &ipmi);
    let reader = match first {
        Ok(r) => Ok(boxed(r)),
        Err(why) => match BmcTool::open(BmcTool::IpmiDcmi, &ipmi) {
            Ok(r) => Ok(boxed(r)),
            // the first tool's reason, unless it is only missing
            Err(second) => Err(match (&why, &second) {
                (Unavailable::Absent(a), Unavailable::Absent(b)) => {
                    Unavailable::Absent(format!("{a}; {b}"))
                }
                (Unavailable::Absent(_), _) => second,
                _ => why,
            }),
        },
    };
    Slot {
        name: "bmc",
        scope: Scope::WholeNode,
        reader,
    }
}

/// A source's configuration from acct_gather.conf, as the plugin reads it, for this node.
fn configured<S: Source>(site: &NodeConf) -> Result<S::Config, String> {
    let mut values = KeyValues::new();
    for key in S::KEYS {
        if let Some(v) = file_value(site.acct_gather, key) {
            values.set(key, v);
        }
    }
    let config = S::parse_config(&values).map_err(|e| e.to_string())?;
    Ok(S::for_node(&config, site.node))
}

/// Where slurmd has no reading from `plugin_type`: its source probed directly, as the
/// plugin opens it (RAPL, pm_counters) or through the independent readers of its hardware
/// (BMC, Redfish, GPUs); what was found, or why nothing.
pub fn probe(plugin_type: &str, site: &NodeConf) -> Result<String, String> {
    use slurm_energy_logic::source::EnergyReader;
    fn open<S: Source>(site: &NodeConf) -> Result<String, String> {
        let config = configured::<S>(site)?;
        S::open(&config).map(|r| r.describe())
    }
    let name = plugin_type.rsplit('/').next().unwrap_or(plugin_type);
    match name {
        "rust_rapl" => open::<slurm_energy_logic::rapl::Rapl>(site),
        "rust_pm_counters" => open::<PmCountersSource>(site),
        _ => {
            let slots = match name {
                "rust_ipmi" => vec![bmc_slot(site)],
                "rust_redfish" => vec![Slot {
                    name: "redfish",
                    scope: Scope::WholeNode,
                    reader: Redfish::open(site).map(boxed),
                }],
                "rust_gpu" => [GpuTool::Nvidia, GpuTool::Amd]
                    .into_iter()
                    .map(|t| Slot {
                        name: t.name(),
                        scope: Scope::Gpus,
                        reader: t.open().map(boxed),
                    })
                    .collect(),
                "rust_variorum" => vec![Slot {
                    name: "rapl-perf",
                    scope: Scope::Packages,
                    reader: RaplPerf::open(site.perf_pmu, site.rapl_dram).map(boxed),
                }],
                _ => return Err(format!("{plugin_type}: no probe")),
            };
            let (found, missing): (Vec<_>, Vec<_>) =
                slots.into_iter().partition(|s| s.reader.is_ok());
            if let Some(slot) = found.first()
                && let Ok(reader) = &slot.reader
            {
                return Ok(format!("{} answers: {}", slot.name, reader.path()));
            }
            Err(missing
                .iter()
                .filter_map(|s| s.reader.as_ref().err())
                .map(|u| format!("{} ({})", u.detail(), u.status()))
                .collect::<Vec<_>>()
                .join("; "))
        }
    }
}

// ---- RAPL through perf events ----

/// The RAPL perf PMU as sysfs lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfPmu {
    pub pmu_type: u32,
    /// One CPU per package (the PMU's `cpumask`).
    pub cpus: Vec<u32>,
    pub events: Vec<PerfEvent>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PerfEvent {
    /// `energy-pkg`, `energy-ram`.
    pub name: &'static str,
    pub config: u64,
    /// Joules per count.
    pub scale: f64,
}

/// The PMU in `dir`: its type, CPUs and the events `energy-pkg` (required) and, with
/// `dram`, `energy-ram` where the machine has it.
pub fn perf_pmu(dir: &Path, dram: bool) -> Result<PerfPmu, Unavailable> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string());
    let pmu_type = match read("type") {
        Ok(t) => t.parse().map_err(|_| {
            Unavailable::Failed(format!("{}/type is {t:?}, not a number", dir.display()))
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Unavailable::Absent(format!(
                "no RAPL perf PMU at {} (not an Intel or AMD CPU with RAPL, or a kernel \
                 without it)",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(Unavailable::Failed(format!("{}/type: {e}", dir.display())));
        }
    };
    let cpus = read("cpumask")
        .ok()
        .and_then(|m| cpu_list(&m))
        .ok_or_else(|| Unavailable::Failed(format!("{}/cpumask is unreadable", dir.display())))?;
    let mut events = Vec::new();
    let names: &[&'static str] = if dram {
        &["energy-pkg", "energy-ram"]
    } else {
        &["energy-pkg"]
    };
    for &name in names {
        let Ok(spec) = read(&format!("events/{name}")) else {
            if name == "energy-pkg" {
                return Err(Unavailable::Absent(format!(
                    "{} has no energy-pkg event",
                    dir.display()
                )));
            }
            continue;
        };
        let bad =
            |what: &str| Unavailable::Failed(format!("{}/events/{name}{what}", dir.display()));
        let config = event_config(&spec).ok_or_else(|| bad(&format!(" is {spec:?}")))?;
        let scale: f64 = read(&format!("events/{name}.scale"))
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .ok_or_else(|| bad(".scale is unreadable"))?;
        let unit = read(&format!("events/{name}.unit")).unwrap_or_default();
        if unit != "Joules" {
            return Err(bad(&format!(".unit is {unit:?}, not Joules")));
        }
        events.push(PerfEvent {
            name,
            config,
            scale,
        });
    }
    Ok(PerfPmu {
        pmu_type,
        cpus,
        events,
    })
}

/// `event=0x02` (the power PMU's events name no other field).
fn event_config(spec: &str) -> Option<u64> {
    let value = spec
        .split(',')
        .find_map(|t| t.trim().strip_prefix("event="))?;
    match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    }
}

/// A sysfs CPU list: `0`, `0,36`, `0-1,4`.
fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

struct RaplPerf {
    counters: Vec<(Counter, f64)>,
    events: String,
}

impl RaplPerf {
    fn open(dir: &Path, dram: bool) -> Result<RaplPerf, Unavailable> {
        let pmu = perf_pmu(dir, dram)?;
        let mut counters = Vec::new();
        for event in &pmu.events {
            for &cpu in &pmu.cpus {
                let counter = Counter::open(pmu.pmu_type, event.config, cpu).map_err(|e| {
                    let what = format!(
                        "perf_event_open({}/{}/, cpu {cpu}): {e}",
                        "power", event.name
                    );
                    match e.raw_os_error() {
                        Some(libc::EACCES) | Some(libc::EPERM) => Unavailable::Denied(format!(
                            "{what}: system-wide perf events need root or CAP_PERFMON \
                             (or kernel.perf_event_paranoid <= 0)"
                        )),
                        _ => Unavailable::Failed(what),
                    }
                })?;
                counters.push((counter, event.scale));
            }
        }
        let events = pmu
            .events
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ");
        let mut reader = RaplPerf {
            counters,
            events: format!("{events} on CPUs {:?}", pmu.cpus),
        };
        reader.read()?;
        Ok(reader)
    }
}

impl Reader for RaplPerf {
    fn path(&self) -> String {
        format!("perf events power/{}", self.events)
    }
    fn scope(&self) -> Scope {
        Scope::Packages
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let mut joules = 0.0;
        for (counter, scale) in &mut self.counters {
            let count = counter
                .read()
                .map_err(|e| Unavailable::Failed(format!("reading a perf counter: {e}")))?;
            joules += count as f64 * *scale;
        }
        Ok(joules)
    }
}

// ---- tools ----

/// Runs `program args` (with `envs`), at most [`TOOL_TIMEOUT`]; its standard output.
fn run_tool(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<String, Unavailable> {
    let shown = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                Unavailable::Absent(format!("{program} is not installed (not on PATH)"))
            }
            io::ErrorKind::PermissionDenied => {
                Unavailable::Denied(format!("cannot run {program}: {e}"))
            }
            _ => Unavailable::Failed(format!("cannot run {program}: {e}")),
        })?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TOOL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Unavailable::Failed(format!(
                    "{shown} answered nothing in {} s",
                    TOOL_TIMEOUT.as_secs()
                )));
            }
            Err(e) => return Err(Unavailable::Failed(format!("{shown}: {e}"))),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    if status.success() {
        return Ok(out);
    }
    let said = err
        .lines()
        .chain(out.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    let lower = said.to_ascii_lowercase();
    let what = format!("{shown}: {status}: {said}");
    Err(
        if lower.contains("permission denied")
            || lower.contains("insufficient permissions")
            || lower.contains("not root")
        {
            Unavailable::Denied(what)
        } else if lower.contains("could not open device")
            || lower.contains("no such file")
            || lower.contains("couldn't communicate with the nvidia driver")
            || lower.contains("no devices were found")
            || lower.contains("driver not initialized")
        {
            Unavailable::Absent(what)
        } else {
            Unavailable::Failed(what)
        },
    )
}

/// The first number of `text` (`196 Watts`, `: 176 Watts`).
fn first_number(text: &str) -> Option<f64> {
    text.split(|c: char| c.is_whitespace() || c == ':')
        .find_map(|w| w.parse::<f64>().ok())
        .filter(|w| w.is_finite() && *w >= 0.0)
}

/// `ipmitool dcmi power reading`: the `Instantaneous power reading:  196 Watts` line, unless
/// `Power reading state is: deactivated`.
pub fn parse_ipmitool_power(text: &str) -> Result<f64, String> {
    if text
        .lines()
        .any(|l| l.contains("Power reading state is") && l.contains("deactivated"))
    {
        return Err("the BMC's power reading is deactivated".into());
    }
    text.lines()
        .find_map(|l| first_number(l.trim().strip_prefix("Instantaneous power reading")?))
        .ok_or_else(|| "no \"Instantaneous power reading\" in its answer".into())
}

/// FreeIPMI `ipmi-dcmi --get-system-power-statistics`: `Current Power : 176 Watts`, unless
/// `Power Measurement : Not Available` (or anything but `Active`).
pub fn parse_ipmi_dcmi_power(text: &str) -> Result<f64, String> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    if let Some(state) = field("Power Measurement")
        && state != "Active"
    {
        return Err(format!("the BMC's power measurement is {state:?}"));
    }
    field("Current Power")
        .as_deref()
        .and_then(first_number)
        .ok_or_else(|| "no \"Current Power\" in its answer".into())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum BmcTool {
    Ipmitool,
    IpmiDcmi,
}

struct BmcReader {
    tool: BmcTool,
    args: Vec<String>,
    password: Option<String>,
}

impl BmcTool {
    fn open(self, config: &IpmiConfig) -> Result<BmcReader, Unavailable> {
        let mut args: Vec<String> = Vec::new();
        let mut password = None;
        match (&config.target, self) {
            (Target::Lan { host, port }, BmcTool::Ipmitool) => {
                args.extend(["-I", "lanplus", "-C", "3", "-H"].map(String::from));
                args.extend([host.clone(), "-p".into(), port.to_string()]);
                if let Some(user) = &config.username {
                    args.extend(["-U".into(), user.clone()]);
                }
                // -E: the password from IPMI_PASSWORD, not on a command line ps shows
                args.push("-E".into());
                password = Some(config.password.expose().to_string());
            }
            (Target::Lan { .. }, BmcTool::IpmiDcmi) => {
                // FreeIPMI takes a password only on its command line or in its own
                // configuration: not passed here
                return Err(Unavailable::Absent(
                    "ipmi-dcmi: an out-of-band BMC (EnergyIPMIHost) is read through ipmitool only"
                        .into(),
                ));
            }
            (Target::Device(_), _) => {}
        }
        match self {
            BmcTool::Ipmitool => args.extend(["dcmi", "power", "reading"].map(String::from)),
            BmcTool::IpmiDcmi => args.push("--get-system-power-statistics".into()),
        }
        let mut reader = BmcReader {
            tool: self,
            args,
            password,
        };
        reader.read()?;
        Ok(reader)
    }

    fn program(self) -> &'static str {
        match self {
            BmcTool::Ipmitool => "ipmitool",
            BmcTool::IpmiDcmi => "ipmi-dcmi",
        }
    }
}

impl Reader for BmcReader {
    fn path(&self) -> String {
        match self.tool {
            BmcTool::Ipmitool => "ipmitool dcmi power reading (DCMI, the BMC's power)".into(),
            BmcTool::IpmiDcmi => {
                "ipmi-dcmi --get-system-power-statistics (DCMI, the BMC's power)".into()
            }
        }
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        Quantity::Power
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let envs: Vec<(&str, &str)> = self
            .password
            .as_deref()
            .map(|p| ("IPMI_PASSWORD", p))
            .into_iter()
            .collect();
        let out = run_tool(self.tool.program(), &args, &envs)?;
        let parsed = match self.tool {
            BmcTool::Ipmitool => parse_ipmitool_power(&out),
            BmcTool::IpmiDcmi => parse_ipmi_dcmi_power(&out),
        };
        parsed.map_err(|why| Unavailable::Failed(format!("{}: {why}", self.tool.program())))
    }
}

// ---- GPUs ----

/// `nvidia-smi --query-gpu=index,total_energy_consumption --format=csv,noheader,nounits`:
/// one `INDEX, MILLIJOULES` line per GPU; joules summed over them. A GPU without the counter
/// (`[N/A]`, `[Not Supported]`: before Volta) makes the whole unusable.
pub fn parse_nvidia_smi_energy(text: &str) -> Result<(usize, f64), String> {
    let mut gpus = 0;
    let mut joules = 0.0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (index, mj) = line
            .split_once(',')
            .ok_or_else(|| format!("{line:?} is not INDEX, ENERGY"))?;
        let mj: f64 = mj
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                format!(
                    "GPU {} reports no energy counter ({}: NVML counts energy from Volta on)",
                    index.trim(),
                    mj.trim()
                )
            })?;
        gpus += 1;
        joules += mj / 1000.0;
    }
    if gpus == 0 {
        return Err("it listed no GPU".into());
    }
    Ok((gpus, joules))
}

/// `amd-smi metric --energy --json`: a list of `{"gpu": N, "energy":
/// {"total_energy_consumption": {"value": J, "unit": "J"}}}` (amd-smi's JSON since ROCm 6.1;
/// before, a bare number of joules); joules summed over the GPUs. `"N/A"` (no counter, or
/// a VM guest) makes the whole unusable.
pub fn parse_amd_smi_energy(text: &str) -> Result<(usize, f64), String> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| format!("its answer is not JSON: {e}"))?;
    let list = doc
        .as_array()
        .or_else(|| doc.get("gpu_data").and_then(Value::as_array))
        .ok_or("its answer is not a list of GPUs")?;
    let mut joules = 0.0;
    for gpu in list {
        let index = gpu.get("gpu").map(Value::to_string).unwrap_or("?".into());
        let energy = gpu
            .get("energy")
            .and_then(|e| e.get("total_energy_consumption"))
            .ok_or_else(|| format!("GPU {index} reports no energy counter"))?;
        let (value, unit) = match energy {
            Value::Object(o) => (
                o.get("value").and_then(Value::as_f64),
                o.get("unit").and_then(Value::as_str).unwrap_or("J"),
            ),
            v => (v.as_f64(), "J"),
        };
        let scale = match unit {
            "J" => 1.0,
            "mJ" => 1e-3,
            "uJ" | "µJ" => 1e-6,
            other => return Err(format!("GPU {index}: energy in unknown unit {other:?}")),
        };
        let value = value
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("GPU {index} reports no energy counter ({energy})"))?;
        joules += value * scale;
    }
    if list.is_empty() {
        return Err("it listed no GPU".into());
    }
    Ok((list.len(), joules))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum GpuTool {
    Nvidia,
    Amd,
}

struct GpuReader {
    tool: GpuTool,
    gpus: usize,
}

impl GpuTool {
    fn name(self) -> &'static str {
        match self {
            GpuTool::Nvidia => "nvidia-smi",
            GpuTool::Amd => "amd-smi",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            GpuTool::Nvidia => &[
                "--query-gpu=index,total_energy_consumption",
                "--format=csv,noheader,nounits",
            ],
            GpuTool::Amd => &["metric", "--energy", "--json"],
        }
    }

    fn read(self) -> Result<(usize, f64), Unavailable> {
        let out = run_tool(self.name(), self.args(), &[])?;
        match self {
            GpuTool::Nvidia => parse_nvidia_smi_energy(&out),
            GpuTool::Amd => parse_amd_smi_energy(&out),
        }
        .map_err(|why| Unavailable::Failed(format!("{}: {why}", self.name())))
    }

    fn open(self) -> Result<GpuReader, Unavailable> {
        let (gpus, _) = self.read()?;
        Ok(GpuReader { tool: self, gpus })
    }
}

impl Reader for GpuReader {
    fn path(&self) -> String {
        format!(
            "{} {} ({} GPU(s), the driver's energy counter)",
            self.tool.name(),
            self.tool.args().join(" "),
            self.gpus
        )
    }
    fn scope(&self) -> Scope {
        Scope::Gpus
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let (gpus, joules) = self.tool.read()?;
        if gpus != self.gpus {
            return Err(Unavailable::Failed(format!(
                "{} listed {} GPU(s), then {gpus}",
                self.tool.name(),
                self.gpus
            )));
        }
        Ok(joules)
    }
}

// ---- pm_counters and Redfish ----

/// The plugin's own source types, for their configuration keys.
type PmCountersSource = slurm_energy_logic::pm_counters::PmCounters;

struct PmCounters {
    file: PathBuf,
    /// The controller's scan time of the last value read.
    scanned: Option<std::time::SystemTime>,
}

impl PmCounters {
    fn open(dir: PathBuf) -> Result<PmCounters, Unavailable> {
        if !dir.is_dir() {
            return Err(Unavailable::Absent(format!(
                "no node controller files at {} (not a Cray EX/XC node)",
                dir.display()
            )));
        }
        let mut reader = PmCounters {
            file: dir.join("energy"),
            scanned: None,
        };
        reader.read()?;
        Ok(reader)
    }
}

impl Reader for PmCounters {
    fn path(&self) -> String {
        format!("{} (the node controller's counter)", self.file.display())
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn stamped(&self) -> Option<std::time::SystemTime> {
        self.scanned
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let text = std::fs::read_to_string(&self.file).map_err(|e| {
            let what = format!("{}: {e}", self.file.display());
            match e.kind() {
                io::ErrorKind::PermissionDenied => Unavailable::Denied(what),
                _ => Unavailable::Failed(what),
            }
        })?;
        let value = parse_value(&text, "J");
        self.scanned = value
            .as_ref()
            .and_then(|v| std::time::UNIX_EPOCH.checked_add(Duration::from_micros(v.at_us)));
        value.map(|v| v.value as f64).ok_or_else(|| {
            Unavailable::Failed(format!(
                "{} holds {:?}, not `JOULES J MICROSECONDS us`",
                self.file.display(),
                text.trim()
            ))
        })
    }
}

struct Redfish {
    bmc: RedfishBmc,
    url: String,
    counts: bool,
}

impl Redfish {
    fn open(site: &NodeConf) -> Result<Redfish, Unavailable> {
        let config = configured::<RedfishBmc>(site).map_err(Unavailable::Failed)?;
        let url = config.url.clone().ok_or_else(|| {
            Unavailable::Absent("acct_gather.conf names no EnergyRedfishUrl".into())
        })?;
        let bmc =
            RedfishBmc::connect(&config).map_err(|e| Unavailable::Failed(format!("{url}: {e}")))?;
        let mut reader = Redfish {
            bmc,
            url,
            counts: false,
        };
        let sample = reader.sample()?;
        reader.counts = sample.energy_j.is_some();
        Ok(reader)
    }

    fn sample(&mut self) -> Result<slurm_energy_logic::power::Sample, Unavailable> {
        self.bmc
            .read_watts()
            .map_err(|e| Unavailable::Failed(format!("{}: {e}", self.url)))
    }
}

impl Reader for Redfish {
    fn path(&self) -> String {
        format!("{} ({})", self.url, self.bmc.describe())
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        if self.counts {
            Quantity::Energy
        } else {
            Quantity::Power
        }
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let sample = self.sample()?;
        match (self.counts, sample.energy_j) {
            (true, Some(j)) => Ok(j),
            (true, None) => Err(Unavailable::Failed(format!(
                "{}: the energy counter went away",
                self.url
            ))),
            (false, _) => Ok(sample.watts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ipmitool dcmi power reading` as ipmitool 1.8.19 prints it (ipmi_dcmi.c).
    pub const IPMITOOL: &str = "
    Instantaneous power reading:                   196 Watts
    Minimum during sampling period:                 12 Watts
    Maximum during sampling period:                370 Watts
    Average power reading over sample period:      180 Watts
    IPMI timestamp:                           Thu Jan  1 00:00:00 2026
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

";

    /// `ipmi-dcmi --get-system-power-statistics` as FreeIPMI 1.6 prints it.
    pub const IPMI_DCMI: &str = "\
Current Power                        : 176 Watts
Minimum Power over sampling duration : 4 watts
Maximum Power over sampling duration : 382 watts
Average Power over sampling duration : 172 watts
Time Stamp                           : 12/04/2025 - 16:37:44
Statistics reporting time period     : 1000 milliseconds
Power Measurement                    : Active
";

    #[test]
    fn the_bmc_tools_answers_are_read() {
        assert_eq!(parse_ipmitool_power(IPMITOOL), Ok(196.0));
        let off = IPMITOOL.replace("activated", "deactivated");
        assert!(parse_ipmitool_power(&off).is_err());
        assert!(parse_ipmitool_power("Error: no DCMI").is_err());
        assert_eq!(parse_ipmi_dcmi_power(IPMI_DCMI), Ok(176.0));
        let off = IPMI_DCMI.replace(": Active", ": Not Available");
        assert!(
            parse_ipmi_dcmi_power(&off)
                .expect_err("inactive")
                .contains("Not Available")
        );
    }

    #[test]
    fn the_gpu_tools_answers_are_read() {
        // nvidia-smi's CSV without header or units: millijoules
        assert_eq!(
            parse_nvidia_smi_energy("0, 123456789\n1, 1000\n"),
            Ok((2, 123_457.789))
        );
        assert!(
            parse_nvidia_smi_energy("0, [N/A]\n")
                .expect_err("no counter")
                .contains("Volta")
        );
        assert!(parse_nvidia_smi_energy("").is_err());
        // amd-smi since ROCm 6.1: value and unit; before: a number of joules
        let amd = r#"[
    {"gpu": 0, "energy": {"total_energy_consumption": {"value": 1234.5, "unit": "J"}}},
    {"gpu": 1, "energy": {"total_energy_consumption": {"value": 10.0, "unit": "J"}}}
]"#;
        assert_eq!(parse_amd_smi_energy(amd), Ok((2, 1244.5)));
        let old = r#"[{"gpu": 0, "energy": {"total_energy_consumption": 77.25}}]"#;
        assert_eq!(parse_amd_smi_energy(old), Ok((1, 77.25)));
        let na = r#"[{"gpu": 0, "energy": "N/A"}]"#;
        assert!(parse_amd_smi_energy(na).is_err());
        assert!(parse_amd_smi_energy("not json").is_err());
    }

    #[test]
    fn the_perf_pmu_is_read_from_sysfs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("power");
        let absent = perf_pmu(&dir, true).expect_err("no PMU");
        assert_eq!(absent.status(), "absent");
        std::fs::create_dir_all(dir.join("events")).expect("mkdir");
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("write");
        write("type", "23\n");
        write("cpumask", "0,36\n");
        write("events/energy-pkg", "event=0x02\n");
        write("events/energy-pkg.scale", "2.3283064365386962890625e-10\n");
        write("events/energy-pkg.unit", "Joules\n");
        // no energy-ram: a package-only machine
        let pmu = perf_pmu(&dir, true).expect("a PMU");
        assert_eq!(pmu.pmu_type, 23);
        assert_eq!(pmu.cpus, [0, 36]);
        assert_eq!(pmu.events.len(), 1);
        assert_eq!(pmu.events[0].config, 2);
        assert_eq!(pmu.events[0].scale, 2f64.powi(-32));
        write("events/energy-ram", "event=0x03\n");
        write("events/energy-ram.scale", "6.103515625e-5\n");
        write("events/energy-ram.unit", "Joules\n");
        let pmu = perf_pmu(&dir, true).expect("a PMU");
        assert_eq!(
            pmu.events
                .iter()
                .map(|e| (e.name, e.config))
                .collect::<Vec<_>>(),
            [("energy-pkg", 2), ("energy-ram", 3)]
        );
        assert_eq!(perf_pmu(&dir, false).expect("a PMU").events.len(), 1);
        write("events/energy-ram.unit", "Watts\n");
        assert_eq!(
            perf_pmu(&dir, true).expect_err("bad unit").status(),
            "failed"
        );
        assert_eq!(cpu_list("0-2,8"), Some(vec![0, 1, 2, 8]));
        assert_eq!(cpu_list(""), None);
    }

    #[test]
    fn a_missing_tool_is_absent_not_failed() {
        let why = run_tool("senergy-no-such-tool", &[], &[]).expect_err("missing");
        assert_eq!(why.status(), "absent");
        assert!(why.detail().contains("not installed"), "{why:?}");
    }

    #[test]
    fn pm_counters_files_are_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let absent = PmCounters::open(tmp.path().join("none"))
            .err()
            .expect("absent");
        assert_eq!(absent.status(), "absent");
        std::fs::write(tmp.path().join("energy"), "123456 J 1700000000000000 us\n").expect("write");
        let mut reader = PmCounters::open(tmp.path().to_path_buf()).expect("opened");
        assert_eq!(reader.read(), Ok(123_456.0));
        std::fs::write(tmp.path().join("energy"), "garbage\n").expect("write");
        assert_eq!(reader.read().expect_err("garbage").status(), "failed");
    }
}
