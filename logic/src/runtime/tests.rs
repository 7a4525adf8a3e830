//! The runtime driven as Slurm drives it, over a fake source whose energy the test sets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::config::ConfigError;
use crate::plugin::Opened;
use crate::source::{Reading, Source};

/// Hardware a test controls: energy so far, and whether reading it panics.
#[derive(Default)]
struct FakeHardware {
    energy_uj: AtomicU64,
    watts: AtomicU32,
    panics: AtomicBool,
    opened: AtomicU32,
    /// The meter's sampling period in milliseconds; 0 for an hour, so that the sampler
    /// thread never reads between a test's steps.
    period_ms: AtomicU64,
}

static HARDWARE: LazyLock<Mutex<HashMap<u32, Arc<FakeHardware>>>> = LazyLock::new(Default::default);
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// New hardware, named by the id its config selects.
fn hardware(joules: u64) -> (u32, Arc<FakeHardware>) {
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    let hw = Arc::new(FakeHardware::default());
    hw.energy_uj.store(joules * 1_000_000, Ordering::SeqCst);
    hw.watts.store(250, Ordering::SeqCst);
    HARDWARE.lock().expect("lock").insert(id, Arc::clone(&hw));
    (id, hw)
}

fn set_joules(hw: &FakeHardware, joules: u64) {
    hw.energy_uj.store(joules * 1_000_000, Ordering::SeqCst);
}

struct FakeSource(Arc<FakeHardware>);

impl Source for FakeSource {
    fn describe(&self) -> String {
        "fake".into()
    }

    fn poll(&mut self, _now: Instant) -> Reading {
        assert!(
            !self.0.panics.load(Ordering::SeqCst),
            "the fake source panics"
        );
        Reading {
            energy_uj: self.0.energy_uj.load(Ordering::SeqCst),
            complete: true,
            watts: Some(f64::from(self.0.watts.load(Ordering::SeqCst))),
            ..Reading::default()
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
struct FakeConfig {
    id: u32,
}

const KEY_ID: &str = "EnergyFakeId";

struct Fake;

impl Plugin for Fake {
    type Config = FakeConfig;
    type Source = FakeSource;
    const KEYS: &'static [&'static str] = &[KEY_ID];

    fn parse_config(values: &KeyValues) -> Result<FakeConfig, ConfigError> {
        let id = values.get(KEY_ID).unwrap_or("0");
        id.parse()
            .map(|id| FakeConfig { id })
            .map_err(|_| ConfigError::new(KEY_ID, id, "expected a number"))
    }

    fn show_config(config: &FakeConfig) -> Vec<(&'static str, String)> {
        vec![(KEY_ID, config.id.to_string())]
    }

    fn open(config: &FakeConfig) -> Result<Opened<FakeSource>, String> {
        let hw = HARDWARE
            .lock()
            .expect("lock")
            .get(&config.id)
            .cloned()
            .ok_or_else(|| format!("no fake hardware {}", config.id))?;
        hw.opened.fetch_add(1, Ordering::SeqCst);
        let sample_period = match hw.period_ms.load(Ordering::SeqCst) {
            0 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms),
        };
        Ok(Opened {
            source: FakeSource(hw),
            sample_period,
        })
    }
}

/// A fake source that, like rust_gpu, measures devices Slurm allocates to jobs.
struct DeviceFake;

impl Plugin for DeviceFake {
    type Config = FakeConfig;
    type Source = FakeSource;
    const KEYS: &'static [&'static str] = &[KEY_ID];
    const ALLOCATED_DEVICES: bool = true;

    fn parse_config(values: &KeyValues) -> Result<FakeConfig, ConfigError> {
        Fake::parse_config(values)
    }

    fn show_config(config: &FakeConfig) -> Vec<(&'static str, String)> {
        Fake::show_config(config)
    }

    fn open(config: &FakeConfig) -> Result<Opened<FakeSource>, String> {
        Fake::open(config)
    }
}

/// A host in `daemon` among `plugins` stacked energy plugins, with its ledger in `spool`,
/// on a node whose jobs are in cgroups when `site` is set.
struct TestHost {
    daemon: Daemon,
    plugins: usize,
    spool: Option<PathBuf>,
    site: Option<Site>,
}

impl Host for TestHost {
    fn daemon(&self) -> Daemon {
        self.daemon
    }

    fn spool_dir(&self) -> Result<PathBuf, String> {
        self.spool.clone().ok_or_else(|| "no spool dir".into())
    }

    fn energy_plugins(&self) -> usize {
        self.plugins
    }

    fn attribution_site(&self) -> Result<Site, String> {
        self.site.clone().ok_or_else(|| "no cgroups".into())
    }

    fn plugin_kind(&self) -> &'static str {
        "rust_fake"
    }

    /// A process table without processes: this test binary's children (other tests')
    /// are no step's tasks, and a step's reads are the same at each run.
    fn proc_root(&self) -> PathBuf {
        self.spool
            .as_ref()
            .map_or_else(|| PathBuf::from("/nonexistent"), |s| s.join("no-proc"))
    }
}

fn runtime(daemon: Daemon) -> Runtime<Fake, TestHost> {
    Runtime::new(TestHost {
        daemon,
        plugins: 1,
        spool: None,
        site: None,
    })
}

/// A node whose slurmd measures `joules` so far on hardware sampled every 20 ms and keeps
/// its ledger in a temp spool dir; its steps are made by [`Node::step`].
struct Node {
    spool: tempfile::TempDir,
    hw: Arc<FakeHardware>,
    id: u32,
    /// Keeps the ledger while the node lives.
    _slurmd: Runtime<Fake, TestHost>,
}

impl Node {
    fn new(joules: u64) -> Self {
        let (id, hw) = hardware(joules);
        hw.period_ms.store(20, Ordering::SeqCst);
        let spool = tempfile::tempdir().expect("spool");
        let slurmd = Runtime::new(TestHost {
            daemon: Daemon::Slurmd,
            plugins: 1,
            spool: Some(spool.path().to_path_buf()),
            site: None,
        });
        slurmd.configure(0, &config(id)).expect("conf_set");
        let node = Self {
            spool,
            hw,
            id,
            _slurmd: slurmd,
        };
        node.settle(0.0);
        node
    }

    /// A slurmstepd of this node among `plugins` stacked energy plugins.
    fn step(&self, plugins: usize) -> Runtime<Fake, TestHost> {
        let rt = Runtime::new(TestHost {
            daemon: Daemon::Slurmstepd,
            plugins,
            spool: Some(self.spool.path().to_path_buf()),
            site: None,
        });
        rt.configure(0, &config(self.id)).expect("conf_set");
        rt
    }

    /// Sets the hardware's energy and waits until the ledger has it, at rest (no power
    /// left to bring a step's figure forward with): `joules` since slurmd opened.
    fn settle(&self, joules: f64) {
        let path = crate::ledger::ledger_path(self.spool.path(), 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let node = crate::ledger::Ledger::load(&path)
                .ok()
                .flatten()
                .map(|l| l.node());
            if node.is_some_and(|n| n.joules == joules && n.watts == 0.0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the ledger never showed {joules} J: {node:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn set(&self, joules: u64, since_open: f64) {
        set_joules(&self.hw, joules);
        self.settle(since_open);
    }
}

fn config(id: u32) -> KeyValues {
    let mut values = KeyValues::new();
    values.set(KEY_ID, id.to_string());
    values
}

fn record(rt: &Runtime<impl Plugin, TestHost>, query: Query) -> EnergyRecord {
    match rt.get(query) {
        Ok(Answer::Record(r)) => r,
        Ok(Answer::Records(r)) if r.len() == 1 => r[0],
        Ok(Answer::Records(r)) if r.len() == 1 => r[0],
        other => panic!("{query:?} gave {other:?}"),
    }
}

fn consumed(rt: &Runtime<impl Plugin, TestHost>, query: Query) -> Option<u64> {
    record(rt, query).consumed_j
}

#[test]
fn slurmd_answers_every_query_from_the_node_energy_since_it_opened() {
    let (id, hw) = hardware(5_000);
    let rt = runtime(Daemon::Slurmd);
    rt.configure(0, &config(id)).expect("conf_set");
    set_joules(&hw, 5_100);
    assert_eq!(consumed(&rt, Query::NodeEnergyUp), Some(100));
    // the node figures: since slurmd's first reading
    assert_eq!(consumed(&rt, Query::NodeEnergy), Some(100));
    assert_eq!(consumed(&rt, Query::JoulesTask), Some(100));
    assert_eq!(consumed(&rt, Query::Struct), Some(100));
    let r = record(&rt, Query::Struct);
    assert_eq!(r.current_watts, Some(250));
    assert!(r.poll_time > 0);
    assert_eq!(rt.get(Query::LastPoll), Ok(Answer::PollTime(r.poll_time)));
    assert_eq!(rt.get(Query::SensorCount), Ok(Answer::SensorCount(1)));
    assert_eq!(hw.opened.load(Ordering::SeqCst), 1);
}

/// A step reads the node's energy since it began from slurmd's ledger, never the source.
#[test]
fn a_step_counts_from_its_own_first_reading_and_reports_increments() {
    let node = Node::new(70_000);
    node.set(70_100, 100.0);
    let rt = node.step(1);
    node.set(70_400, 400.0);
    let first = record(&rt, Query::NodeEnergyUp);
    assert_eq!(first.consumed_j, Some(300));
    assert_eq!(first.base_consumed_j, 300);
    node.set(70_550, 550.0);
    let second = record(&rt, Query::NodeEnergyUp);
    assert_eq!(second.consumed_j, Some(450));
    assert_eq!(second.base_consumed_j, 150);
    assert_eq!(second.previous_consumed_j, 300);
    // only slurmd opened the source
    assert_eq!(node.hw.opened.load(Ordering::SeqCst), 1);
}

/// Stacked, Slurm adds each answer to the step's running record: each answer is the
/// energy since the previous one, so that the running sum is the step's energy. slurmd's
/// figures (a fresh record each time) stay totals.
#[test]
fn a_stacked_step_answers_increments_that_slurm_sums() {
    let node = Node::new(10_000);
    let step = node.step(2);
    let slurmd: Runtime<Fake, TestHost> = Runtime::new(TestHost {
        daemon: Daemon::Slurmd,
        plugins: 2,
        spool: None,
        site: None,
    });
    slurmd.configure(1, &config(node.id)).expect("conf_set");
    let mut running_sum = 0;
    for ((joules, since), answer) in [(10_200, 200.0), (10_250, 250.0), (10_250, 250.0)]
        .into_iter()
        .zip([200, 50, 0])
    {
        node.set(joules, since);
        let got = consumed(&step, Query::NodeEnergyUp).expect("available");
        assert_eq!(got, answer);
        running_sum += got;
    }
    assert_eq!(running_sum, 250);
    for (joules, answer) in [(10_200, 200), (10_250, 250), (10_250, 250)] {
        set_joules(&node.hw, joules);
        assert_eq!(consumed(&slurmd, Query::NodeEnergyUp), Some(answer));
    }
}

#[test]
fn slurmctld_never_opens_the_source_and_reports_unavailable() {
    let (id, hw) = hardware(1);
    let rt = runtime(Daemon::Other);
    rt.configure(0, &config(id)).expect("conf_set");
    rt.update_node_energy().expect("poll");
    assert_eq!(consumed(&rt, Query::NodeEnergy), None);
    assert_eq!(consumed(&rt, Query::NodeEnergyUp), None);
    assert_eq!(hw.opened.load(Ordering::SeqCst), 0);
    assert_eq!(
        rt.shown_config(),
        Ok(vec![
            (KEY_ID, id.to_string()),
            ("EnergyAttribution", "node".to_string()),
            ("EnergyAttributionIdleWatts", "(learned)".to_string()),
            ("EnergyStepRecord", "yes".to_string()),
            ("EnergyMetricsFile", "(none)".to_string()),
            ("EnergyMetricsFileMode", "0644".to_string()),
            ("EnergyMetricsFileGroup", "(slurmd's)".to_string()),
            ("EnergyMetricsOwners", "yes".to_string())
        ]),
        "scontrol show config still shows the keys, the runtime's too"
    );
}

/// One acct_gather.conf for the family: another plugin's keys are read past, each named
/// at debug level, and change nothing of this plugin's configuration.
#[test]
fn another_plugins_keys_are_ignored_with_a_debug_line() {
    let logs = crate::scheduler::tests::logged();
    let rt = runtime(Daemon::Other);
    let mut values = config(7);
    values.set("EnergyRedfishUrl", "https://bmc");
    values.set("EnergyIPMIHost", "bmc");
    values.set(attribution::MODE_KEY, "shared");
    rt.configure(0, &values).expect("conf_set");
    let shown = rt.shown_config().expect("conf_values");
    assert!(shown.contains(&(KEY_ID, "7".to_string())), "{shown:?}");
    assert!(shown.contains(&(attribution::MODE_KEY, "shared".to_string())));
    assert!(shown.iter().all(|(k, _)| !k.starts_with("EnergyRedfish")));
    let logs: Vec<_> = crate::scheduler::tests::logged()[logs.len()..].to_vec();
    assert_eq!(
        logs,
        [
            "DEBUG acct_gather.conf: EnergyIPMIHost is rust_ipmi's; rust_fake ignores it",
            "DEBUG acct_gather.conf: EnergyRedfishUrl is rust_redfish's; rust_fake ignores it",
        ]
    );
}

#[test]
fn an_invalid_config_reports_no_val_never_zero() {
    let (_, hw) = hardware(1);
    let rt = runtime(Daemon::Slurmd);
    let mut values = KeyValues::new();
    values.set(KEY_ID, "twelve");
    rt.configure(0, &values).expect("conf_set never fails");
    for query in [
        Query::NodeEnergy,
        Query::NodeEnergyUp,
        Query::Struct,
        Query::JoulesTask,
    ] {
        let r = record(&rt, query);
        assert_eq!(r.consumed_j, None, "{query:?}");
        assert_eq!(r.current_watts, None, "{query:?}");
    }
    assert_eq!(hw.opened.load(Ordering::SeqCst), 0);
    assert_eq!(
        rt.shown_config(),
        Ok(vec![
            (KEY_ID, "(invalid, see the log)".to_string()),
            ("EnergyAttribution", "node".to_string()),
            ("EnergyAttributionIdleWatts", "(learned)".to_string()),
            ("EnergyStepRecord", "yes".to_string()),
            ("EnergyMetricsFile", "(none)".to_string()),
            ("EnergyMetricsFileMode", "0644".to_string()),
            ("EnergyMetricsFileGroup", "(slurmd's)".to_string()),
            ("EnergyMetricsOwners", "yes".to_string())
        ])
    );
}

#[test]
fn a_bad_attribution_is_node_wide_and_shared_without_a_site_is_too() {
    let (id, hw) = hardware(1);
    let rt = runtime(Daemon::Slurmd);
    let mut values = config(id);
    values.set("EnergyAttribution", "halves");
    rt.configure(0, &values).expect("conf_set");
    assert_eq!(
        rt.shown_config().expect("shown")[1],
        ("EnergyAttribution", "node".to_string())
    );
    // the source still measures the node
    assert!(consumed(&rt, Query::NodeEnergy).is_some());
    let rt = runtime(Daemon::Slurmd);
    let mut values = config(id);
    values.set("EnergyAttribution", "shared");
    rt.configure(0, &values).expect("conf_set");
    assert_eq!(
        rt.shown_config().expect("shown")[1],
        ("EnergyAttribution", "shared".to_string())
    );
    // the test host has no cgroups: node-wide figures, logged once
    assert!(consumed(&rt, Query::NodeEnergy).is_some());
    assert!(hw.opened.load(Ordering::SeqCst) >= 2);
}

/// Every step reads its figure from slurmd's ledger, a source of allocated devices
/// (rust_gpu) too: no step opens the hardware.
#[test]
fn every_step_reads_the_ledger_never_the_hardware() {
    let spool = tempfile::tempdir().expect("spool");
    let site = Site {
        spool: spool.path().to_path_buf(),
        cgroup_root: spool.path().join("cgroup"),
        proc_root: spool.path().join("proc"),
    };
    let (id, hw) = hardware(5);
    let mut values = config(id);
    values.set("EnergyAttribution", "shared");
    let step_host = || TestHost {
        daemon: Daemon::Slurmstepd,
        plugins: 1,
        spool: Some(site.spool.clone()),
        site: Some(site.clone()),
    };
    let split: Runtime<Fake, TestHost> = Runtime::new(step_host());
    split.configure(0, &values).expect("conf_set");
    let devices: Runtime<DeviceFake, TestHost> = Runtime::new(step_host());
    devices.configure(0, &values).expect("conf_set");
    set_joules(&hw, 12);
    // the ledger (which no slurmd keeps here) gives no figure: unavailable, not 0 J
    assert_eq!(consumed(&split, Query::NodeEnergyUp), None);
    assert_eq!(consumed(&devices, Query::NodeEnergyUp), None);
    assert_eq!(hw.opened.load(Ordering::SeqCst), 0);
}

#[test]
fn a_source_that_cannot_open_reports_unavailable() {
    let rt = runtime(Daemon::Slurmd);
    rt.configure(0, &config(u32::MAX)).expect("conf_set");
    assert_eq!(consumed(&rt, Query::NodeEnergy), None);
    assert!(rt.update_node_energy().is_ok());
}

#[test]
fn reconfigure_keeps_the_node_energy_and_the_open_source() {
    let (id, hw) = hardware(1_000);
    let (other, _) = hardware(0);
    let rt = runtime(Daemon::Slurmd);
    rt.configure(0, &config(id)).expect("conf_set");
    set_joules(&hw, 1_200);
    assert_eq!(consumed(&rt, Query::NodeEnergyUp), Some(200));
    // scontrol reconfigure: Slurm calls conf_set again, here with changed values
    rt.set(Update::Reconfig).expect("reconfig");
    rt.configure(0, &config(other)).expect("conf_set");
    set_joules(&hw, 1_500);
    assert_eq!(consumed(&rt, Query::NodeEnergyUp), Some(500));
    assert_eq!(consumed(&rt, Query::NodeEnergy), Some(500));
    assert_eq!(hw.opened.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_source_fails_that_call_only_and_the_poisoned_lock_recovers() {
    let (id, hw) = hardware(10);
    let rt = runtime(Daemon::Slurmd);
    rt.configure(0, &config(id)).expect("conf_set");
    hw.panics.store(true, Ordering::SeqCst);
    assert_eq!(rt.get(Query::NodeEnergyUp), Err(CallFailed));
    assert_eq!(rt.set(Update::Profile), Err(CallFailed));
    assert!(rt.state.is_poisoned(), "the panic happened under the lock");
    hw.panics.store(false, Ordering::SeqCst);
    set_joules(&hw, 60);
    assert_eq!(consumed(&rt, Query::NodeEnergyUp), Some(50));
    assert_eq!(
        rt.set(Update::Profile),
        Ok(Some(ProfileSample {
            watts: 250,
            parts: vec![],
            poll_time: record(&rt, Query::Struct).poll_time
        }))
    );
}

#[test]
fn a_step_without_a_ledger_reports_unavailable() {
    let (id, hw) = hardware(0);
    let rt: Runtime<Fake, TestHost> = Runtime::new(TestHost {
        daemon: Daemon::Slurmstepd,
        plugins: 1,
        spool: Some(tempfile::tempdir().expect("spool").path().to_path_buf()),
        site: None,
    });
    rt.configure(0, &config(id)).expect("conf_set");
    let r = record(&rt, Query::NodeEnergyUp);
    assert_eq!(r.consumed_j, None);
    // Slurm copies a step's watts into TRESUsageOutMax: unknown is 0, never NO_VAL
    assert_eq!(r.current_watts, Some(0));
    assert_eq!(hw.opened.load(Ordering::SeqCst), 0);
    // slurmd shows unknown as unknown (scontrol: n/s)
    let rt: Runtime<Fake, TestHost> = runtime(Daemon::Slurmd);
    rt.configure(0, &config(u32::MAX)).expect("conf_set");
    assert_eq!(record(&rt, Query::Struct).current_watts, None);
}

#[test]
fn fini_stops_everything_and_a_later_call_starts_afresh() {
    let (id, hw) = hardware(100);
    let rt = runtime(Daemon::Slurmd);
    rt.init(None).expect("init");
    rt.configure(0, &config(id)).expect("conf_set");
    rt.fini().expect("fini");
    assert!(rt.lock().is_none());
    // with the defaults (no conf_set since): id 0, which has no hardware
    assert_eq!(consumed(&rt, Query::NodeEnergy), None);
    assert_eq!(hw.opened.load(Ordering::SeqCst), 1);
}

/// slurmd on a node whose slurm.conf says `PrivateData=jobs,users,usage`.
struct PrivateHost {
    spool: PathBuf,
}

impl Host for PrivateHost {
    fn daemon(&self) -> Daemon {
        Daemon::Slurmd
    }

    fn spool_dir(&self) -> Result<PathBuf, String> {
        Ok(self.spool.clone())
    }

    fn private_data(&self) -> PrivateData {
        PrivateData {
            jobs: true,
            usage: true,
            users: true,
        }
    }
}

/// Where Slurm hides jobs and the admin left the metrics keys out, slurmd writes the file
/// for root only and `scontrol show config` says why.
#[test]
fn where_slurm_hides_jobs_the_metrics_file_is_roots_only() {
    let (id, hw) = hardware(1);
    hw.period_ms.store(20, Ordering::SeqCst);
    let spool = tempfile::tempdir().expect("spool");
    let file = spool.path().join("energy.prom");
    let slurmd = Runtime::<Fake, _>::new(PrivateHost {
        spool: spool.path().to_path_buf(),
    });
    let mut values = config(id);
    values.set("EnergyMetricsFile", file.display().to_string());
    slurmd.configure(0, &values).expect("conf_set");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::fs::metadata(&file).expect("written").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
        0o600
    );
    let shown = slurmd.shown_config().expect("shown");
    for (key, value) in [
        ("EnergyMetricsFileMode", "0600 (PrivateData)"),
        ("EnergyMetricsOwners", "no (PrivateData)"),
    ] {
        assert!(shown.contains(&(key, value.to_string())), "{shown:?}");
    }
}

/// Stacked rust_rapl and rust_gpu read one acct_gather.conf: the node meter's static power
/// is `EnergyAttributionIdleWatts`, each GPU's `EnergyGpuIdleWatts`, and neither reads
/// the other's.
#[cfg(feature = "gpu")]
#[test]
fn each_idle_key_means_one_thing_under_its_plugin() {
    use crate::gpu::config::KEY_IDLE_WATTS;
    use crate::gpu::{GpuConfig, Gpus};
    use crate::rapl::Rapl;
    let mut values = KeyValues::new();
    values.set(attribution::IDLE_KEY, "80");
    let idle = |values: &KeyValues| {
        let attribution = Attribution::parse(values).expect("attribution");
        (
            ledger_idle_watts::<Gpus>(&attribution, &GpuConfig::parse(values).expect("gpu")),
            ledger_idle_watts::<Rapl>(&attribution, &Rapl::parse_config(values).expect("rapl")),
        )
    };
    let logged = crate::scheduler::tests::logged;
    let before = logged().len();
    // the node's key alone: the GPUs' idle power is learned, and rust_gpu says whose key
    // it is
    assert_eq!(idle(&values), (None, Some(80.0)));
    assert_eq!(
        logged()[before..],
        [
            "INFO EnergyAttributionIdleWatts is the node meter's static power, which rust_gpu \
             does not read; each GPU's idle power is EnergyGpuIdleWatts (not set: learned per GPU)"
        ]
    );
    values.set(KEY_IDLE_WATTS, "30");
    assert_eq!(idle(&values), (Some(30.0), Some(80.0)));
    assert_eq!(logged().len(), before + 1);
    let mut gpu_only = KeyValues::new();
    gpu_only.set(KEY_IDLE_WATTS, "30");
    assert_eq!(idle(&gpu_only), (Some(30.0), None));
    gpu_only.set(KEY_IDLE_WATTS, "-1");
    let e = GpuConfig::parse(&gpu_only).expect_err("negative");
    assert!(e.to_string().contains("EnergyGpuIdleWatts=-1"), "{e}");
}
