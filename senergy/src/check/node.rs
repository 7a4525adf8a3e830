//! The facts `senergy check` judges, read on the node: the plugin files in PluginDir (the
//! release each was built for, from its `plugin_version` symbol), the slurmd that runs for
//! this node and its release, its log since it started, each plugin's ledger, and the
//! cgroups a shared split needs. Reads only; nothing is loaded into this process.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use object::{Object, ObjectSection, ObjectSymbol};
use slurm_energy_logic::file_value;
use slurm_energy_logic::{Ledger, LedgerError, ledger_path, unix_time};
use slurm_energy_logic::{PluginKind, Procs};
use slurm_energy_logic::{Ring, doorbell_path, freshen};
use slurm_energy_logic::{Site, cgroup_mountpoint, spool_for_node};

use super::readers::{self, NodeConf, PERF_POWER_PMU};
use super::{
    FAMILY, Facts, LedgerFact, LedgerState, LogFacts, PluginFile, STALE_AFTER_SECS, compare,
    parse_release,
};
use crate::ffi::SlurmSettings;

/// How much of the end of slurmd's log is read.
const LOG_TAIL: u64 = 4 << 20;
/// Where slurmd is not running, how many of its log's last lines tell why.
const LAST_WORDS: usize = 500;

/// The facts of node `node` (default: this host's short name, slurmd's default NodeName).
pub fn gather(settings: &SlurmSettings, node: Option<String>) -> Facts {
    let node = node.unwrap_or_else(short_host_name);
    let energy_types: Vec<String> = settings
        .energy_types
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect();
    let ours: Vec<(usize, &String)> = energy_types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.starts_with(FAMILY))
        .collect();
    let plugins = ours
        .iter()
        .map(|(_, t)| PluginFile {
            plugin_type: t.to_string(),
            found: plugin_file(&settings.plugin_dir, t),
        })
        .collect();
    let spool = spool_for_node(&settings.spool_dir, &node);
    // a plugin's ledger is named by its place among the energy plugins (its context)
    let ledgers: Vec<LedgerFact> = ours
        .iter()
        .map(|(k, t)| {
            let path = ledger_path(&spool, u16::try_from(*k).unwrap_or(u16::MAX));
            LedgerFact {
                plugin_type: t.to_string(),
                state: ledger_state(&path),
                path,
            }
        })
        .collect();
    let (slurmd, other_slurmds) = slurmd_of(&node, &settings.slurm_conf, settings.conf_named);
    let slurmd_release = slurmd_release(slurmd.as_ref().map(|(_, exe)| exe.as_path()));
    let log = log_facts(
        &settings.log_file,
        &node,
        slurmd.as_ref().and_then(|(pid, _)| started(*pid)),
    );
    let conf_dir = conf_dir(settings);
    let acct_gather = fs::read_to_string(conf_dir.join("acct_gather.conf")).unwrap_or_default();
    let now = unix_time(SystemTime::now());
    // where slurmd has no fresh reading, the source itself is asked
    let site = site(
        &node,
        &acct_gather,
        &ours.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
    );
    let probes = ledgers
        .iter()
        .filter(|l| match &l.state {
            Ok(None) => true,
            Ok(Some(state)) => now - state.sampled_at > STALE_AFTER_SECS,
            Err(_) => false,
        })
        .map(|l| (l.plugin_type.clone(), readers::probe(&l.plugin_type, &site)))
        .collect();
    // rust_gpu charges each job its GPUs in every mode: the split is the CPU sources'
    let splits = ours
        .iter()
        .any(|(_, t)| PluginKind::named(t) != Some(PluginKind::Gpu));
    let shared = (splits
        && file_value(&acct_gather, "EnergyAttribution")
            .is_some_and(|v| v.eq_ignore_ascii_case("shared")))
    .then(|| {
        let cgroup_conf = fs::read_to_string(conf_dir.join("cgroup.conf")).unwrap_or_default();
        Site::from_conf(
            spool.clone(),
            &settings.proctrack,
            &settings.task_plugin,
            &cgroup_mountpoint(&cgroup_conf),
        )
        .map(|_| ())
    });
    Facts {
        node,
        slurm_conf: settings.slurm_conf.clone(),
        energy_types,
        plugins,
        slurmd_pid: slurmd.map(|(pid, _)| pid),
        slurmd_release,
        ledgers,
        log,
        probes,
        other_slurmds,
        shared,
        now,
    }
}

/// The directory of the slurm.conf libslurm loaded (acct_gather.conf and cgroup.conf are
/// beside it).
fn conf_dir(settings: &SlurmSettings) -> PathBuf {
    Path::new(&settings.slurm_conf)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// What the readers of this node are opened from.
fn site<'a>(node: &'a str, acct_gather: &'a str, plugins: &[&str]) -> NodeConf<'a> {
    NodeConf {
        node,
        acct_gather,
        perf_pmu: Path::new(PERF_POWER_PMU),
        // the plugins count RAPL's DRAM domains unless told to count packages only
        rapl_dram: file_value(acct_gather, "EnergyRaplDomains")
            .is_none_or(|d| d.to_ascii_lowercase().contains("dram")),
        redfish: plugins
            .iter()
            .any(|p| PluginKind::named(p) == Some(PluginKind::Redfish)),
    }
}

/// `senergy check --compare`: the node's plugins' figures beside the independent readers,
/// over `window`.
pub fn compare(settings: &SlurmSettings, facts: &Facts, window: Duration) -> compare::Comparison {
    let acct_gather =
        fs::read_to_string(conf_dir(settings).join("acct_gather.conf")).unwrap_or_default();
    let plugins: Vec<&str> = facts
        .plugins
        .iter()
        .map(|p| p.plugin_type.as_str())
        .collect();
    let slots = readers::open_all(&site(&facts.node, &acct_gather, &plugins));
    let ledgers: Vec<(String, PathBuf)> = facts
        .ledgers
        .iter()
        .map(|l| (l.plugin_type.clone(), l.path.clone()))
        .collect();
    compare::measure(window, &ledgers, slots)
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

pub fn short_host_name() -> String {
    host_name()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The plugin's file, first in PluginDir's order as Slurm searches it, and the release
/// it was built for.
fn plugin_file(plugin_dir: &str, plugin_type: &str) -> Result<(PathBuf, u32), String> {
    let name = format!("{}.so", plugin_type.replace('/', "_"));
    let path = plugin_dir
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(&name))
        .find(|p| p.exists())
        .ok_or_else(|| format!("no {name} in PluginDir={plugin_dir}"))?;
    let built = built_for(&path)?;
    Ok((path, built))
}

/// A plugin file's `plugin_version`: the release Slurm's loader requires it to match.
pub fn built_for(path: &Path) -> Result<u32, String> {
    let bad = |why: String| format!("{}: {why}", path.display());
    let data = fs::read(path).map_err(|e| bad(e.to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| bad(format!("not a library ({e})")))?;
    let symbol = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version"))
        .ok_or_else(|| bad("exports no plugin_version: not a Slurm plugin".into()))?;
    let section = symbol
        .section_index()
        .and_then(|i| file.section_by_index(i).ok())
        .ok_or_else(|| bad("plugin_version is in no section".into()))?;
    let bytes = section
        .data_range(symbol.address(), 4)
        .ok()
        .flatten()
        .ok_or_else(|| bad("plugin_version cannot be read".into()))?;
    let word: [u8; 4] = bytes
        .try_into()
        .map_err(|_| bad("plugin_version is not 4 bytes".into()))?;
    Ok(if file.is_little_endian() {
        u32::from_le_bytes(word)
    } else {
        u32::from_be_bytes(word)
    })
}

/// The ledger's state, or why it cannot be read. slurmd writes the file at each update
/// (about a second apart); the check rings first (as a slurmstepd of before does, waiting
/// at most the doorbell's bound) for one sampled now, so that its power is the node's now.
fn ledger_state(path: &Path) -> Result<Option<LedgerState>, String> {
    freshen(&doorbell_path(path), path, Ring::Fresh);
    match Ledger::load(path) {
        Ok(ledger) => Ok(ledger.map(|l| {
            let node = l.node();
            LedgerState {
                sampled_at: l.sampled_at(),
                watts: node.watts,
                joules: node.joules,
                since: node.since,
                jobs: l.jobs().count(),
                source: l.source().to_string(),
                learned_idle_watts: l.learned_idle_watts(),
            }
        })),
        Err(LedgerError::Read { path, source })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            Err(format!(
                "cannot read {path}: it is root's (slurmd writes it as root): run senergy check as root"
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A slurmd's pid and program.
type Slurmd = (u32, PathBuf);

/// The slurmd running for `node` with this slurm.conf (`conf`): its pid and program; and
/// the slurmds left aside, with why. A slurmd given `-N NAME` runs for NAME, one without
/// for this host's short name; its slurm.conf is its `-f FILE`, else its `SLURM_CONF`,
/// else its default: another cluster's slurmd on the same host has its own. `ours_named`:
/// whether `SLURM_CONF` chose ours; where not, ours is the default too (a slurmd started by
/// Debian's unit, with neither, is this cluster's).
fn slurmd_of(node: &str, conf: &str, ours_named: bool) -> (Option<Slurmd>, Vec<(u32, String)>) {
    let host = short_host_name();
    let mut others = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return (None, others);
    };
    let mut found = None;
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "slurmd" {
            continue;
        }
        let args = nul_separated(&fs::read(dir.join("cmdline")).unwrap_or_default());
        let runs_for = named_node(&args).unwrap_or(host.as_str());
        if runs_for != node {
            others.push((pid, format!("runs for node {runs_for}")));
            continue;
        }
        let its_conf = conf_arg(&args).map(str::to_string).or_else(|| {
            let environ = nul_separated(&fs::read(dir.join("environ")).unwrap_or_default());
            environ
                .iter()
                .find_map(|v| v.strip_prefix("SLURM_CONF=").map(str::to_string))
        });
        let same = match &its_conf {
            Some(its) => same_file(its, conf),
            // its compiled-in default: ours too unless we were pointed elsewhere
            None => !ours_named,
        };
        if !same {
            others.push((
                pid,
                format!(
                    "runs with {} (another cluster's slurmd?)",
                    its_conf.as_deref().unwrap_or("its default slurm.conf")
                ),
            ));
            continue;
        }
        if found.is_none() {
            let exe = fs::read_link(dir.join("exe")).unwrap_or_else(|_| "slurmd".into());
            found = Some((pid, exe));
        }
    }
    (found, others)
}

fn nul_separated(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Whether two paths name one file (either may be relative or a link).
fn same_file(a: &str, b: &str) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The slurm.conf a slurmd's arguments name (`-f FILE`, `-fFILE`).
fn conf_arg(args: &[String]) -> Option<&str> {
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        if arg == "-f" {
            return it.next().map(String::as_str);
        }
        if let Some(file) = arg.strip_prefix("-f") {
            return Some(file);
        }
    }
    None
}

/// The node a slurmd's arguments name (`-N NAME`, `-NNAME`).
fn named_node(args: &[String]) -> Option<&str> {
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        if arg == "-N" {
            return it.next().map(String::as_str);
        }
        if let Some(name) = arg.strip_prefix("-N") {
            return Some(name);
        }
    }
    None
}

/// The release of `exe` (the running slurmd's program), else of the slurmd installed with
/// the libslurm this process loaded (the Slurm whose slurm.conf it read), else of `slurmd`
/// on PATH; and which slurmd that is.
fn slurmd_release(exe: Option<&Path>) -> Result<(u32, PathBuf), String> {
    let exe = exe
        .map(Path::to_path_buf)
        .or_else(|| loaded_libslurm().as_deref().and_then(slurmd_beside))
        .unwrap_or_else(|| PathBuf::from("slurmd"));
    let out = Command::new(&exe)
        .arg("-V")
        .output()
        .map_err(|e| format!("cannot run {} -V: {e}", exe.display()))?;
    let said = String::from_utf8_lossy(&out.stdout);
    let release = parse_release(said.trim())
        .ok_or_else(|| format!("{} -V said {:?}", exe.display(), said.trim()))?;
    Ok((release, exe))
}

/// The libslurm mapped into this process (`/proc/self/maps`).
fn loaded_libslurm() -> Option<PathBuf> {
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| {
            Path::new(path)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libslurm.so") || n.starts_with("libslurmfull"))
        })
        .map(PathBuf::from)
}

/// The `sbin/slurmd` of the installation a library belongs to: one or two directories above
/// the library's (`/opt/slurm/lib/libslurm.so` → `/opt/slurm/sbin`,
/// `/usr/lib/x86_64-linux-gnu/libslurm.so.37` → `/usr/sbin`).
fn slurmd_beside(library: &Path) -> Option<PathBuf> {
    library
        .ancestors()
        .skip(2)
        .take(2)
        .map(|dir| dir.join("sbin/slurmd"))
        .find(|slurmd| slurmd.is_file())
}

/// When process `pid` started.
fn started(pid: u32) -> Option<SystemTime> {
    Procs::from_path(Path::new("/proc")).started(pid)
}

/// The family's lines in slurmd's log since slurmd started (`since`), or, where slurmd is
/// not running, in its last lines.
fn log_facts(template: &str, node: &str, since: Option<SystemTime>) -> LogFacts {
    if template.is_empty() {
        return LogFacts::default();
    }
    // slurm.conf(5): %n is the node's name, %h the host's
    let file = PathBuf::from(template.replace("%n", node).replace("%h", &host_name()));
    let text = match tail(&file) {
        Ok(text) => text,
        Err(e) => {
            return LogFacts {
                unreadable: Some(format!("cannot read slurmd's log {}: {e}", file.display())),
                file: Some(file),
                ..LogFacts::default()
            };
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let first = match since {
        // a second's margin: log times are the wall clock's, the start its own
        Some(t) => {
            let from = unix_time(t.checked_sub(Duration::from_secs(1)).unwrap_or(t));
            lines
                .iter()
                .position(|l| log_time(l).is_some_and(|at| at >= from))
                .unwrap_or(lines.len())
        }
        None => lines.len().saturating_sub(LAST_WORDS),
    };
    let (measuring, problems) = super::read_log(&lines[first..].join("\n"));
    LogFacts {
        file: Some(file),
        unreadable: None,
        measuring,
        problems,
    }
}

/// The last [`LOG_TAIL`] bytes of `path`, from its first whole line.
fn tail(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let from = len.saturating_sub(LOG_TAIL);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(match (from, text.split_once('\n')) {
        (0, _) | (_, None) => text,
        (_, Some((_, rest))) => rest.to_string(),
    })
}

/// The Unix time of a log line of Slurm's, `[2026-11-25T10:00:00.123] ...` in local time
/// (LogTimeFormat iso8601_ms, the default, or iso8601), or with a zone (rfc5424).
fn log_time(line: &str) -> Option<f64> {
    use chrono::{DateTime, Local, NaiveDateTime, TimeZone};
    let stamp = line.strip_prefix('[')?.split(']').next()?;
    if let Ok(t) = DateTime::parse_from_rfc3339(stamp) {
        return Some(t.timestamp_millis() as f64 / 1000.0);
    }
    let naive = NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
    let t = Local.from_local_datetime(&naive).earliest()?;
    Some(t.timestamp_millis() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slurmd_runs_for_the_node_its_arguments_name() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(named_node(&args(&["slurmd", "-D", "-N", "n1"])), Some("n1"));
        assert_eq!(named_node(&args(&["slurmd", "-Nn2"])), Some("n2"));
        assert_eq!(named_node(&args(&["slurmd", "-D"])), None);
        assert_eq!(
            conf_arg(&args(&["slurmd", "-f", "/a/slurm.conf"])),
            Some("/a/slurm.conf")
        );
        assert_eq!(
            conf_arg(&args(&["slurmd", "-f/b.conf", "-D"])),
            Some("/b.conf")
        );
        assert_eq!(conf_arg(&args(&["slurmd", "-D"])), None);
    }

    #[test]
    fn the_slurmd_of_a_library_is_in_its_installations_sbin() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let prefix = tmp.path().join("usr");
        fs::create_dir_all(prefix.join("lib/x86_64-linux-gnu")).expect("mkdir");
        fs::create_dir_all(prefix.join("sbin")).expect("mkdir");
        let library = prefix.join("lib/x86_64-linux-gnu/libslurm.so.37");
        assert_eq!(slurmd_beside(&library), None);
        fs::write(prefix.join("sbin/slurmd"), "").expect("slurmd");
        assert_eq!(slurmd_beside(&library), Some(prefix.join("sbin/slurmd")));
    }

    #[test]
    fn log_times_in_slurms_formats() {
        let at = log_time("[2026-11-25T10:00:00.250+00:00] x").expect("rfc5424");
        assert_eq!(at, 1_795_600_800.25);
        assert!(log_time("[2026-11-25T10:00:00.250] slurmd version").is_some());
        assert!(log_time("[2026-11-25T10:00:00] x").is_some());
        assert_eq!(log_time("slurmd: error: x"), None);
    }

    #[test]
    fn the_log_is_read_from_slurmds_start_or_its_last_words() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = tmp.path().join("slurmd-n1.log");
        let stamp = |t: f64| {
            use chrono::TimeZone;
            chrono::Local
                .timestamp_millis_opt((t * 1000.0) as i64)
                .single()
                .expect("a time")
                .format("%Y-%m-%dT%H:%M:%S%.3f")
                .to_string()
        };
        let now = unix_time(SystemTime::now());
        fs::write(
            &log,
            format!(
                "[{}] error: acct_gather_energy/rust_rapl: old trouble\n\
                 [{}] error: acct_gather_energy/rust_rapl: new trouble\n",
                stamp(now - 100.0),
                stamp(now - 5.0)
            ),
        )
        .expect("write");
        let template = tmp.path().join("slurmd-%n.log");
        let template = template.to_str().expect("utf-8");
        let since = SystemTime::now() - Duration::from_secs(10);
        let facts = log_facts(template, "n1", Some(since));
        assert_eq!(facts.problems.len(), 1, "{facts:?}");
        assert!(facts.problems[0].ends_with("new trouble"));
        let facts = log_facts(template, "n1", None);
        assert_eq!(facts.problems.len(), 2, "{facts:?}");
        let facts = log_facts(template, "n2", None);
        assert!(
            facts
                .unreadable
                .is_some_and(|why| why.contains("slurmd-n2.log"))
        );
        assert!(log_facts("", "n1", None).file.is_none());
    }

    #[test]
    fn a_built_plugin_carries_the_release_it_was_built_for() {
        // this test binary is no plugin: refused, naming the file
        let me = std::env::current_exe().expect("exe");
        let why = built_for(&me).expect_err("not a plugin");
        assert!(why.contains("plugin_version"), "{why}");
    }
}
