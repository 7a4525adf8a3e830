//! Outside input never crashes or poisons (issue 28): property tests of the parsers of
//! input from outside the plugins that the crate's public API reaches. acct_gather.conf
//! values of every source and of the family's own keys, gres.conf, the ledger file, /proc
//! and cgroup files (a job's owner sets its processes' titles), powercap and MSR values,
//! the pm_counters files, Variorum's JSON, Redfish resources.
//!
//! Each property runs thousands of cases of two kinds: anything at all (random text and
//! bytes), and near-valid input (a valid document or file with a field made huge,
//! negative, NaN, of the wrong type, deeply nested or very long), since random input
//! rarely gets past a parser's first check. Every one asserts that the parser does not
//! panic, that every number it gives is finite and not negative (an error is fine), and,
//! where the parser's contract says so, that an error names the key and value or line.
//!
//! Parsers in private modules have their properties beside them: the IPMI frames
//! (`ipmi/proptests.rs`), the GPU libraries' answers (`gpu/proptests.rs`, and NVML's
//! process samples in the gpu-libs crate), senergy's carbon-intensity files.

use std::fmt::Debug;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};

use slurm_energy_logic::GresOrder;
use slurm_energy_logic::MetricsConfig;
use slurm_energy_logic::Plugin;
use slurm_energy_logic::Procs;
use slurm_energy_logic::hostlist;
use slurm_energy_logic::{Account, Ledger};
use slurm_energy_logic::{Attribution, StepId, StepKey, own_step};
use slurm_energy_logic::{CgroupTree, JobDir, count_cpus};
use slurm_energy_logic::{ConfigError, KeyValues};
use slurm_energy_logic::{Hwmon, PmCounters, PmCountersConfig, parse_pm_counters_value};
use slurm_energy_logic::{Opened, Source};
use slurm_energy_logic::{
    Rapl, RaplConfig, RaplSettings, SourceChoice, SystemPaths, parse_cpuinfo,
};
use slurm_energy_logic::{StepRecordConfig, gres_on_node};

/// Cases of a property whose case is a parse of a short text (microseconds).
const CHEAP: u32 = 5000;
/// Cases of a property whose case writes a small file tree (a temp dir per case): a few
/// ms of file system work each, which a loaded CI machine makes many times slower.
const FILES: u32 = 1000;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        ..ProptestConfig::default()
    }
}

/// Any text, from any bytes.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,60}",
        prop::collection::vec(any::<u8>(), 0..60)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// Numbers as text, valid and not: huge, negative, NaN, infinite, other notations.
fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..100_000).prop_map(|n| n.to_string()),
        select(vec![
            "NaN",
            "nan",
            "inf",
            "-inf",
            "1e309",
            "-1e309",
            "-0",
            "0",
            "0x10",
            "1_000",
            "+3",
            "0.05",
            "0.1",
            "3600",
            "3600.0001",
            "86400",
            "86401",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "1.5e3",
            " 7 ",
            "",
        ])
        .prop_map(String::from),
    ]
}

/// A very long text: thousands of repeats of a few characters.
fn long_text() -> impl Strategy<Value = String> {
    ("[a-z0-9/%:.,=\\[\\]-]{1,4}", 1000usize..20_000).prop_map(|(s, n)| s.repeat(n))
}

/// An acct_gather.conf value: what an admin writes or mistypes, or anything at all.
fn config_value() -> impl Strategy<Value = String> {
    let words = select(vec![
        "yes",
        "no",
        "true",
        "off",
        "ON",
        "maybe",
        "auto",
        "msr",
        "powercap",
        "Powercap",
        "package",
        "package,dram",
        "dram,dram",
        "psys, package,DRAM",
        "package,,dram",
        "node",
        "shared",
        "Shared",
        "none",
        "NONE",
        "0644",
        "0666",
        "0640",
        "0777",
        "07777",
        "0",
        "root",
        "-grp",
        "grp.name",
        "4294967296",
        "/dev/cpu/%d/msr",
        "/dev/cpu/%d/%d",
        "/dev/%%d",
        "%d",
        "dev/cpu/%d/msr",
        "/dev/ipmi0",
        "ipmi0",
        "bmc",
        "bmc:623",
        "bmc:0",
        "bmc:99999",
        "[::1]:623",
        "[::1",
        "[::1]x",
        "a:b:c",
        "%n-ipmi:6230",
        "https://bmc",
        "https://bmc:443/redfish/v1/",
        "http://user@bmc",
        "ftp://bmc",
        "https://[::1]:0",
        "https://[::1",
        "http://",
        "Node=DCMI",
        "Node=DCMI_ENHANCED",
        "Node=1,2;Socket0=3",
        "Node=70000",
        "Node=",
        "Node=1;Node=2",
        "Watts",
        "Temp",
        "/lib/libnvidia-ml.so.1",
        "lib/x.so",
        "libvariorum.so",
        "/opt/v/",
        "/var/metrics/energy.prom",
        "/var/metrics/.prom",
        "/var/metrics/energy.txt",
        "relative.prom",
        "/",
        "GPUBoard",
        "a/b",
        "Self",
        "",
    ])
    .prop_map(String::from);
    let mutated = (
        words.clone(),
        "[ \\t\\x00%/:,;=\\[\\]#.-]{1,3}",
        any::<bool>(),
    )
        .prop_map(|(w, junk, before)| {
            if before {
                format!("{junk}{w}")
            } else {
                format!("{w}{junk}")
            }
        });
    prop_oneof![
        4 => any_text(),
        3 => number_text(),
        4 => words,
        2 => mutated,
        1 => long_text(),
    ]
}

/// A password that must never show: a marker no other generated value holds.
fn password() -> impl Strategy<Value = String> {
    prop_oneof!["PwX[A-Z0-9]{6,14}", "PwX[A-Z0-9]{30,60}"]
}

/// Values for some of `keys`; the password keys get a `password()` marker.
fn assignments(
    keys: &'static [&'static str],
) -> impl Strategy<Value = Vec<(&'static str, String)>> {
    prop::collection::vec(
        (select(keys.to_vec()), config_value(), password())
            .prop_map(|(key, value, pw)| (key, if key.ends_with("Password") { pw } else { value })),
        0..6,
    )
}

fn key_values(pairs: &[(&'static str, String)]) -> KeyValues {
    let mut values = KeyValues::new();
    for (key, value) in pairs {
        values.set(key, value.clone());
    }
    values
}

/// The contract of every acct_gather.conf parser: a configuration or an error that names
/// a key that was given, with its value (a password's never); nothing shown for
/// `scontrol show config` or logged holds a password.
fn check_config<C: Debug>(
    pairs: &[(&'static str, String)],
    parse: impl Fn(&KeyValues) -> Result<C, ConfigError>,
    show: impl Fn(&C) -> Vec<(&'static str, String)>,
) -> Result<Option<C>, TestCaseError> {
    let values = key_values(pairs);
    let secrets: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k.ends_with("Password"))
        .map(|(_, v)| v.as_str())
        .collect();
    let hidden = |text: &str| secrets.iter().all(|s| !text.contains(s));
    match parse(&values) {
        Err(e) => {
            let text = e.to_string();
            prop_assert!(
                pairs.iter().any(|(k, _)| *k == e.key),
                "{text}: names a key not given"
            );
            prop_assert!(
                Some(e.value.as_str()) == values.get(e.key) || e.value == "<hidden>",
                "{text}: not the value given"
            );
            prop_assert!(text.contains(e.key), "{text}");
            prop_assert!(hidden(&text) && hidden(&format!("{e:?}")), "{text}");
            Ok(None)
        }
        Ok(config) => {
            let shown = format!("{:?} {:?}", show(&config), config);
            prop_assert!(hidden(&shown), "a password shows in {shown}");
            Ok(Some(config))
        }
    }
}

fn check_plugin<P: Plugin>(pairs: &[(&'static str, String)]) -> Result<(), TestCaseError> {
    if let Some(config) = check_config(pairs, P::parse_config, P::show_config)? {
        let mine = P::for_node(&config, "node17");
        let _ = P::show_config(&mine);
    }
    Ok(())
}

fn secs_within(d: Duration, lo: f64, hi: f64) -> bool {
    (lo..=hi).contains(&d.as_secs_f64())
}

proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn rapl_keys(pairs in assignments(<Rapl as Plugin>::KEYS)) {
        if let Some(c) = check_config(&pairs, RaplConfig::parse, RaplConfig::show)? {
            prop_assert!(c.msr_device.starts_with('/') && c.msr_device.matches("%d").count() == 1);
        }
        check_plugin::<Rapl>(&pairs)?;
    }

    #[test]
    fn pm_counters_keys(pairs in assignments(<PmCounters as Plugin>::KEYS)) {
        check_plugin::<PmCounters>(&pairs)?;
    }

    #[test]
    fn hwmon_keys(pairs in assignments(<Hwmon as Plugin>::KEYS)) {
        check_plugin::<Hwmon>(&pairs)?;
    }

    #[test]
    fn attribution_keys(pairs in assignments(slurm_energy_logic::ATTRIBUTION_KEYS)) {
        if let Some(a) = check_config(&pairs, Attribution::parse, Attribution::show)? {
            prop_assert!(a.idle_watts.is_none_or(|w| w.is_finite() && w >= 0.0), "{a:?}");
        }
    }

    #[test]
    fn step_record_keys(pairs in assignments(StepRecordConfig::KEYS)) {
        check_config(&pairs, StepRecordConfig::parse, StepRecordConfig::show)?;
    }

    #[test]
    fn metrics_keys(pairs in assignments(slurm_energy_logic::METRICS_KEYS)) {
        if let Some(m) = check_config(&pairs, MetricsConfig::parse, MetricsConfig::show)? {
            prop_assert!(m.mode.is_none_or(|m| m & !0o777 == 0 && m & 0o022 == 0), "{:?}", m.mode);
            prop_assert!(m.file.is_none_or(|f| f.is_absolute() && f.extension().is_some_and(|e| e == "prom")));
        }
    }
}

#[cfg(feature = "ipmi")]
proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn ipmi_keys(pairs in assignments(<slurm_energy_logic::Ipmi as Plugin>::KEYS)) {
        use slurm_energy_logic::{Ipmi, IpmiConfig};
        if let Some(c) = check_config(&pairs, IpmiConfig::parse, IpmiConfig::show)? {
            prop_assert!(secs_within(c.frequency, 0.1, 3600.0) && c.timeout >= Duration::from_secs(1));
        }
        check_plugin::<Ipmi>(&pairs)?;
    }
}

#[cfg(feature = "redfish")]
proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn redfish_keys(pairs in assignments(<slurm_energy_logic::Redfish as Plugin>::KEYS)) {
        use slurm_energy_logic::{Redfish, RedfishConfig};
        if let Some(c) = check_config(&pairs, RedfishConfig::parse, RedfishConfig::show)? {
            prop_assert!(secs_within(c.frequency, 0.1, 3600.0) && secs_within(c.timeout, 0.1, 60.0));
        }
        check_plugin::<Redfish>(&pairs)?;
    }
}

proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn variorum_keys(pairs in assignments(<slurm_energy_logic::variorum::Variorum as Plugin>::KEYS)) {
        use slurm_energy_logic::variorum::VariorumConfig;
        use slurm_energy_logic::variorum::Variorum;
        if let Some(c) = check_config(&pairs, VariorumConfig::parse, VariorumConfig::show)? {
            prop_assert!(secs_within(c.period, 0.1, 86_400.0) && secs_within(c.timeout, 1.0, 86_400.0));
        }
        check_plugin::<Variorum>(&pairs)?;
    }
}

#[cfg(feature = "gpu")]
proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn gpu_keys(pairs in assignments(<slurm_energy_logic::Gpus as Plugin>::KEYS)) {
        check_plugin::<slurm_energy_logic::Gpus>(&pairs)?;
    }
}

// ---- gres.conf and host lists ----

fn host_list() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,4}[0-9]{0,2}",
        ("[a-z]{1,4}", 0u64..20, 0u64..8, "[a-z]{0,2}")
            .prop_map(|(p, lo, n, s)| format!("{p}[{lo}-{}]{s}", lo + n)),
        ("[a-z]{1,4}", 0u64..9, 0u64..9).prop_map(|(p, a, b)| format!("{p}[0{a},{b}-{}],x", b + 2)),
        // ranges too long to expand, and numbers too big for any
        ("[a-z]{1,4}", 1_000_001u64..=u64::MAX).prop_map(|(p, hi)| format!("{p}[0-{hi}]")),
        "[a-z]{1,4}\\[[0-9]{19,24}\\]",
        "[a-z0-9\\[\\],-]{0,14}",
    ]
}

fn gres_line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        host_list().prop_map(|h| format!("NodeName={h}")),
        select(vec![
            "Name=gpu",
            "name=GPU",
            "Name=shard",
            "Name=mps",
            "Count=8",
            "Type=a100"
        ])
        .prop_map(String::from),
        host_list().prop_map(|h| format!("File=/dev/{h}")),
        host_list().prop_map(|h| format!("MultipleFiles=/dev/nvidia0,/dev/{h}")),
        select(vec![
            "AutoDetect=nvml",
            "AutoDetect=nvidia",
            "AutoDetect=off",
            "autodetect=",
            "AutoDetect=none",
            "AutoDetect=OFF"
        ])
        .prop_map(String::from),
        "[A-Za-z]{1,8}=[^ \\n#]{0,10}",
        "#.{0,20}",
        "[^\\n]{0,20}",
    ];
    prop::collection::vec(word, 0..6).prop_map(|w| w.join(" "))
}

/// The line numbers an error message names.
fn named_lines(error: &str) -> Vec<usize> {
    error
        .match_indices("line ")
        .filter_map(|(i, m)| {
            let digits: String = error[i + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

proptest! {
    #![proptest_config(cases(CHEAP))]

    /// slurmctld's GRES detail of a node (`gpu:tesla:2(IDX:0-1),shard:3(2/4,1/4)`) gives
    /// GPU GRES of indexes within bounds, or an error quoting the text.
    #[test]
    fn gres_detail(items in prop::collection::vec(prop_oneof![
        ("(gpu|shard|mps|tmpfs)(:[a-z0-9]{1,5})?", 0u64..300, "[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,2})?")
            .prop_map(|(n, c, i)| format!("{n}:{c}(IDX:{i})")),
        ("(shard|mps)", 0u64..9, prop::collection::vec((0u64..5, 1u64..5), 1..4))
            .prop_map(|(n, c, p)| format!("{n}:{c}({})", p.iter().map(|(u, t)| format!("{u}/{t}")).collect::<Vec<_>>().join(","))),
        "(gpu|bandwidth)(:[a-z]{1,4})?\\(CNT:[0-9]{1,4}\\)",
        "[a-z0-9:(),/-]{0,16}",
    ], 0..4)) {
        let text = items.join(",");
        match gres_on_node(&text) {
            Ok(held) => prop_assert!(held.iter().all(|h| ["gpu", "shard", "mps"].contains(&h.name.as_str())
                && h.indexes.iter().all(|&i| i <= 65_535)), "{held:?}"),
            Err(e) => prop_assert!(e.contains(&format!("{text:?}")), "{e}"),
        }
    }

    /// gres.conf gives an order or an error that names an existing line.
    #[test]
    fn gres_conf(lines in prop::collection::vec(gres_line(), 0..10), node in select(vec!["n1", "a0", "x", ""])) {
        let text = lines.join("\n");
        match GresOrder::parse(&text, node) {
            Ok(GresOrder::Files(records)) => {
                prop_assert!(records.iter().flatten().all(|f| !f.as_os_str().is_empty()));
            }
            Ok(GresOrder::Detected | GresOrder::DetectedByFile) => {}
            Err(e) => {
                let named = named_lines(&e);
                prop_assert!(!named.is_empty() && named.iter().all(|n| (1..=lines.len()).contains(n)), "{e}");
            }
        }
    }

    #[test]
    fn gres_conf_any_text(text in any_text()) {
        if let Err(e) = GresOrder::parse(&text, "n1") {
            prop_assert!(!named_lines(&e).is_empty(), "{e}");
        }
    }

    #[test]
    fn host_lists(list in prop_oneof![host_list(), any_text()]) {
        if let Ok(names) = hostlist::expand(&list) {
            prop_assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
        }
    }
}

// ---- the ledger file ----

/// A ledger as slurmd writes it (version 2), with every kind of field: a part without
/// power, a step without its own time (written before steps were dated).
const LEDGER: &str = r#"{"version":2,"epoch":7,"sampled_at":1700000100.5,"floor_watts":120.5,"learned_idle_watts":120.5,"source":"rust_rapl: RAPL","node":{"joules":5000.0,"watts":300.0,"since":1700000000.0},"parts":[{"label":"Cpu","joules":100.0,"watts":50.0},{"label":"Memory","joules":20.0,"watts":null}],"counts":[{"name":"package0","value_uj":123456789,"wraps_at_uj":262144000000,"max_watts":1000.0},{"name":"dram0","value_uj":5,"wraps_at_uj":null,"max_watts":500.0}],"jobs":[{"job":12,"last_seen":1700000100.5,"usage_ns":4000000000,"account":{"joules":2500.0,"watts":150.0,"since":1700000010.0},"steps":[{"step":0,"last_seen":1700000100.5,"account":{"joules":2000.0,"watts":120.0,"since":1700000011.0}},{"step":4294967291,"account":{"joules":500.0,"watts":30.0,"since":1700000010.0}}]}]}"#;

/// JSON values that break a field: huge, negative, of another type, nested, long.
fn bad_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        select(vec![
            json!(1e308),
            json!(-1e308),
            json!(-1.0),
            json!(-1),
            json!(-0.0),
            json!(0),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(4_294_967_296u64),
            json!(f64::MIN_POSITIVE),
            json!("300"),
            json!(""),
            Value::Null,
            json!(true),
            json!([]),
            json!({}),
            json!([1, 2]),
            json!({"Reading": 5}),
            json!({"GPU_0": 1e308, "GPU_1": 1e308}),
        ]),
        any::<f64>().prop_map(|f| json!(f)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        ".{0,10}".prop_map(Value::String),
        (1usize..60).prop_map(|depth| (0..depth).fold(json!(1.0), |v, _| json!([v]))),
        (1000usize..100_000).prop_map(|n| Value::String("x".repeat(n))),
    ]
}

/// Every path to a value in `v`, as JSON pointers.
fn pointers(v: &Value, here: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                pointers(
                    child,
                    format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{here}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(here);
}

#[derive(Debug, Clone)]
enum Mutation {
    /// The value at the `n`-th path (modulo their number) becomes this.
    Replace(usize, Value),
    /// The `n`-th path is removed.
    Remove(usize),
    /// A member is added to the object or array at the `n`-th path.
    Add(usize, String, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let key = prop_oneof![
        select(vec![
            "socket_0",
            "Socket_1",
            "socket_1023",
            "socket_1024",
            "socket_999999",
            "socket_4000000000",
            "power_node_watts",
            "power_gpu_watts",
            "power_cpu_watts_socket_2",
            "power_gpu_socket_1023",
            "host",
            "timestamp",
            "EnergykWh",
            "PowerControl",
            "joules",
        ])
        .prop_map(String::from),
        "[a-zA-Z_0-9]{0,12}",
    ];
    prop_oneof![
        3 => (any::<usize>(), bad_json()).prop_map(|(n, v)| Mutation::Replace(n, v)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => (any::<usize>(), key, bad_json()).prop_map(|(n, k, v)| Mutation::Add(n, k, v)),
    ]
}

/// `doc` with the mutations applied, each at a path of the document as it then is.
fn mutate(doc: &Value, mutations: &[Mutation]) -> Value {
    let mut doc = doc.clone();
    for m in mutations {
        let mut paths = Vec::new();
        pointers(&doc, String::new(), &mut paths);
        let pick = |n: usize| paths[n % paths.len()].clone();
        match m {
            Mutation::Replace(n, v) => {
                if let Some(at) = doc.pointer_mut(&pick(*n)) {
                    *at = v.clone();
                }
            }
            Mutation::Remove(n) => {
                let path = pick(*n);
                if let Some((parent, last)) = path.rsplit_once('/')
                    && let Some(p) = doc.pointer_mut(parent)
                {
                    match p {
                        Value::Object(m) => {
                            m.remove(&last.replace("~1", "/").replace("~0", "~"));
                        }
                        Value::Array(a) => {
                            if let Ok(i) = last.parse::<usize>()
                                && i < a.len()
                            {
                                a.remove(i);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Mutation::Add(n, k, v) => match doc.pointer_mut(&pick(*n)) {
                Some(Value::Object(m)) => {
                    m.insert(k.clone(), v.clone());
                }
                Some(Value::Array(a)) => a.push(v.clone()),
                _ => {}
            },
        }
    }
    doc
}

fn clean(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn clean_account(a: &Account) -> bool {
    clean(a.joules) && clean(a.watts) && clean(a.since)
}

/// Every figure a loaded ledger gives is finite and not negative.
fn check_ledger(l: &Ledger) -> Result<(), TestCaseError> {
    prop_assert!(clean_account(&l.node()), "node {:?}", l.node());
    prop_assert!(l.learned_idle_watts().is_none_or(clean));
    prop_assert!(clean(l.sampled_at()));
    for p in l.parts() {
        prop_assert!(clean(p.joules) && p.watts.is_none_or(clean), "{p:?}");
    }
    for j in l.jobs() {
        prop_assert!(
            clean_account(&j.account()) && clean(j.last_seen()),
            "job {}",
            j.id
        );
        for (step, a) in j.steps() {
            prop_assert!(clean_account(&a), "job {} step {step:?}: {a:?}", j.id);
        }
    }
    Ok(())
}

#[test]
fn the_unmutated_ledger_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.json");
    fs::write(&path, LEDGER).expect("write");
    let l = Ledger::load(&path).expect("loads").expect("a ledger");
    assert_eq!((l.epoch(), l.jobs().count(), l.parts().len()), (7, 1, 2));
    assert_eq!(l.learned_idle_watts(), Some(120.5));
    // a ledger of before the floor: its lowest interval's power is not taken
    let before = LEDGER.replace(r#""floor_watts":120.5,"#, "");
    let l = Ledger::parse(before.as_bytes()).expect("loads");
    assert_eq!(l.learned_idle_watts(), None);
}

/// What `ledger_fields` found: a ledger whose learned static power was -1 loaded with a
/// static power of -1 W, which a step in shared mode would then be charged by.
#[test]
fn a_loaded_ledger_never_has_a_negative_idle_power() {
    let doc = LEDGER.replace(r#""floor_watts":120.5"#, r#""floor_watts":-1"#);
    let learned = Ledger::parse(doc.as_bytes())
        .ok()
        .and_then(|l| l.learned_idle_watts());
    assert!(learned.is_none_or(clean), "{learned:?}");
}

proptest! {
    #![proptest_config(cases(FILES))]

    /// A ledger with fields broken loads with clean figures, or not at all.
    #[test]
    fn ledger_fields(mutations in prop::collection::vec(mutation(), 1..4)) {
        let doc = mutate(&serde_json::from_str(LEDGER).expect("valid"), &mutations);
        if let Ok(l) = Ledger::parse(doc.to_string().as_bytes()) {
            check_ledger(&l)?;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger.json");
        fs::write(&path, doc.to_string()).expect("write");
        if let Ok(Some(l)) = Ledger::load(&path) {
            check_ledger(&l)?;
        }
    }

    /// Any bytes in the ledger's place: a ledger with clean figures, or an error.
    #[test]
    fn ledger_bytes(bytes in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        (0usize..LEDGER.len(), any::<u8>()).prop_map(|(i, b)| {
            let mut v = LEDGER.as_bytes().to_vec();
            v[i] = b;
            v
        }),
        (1usize..100_000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
    ]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger.json");
        fs::write(&path, &bytes).expect("write");
        if let Ok(Some(l)) = Ledger::load(&path) {
            check_ledger(&l)?;
        }
    }
}

// ---- /proc and the cgroups: what the kernel writes, and titles a job's owner sets ----

fn cgroup_component() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "job_7",
            "job_77",
            "job_",
            "job_x",
            "step_0",
            "step_batch",
            "step_extern",
            "step_interactive",
            "step_4294967291",
            "slurm",
            "user",
            "task_0",
            "system",
            "system.slice",
            "slurmstepd.scope",
            "s9f3a",
            "..",
            ".",
            "",
            "step_0 ",
            "uid_1000",
        ])
        .prop_map(String::from),
        "[^/\\n:]{0,10}",
    ]
}

fn cgroup_line() -> impl Strategy<Value = String> {
    let controllers = prop_oneof![
        select(vec![
            "",
            "cpuacct",
            "cpu,cpuacct",
            "cpuset",
            "memory",
            "freezer",
            "devices",
            "pids",
            "name=systemd",
            "cpuacct,cpu"
        ])
        .prop_map(String::from),
        "[a-z,=]{0,12}",
    ];
    let line = (
        0u32..14,
        controllers,
        prop::collection::vec(cgroup_component(), 0..8),
    )
        .prop_map(|(id, c, parts)| format!("{id}:{c}:/{}", parts.join("/")));
    prop_oneof![4 => line, 1 => "[^\\n]{0,30}"]
}

fn proc_cgroup() -> impl Strategy<Value = String> {
    prop::collection::vec(cgroup_line(), 0..6).prop_map(|l| l.join("\n"))
}

fn step_id() -> impl Strategy<Value = StepId> {
    prop_oneof![
        Just(StepId::BATCH),
        Just(StepId::EXTERN),
        Just(StepId::INTERACTIVE),
        (0u32..4).prop_map(StepId),
        any::<u32>().prop_map(StepId),
    ]
}

/// A cpuset list: ranges of any CPU numbers, or anything.
fn cpu_list() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        (0u32..300).prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        (0u32..300, 0u32..300).prop_map(|(a, b)| format!("{a}-{b}")),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| format!("{a}-{b}")),
        Just("0-4294967295".to_string()),
        "[0-9a-z -]{0,6}",
    ];
    prop_oneof![
        4 => prop::collection::vec(part, 0..6).prop_map(|p| p.join(",")),
        1 => any_text(),
    ]
}

/// The count of a cpuset list as the kernel means it, in u64: unreadable parts are not
/// counted.
fn true_cpu_count(list: &str) -> u64 {
    list.split(',')
        .map(|part| {
            let part = part.trim();
            match part.split_once('-') {
                Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                    (Ok(a), Ok(b)) if a <= b => u64::from(b - a) + 1,
                    _ => 0,
                },
                None => u64::from(part.parse::<u32>().is_ok()),
            }
        })
        .sum()
}

/// `cpu.stat` (v2) or `cpuacct.usage` (v1) as the kernel writes them, with any number,
/// or anything.
fn usage_file(v2: bool) -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<u64>(),
        0u64..1_000_000_000_000,
        Just(u64::MAX),
        Just(u64::MAX / 1000 + 1)
    ];
    let text = number.prop_map(move |n| {
        if v2 {
            format!("usage_usec {n}\nuser_usec 1\nsystem_usec 2\n")
        } else {
            format!("{n}\n")
        }
    });
    prop_oneof![3 => text, 1 => any_text()]
}

/// The CPU time in ns a usage file says: v1's ns, v2's `usage_usec` in ns when that fits.
fn usage_ns(v2: bool, text: &str) -> Option<u64> {
    let text = text.trim();
    if v2 {
        text.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|us| us.trim().parse::<u64>().ok())
            .and_then(|us| us.checked_mul(1000))
    } else {
        text.parse().ok()
    }
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("mkdir");
    }
    fs::write(path, text).expect("write");
}

proptest! {
    #![proptest_config(cases(CHEAP))]

    /// A step's cgroup is the deepest directory named as Slurm names the step's, with its
    /// job's above it, relative to the hierarchy's root.
    #[test]
    fn step_cgroups((text, step) in step_id().prop_flat_map(|step| {
        // a line that holds the step's directory, between others
        let own = (0u32..14, prop::collection::vec(cgroup_component(), 0..3), prop::collection::vec(cgroup_component(), 0..3))
            .prop_map(move |(id, above, below)| {
                let controllers = if id == 0 { "" } else { "cpu,cpuacct" };
                format!("{id}:{controllers}:/{}/job_7/{}/{}", above.join("/"), step.cgroup_name(), below.join("/"))
            });
        let text = prop_oneof![
            proc_cgroup(),
            (proc_cgroup(), own, proc_cgroup()).prop_map(|(a, o, b)| format!("{a}\n{o}\n{b}")),
        ];
        (text, Just(step))
    }), v2 in any::<bool>()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        if v2 {
            write(&root.join("cgroup.controllers"), "cpu cpuset memory\n");
        } else {
            write(&root.join("cpuacct/cpuacct.usage"), "0\n");
        }
        let tree = CgroupTree::from_path(root).expect("a tree");
        if let Some(sc) = tree.step_cgroup(&text, step) {
            prop_assert!(sc.step.is_relative() && sc.job.is_relative());
            let name = step.cgroup_name();
            prop_assert_eq!(sc.step.file_name().and_then(|n| n.to_str()), Some(name.as_str()));
            prop_assert_eq!(sc.step.parent(), Some(sc.job.as_path()));
            prop_assert!(!sc.job.as_os_str().is_empty());
        }
        for job in JobDir::of_stepd(&text) {
            let _ = job.holds(&text);
        }
    }

    /// A process is its job's exactly when its path lies under the job's directory,
    /// component by component (job_12 does not hold job_123's processes).
    #[test]
    fn job_directories_hold_their_own(
        prefix in prop::collection::vec("[a-z.]{1,8}", 0..3),
        job in 1u32..1000,
        extra_digit in 0u32..10,
        step in step_id(),
        below in prop::collection::vec(cgroup_component(), 0..3),
    ) {
        let base = prefix.join("/");
        let stepd = format!("0::/{base}/job_{job}/{}/slurm", step.cgroup_name());
        let dirs = JobDir::of_stepd(&stepd);
        prop_assert_eq!(dirs.len(), 1);
        let own = format!("0::/{base}/job_{job}/{}/{}", step.cgroup_name(), below.join("/"));
        let other = format!("0::/{base}/job_{job}{extra_digit}/{}/{}", step.cgroup_name(), below.join("/"));
        prop_assert!(dirs[0].holds(&own));
        prop_assert!(!dirs[0].holds(&other));
    }

    /// The number of CPUs of a cpuset list: every CPU listed, however many (saturating
    /// where they do not fit), never wrapped around.
    #[test]
    fn cpu_counts(list in cpu_list()) {
        let expected = u32::try_from(true_cpu_count(&list)).unwrap_or(u32::MAX);
        prop_assert_eq!(count_cpus(&list), expected, "{:?}", list);
    }
}

proptest! {
    #![proptest_config(cases(FILES))]

    /// A job's counters read from its cgroup files: CPU time in ns exactly as the file
    /// says (none when it does not fit), CPUs as listed.
    #[test]
    fn job_counters_from_cgroup_files(
        (v2, job_usage, step_usage) in any::<bool>().prop_flat_map(|v2| (Just(v2), usage_file(v2), usage_file(v2))),
        cpus in cpu_list(),
        memory in prop_oneof![any::<u64>().prop_map(|m| m.to_string()), Just("max".to_string()), any_text()],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let (job, step) = ("job_7", "job_7/step_0");
        let proc_cgroup = if v2 {
            write(&root.join("cgroup.controllers"), "cpu\n");
            write(&root.join(job).join("cpu.stat"), &job_usage);
            write(&root.join(step).join("cpu.stat"), &step_usage);
            write(&root.join(job).join("cpuset.cpus.effective"), &cpus);
            write(&root.join(job).join("memory.max"), &memory);
            "0::/job_7/step_0/slurm"
        } else {
            write(&root.join("cpuacct/cpuacct.usage"), "0\n");
            write(&root.join("cpuacct").join(job).join("cpuacct.usage"), &job_usage);
            write(&root.join("cpuacct").join(step).join("cpuacct.usage"), &step_usage);
            write(&root.join("cpuset").join(job).join("cpuset.cpus"), &cpus);
            write(&root.join("memory").join(job).join("memory.limit_in_bytes"), &memory);
            write(&root.join("cpuset").join(step).join("cpuset.cpus"), &cpus);
            // the slurmstepd, in its step's cpuset (ConstrainCores)
            "11:cpuset:/job_7/step_0"
        };
        let tree = CgroupTree::from_path(root).expect("a tree");
        let mut sc = tree.step_cgroup(proc_cgroup, StepId(0)).expect("the step");
        let counters = sc.job_counters();
        prop_assert_eq!(counters.map(|c| c.usage_ns), usage_ns(v2, &job_usage), "{:?}", job_usage);
        if let Some(c) = counters {
            prop_assert_eq!(c.cpus, u32::try_from(true_cpu_count(cpus.trim())).unwrap_or(u32::MAX), "{:?}", cpus);
        }
        prop_assert_eq!(sc.step_usage_ns(), usage_ns(v2, &step_usage), "{:?}", step_usage);
    }
}

/// A command name as a process may set it (`prctl(PR_SET_NAME)`): up to 15 bytes of
/// anything but NUL, parentheses and spaces included.
fn comm() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just(')'),
            Just('('),
            Just(' '),
            Just('\n'),
            Just('1'),
            Just('x')
        ],
        0..15,
    )
    .prop_map(|c| c.into_iter().collect())
}

/// A title as `exec -a` or `setproctitle` sets it, claims of being a slurmstepd
/// included, and the step it claims where it is one's title.
fn title() -> impl Strategy<Value = (Vec<u8>, Option<StepKey>)> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80).prop_map(|t| (t, None)),
        (
            any::<u32>(),
            step_id(),
            "[^\\x00\\[]{0,10}",
            "[ \\]a-z]{0,8}"
        )
            .prop_map(|(j, s, pre, post)| {
                let ends = post.is_empty() || post.starts_with([' ', ']']);
                (
                    format!("{pre}slurmstepd: [{j}.{}{post}", s.name()).into_bytes(),
                    ends.then_some(StepKey::new(j, s)),
                )
            }),
        (1u32..100, 0u32..3).prop_map(|(j, s)| {
            (
                format!("slurmstepd: [{j}.{s}]\0\0").into_bytes(),
                Some(StepKey::new(j, StepId(s))),
            )
        }),
        "slurmstepd: \\[[0-9.a-z \\]]{0,14}".prop_map(|t| (t.into_bytes(), None)),
    ]
}

proptest! {
    #![proptest_config(cases(CHEAP))]

    /// A slurmstepd's title names its step; a title without Slurm's mark names none
    /// (titles decide nothing alone: the uid and socket are checked too).
    #[test]
    fn titles((title, claimed) in title()) {
        let text = String::from_utf8_lossy(&title).replace('\0', " ");
        let step = own_step(&text);
        if claimed.is_some() {
            prop_assert_eq!(step, claimed, "{:?}", text);
        }
        prop_assert!(step.is_none() || text.contains("slurmstepd: ["), "{:?}", text);
    }
}

proptest! {
    #![proptest_config(cases(FILES))]

    /// The fields of /proc/<pid>/stat count from the end of the command name, whatever it
    /// holds; a process's start is never in the future.
    #[test]
    fn proc_stat(
        name in comm(),
        ppid in any::<u32>(),
        ticks in prop_oneof![0u64..10_000_000, any::<u64>()],
        uptime in prop_oneof![(0.0f64..1e6).prop_map(|u| format!("{u:.2} 5.00\n")), number_text(), any_text()],
        status in prop_oneof![(any::<u32>()).prop_map(|u| format!("Name:\tx\nUid:\t{u}\t{u}\t0\t0\n")), any_text()],
        garbage in any_text(),
        children in prop_oneof![prop::collection::vec(any::<u32>(), 0..5).prop_map(|c| c.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")), any_text()],
        minors in any_text(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let pid = 4242u32;
        let stat = format!(
            "{pid} ({name}) S {ppid} 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {ticks} 1000 100 184467\n"
        );
        write(&root.join("4242/stat"), &stat);
        write(&root.join("4242/status"), &status);
        write(&root.join("4242/task/4242/children"), &children);
        write(&root.join("7/stat"), &garbage);
        write(&root.join("7/status"), &garbage);
        write(&root.join("uptime"), &uptime);
        write(&root.join("driver/nvidia-caps/mig-minors"), &minors);
        let procs = Procs::from_path(root);
        prop_assert_eq!(procs.parent(pid), Some(ppid), "{:?}", stat);
        let before = std::time::SystemTime::now();
        if let Some(started) = procs.started(pid) {
            prop_assert!(started <= std::time::SystemTime::now());
            let up: Option<f64> = uptime.split_whitespace().next().and_then(|u| u.parse().ok());
            if let Some(up) = up.filter(|u| u.is_finite() && *u >= ticks as f64 / 100.0 && *u < 1e9) {
                let age = before.duration_since(started).map_or(0.0, |d| d.as_secs_f64());
                prop_assert!((age - (up - ticks as f64 / 100.0)).abs() < 1.0, "{age} for {up} and {ticks}");
            }
        }
        let _ = (procs.started(7), procs.parent(7), procs.uid(7), procs.uid(pid));
        let kids = procs.children(pid);
        prop_assert!(kids.len() <= children.split_whitespace().count());
        let _ = procs.mig_minors();
        let _ = procs.holding(&[pid, 7], &[12].into());
    }

    /// Only processes of slurmd's uid whose title names a wanted step are candidates.
    #[test]
    fn stepd_candidates(titles in prop::collection::vec((title().prop_map(|(t, _)| t), 0u32..3), 1..6)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for (i, (title, uid)) in titles.iter().enumerate() {
            let pid = 100 + i;
            write(&root.join(format!("{pid}/cmdline")), "");
            fs::write(root.join(format!("{pid}/cmdline")), title).expect("title");
            write(&root.join(format!("{pid}/status")), &format!("Uid:\t{uid}\t0\t0\t0\n"));
        }
        let wanted: std::collections::HashSet<StepKey> =
            [
                StepKey::new(1, StepId(0)),
                StepKey::new(7, StepId::BATCH),
                StepKey::new(12, StepId(1)),
            ]
            .into();
        let found = Procs::from_path(root).stepds(&wanted, 0, &std::sync::atomic::AtomicBool::new(false));
        for (step, pids) in &found {
            prop_assert!(wanted.contains(step));
            for pid in pids {
                let (title, uid) = &titles[*pid as usize - 100];
                prop_assert_eq!(*uid, 0);
                let text = String::from_utf8_lossy(title).replace('\0', " ");
                prop_assert_eq!(own_step(&text), Some(*step));
            }
        }
    }
}

// ---- RAPL: powercap files, MSRs, the CPU topology ----

/// What an `energy_uj` or `max_energy_range_uj` file may hold.
fn counter_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..1_000_000_000).prop_map(|n| format!("{n}\n")),
        2 => any::<u64>().prop_map(|n| format!("{n}\n")),
        2 => number_text(),
        1 => any_text(),
    ]
}

fn energy_never_falls(
    opened: Opened<impl Source>,
    writes: &[impl Fn()],
) -> Result<(), TestCaseError> {
    let Opened {
        source: mut reader,
        sample_period: period,
    } = opened;
    prop_assert!(
        (Duration::from_millis(50)..=Duration::from_secs(1)).contains(&period),
        "{period:?}"
    );
    let t0 = Instant::now();
    let mut last = 0;
    for (k, write) in (1u32..).zip(writes) {
        write();
        let r = reader.poll(t0 + period * k);
        prop_assert!(
            r.energy_uj >= last,
            "energy fell from {last} to {}",
            r.energy_uj
        );
        prop_assert!(r.watts.is_none_or(clean), "{:?}", r.watts);
        for s in &r.parts {
            prop_assert!(s.watts.is_none_or(clean), "{s:?}");
        }
        last = r.energy_uj;
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(FILES))]

    /// Powercap zones with any names, ranges and counter values: opened or refused, and
    /// the energy never falls.
    #[test]
    fn powercap_files(
        zones in prop::collection::vec((select(vec!["package-0", "package-1", "dram", "psys", "core", "", "package"]), counter_text()), 1..4),
        reads in prop::collection::vec(prop::collection::vec(counter_text(), 4), 1..6),
        domains in prop_oneof![Just(None), Just(Some("package,dram,psys")), Just(Some("dram"))],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sys = dir.path().join("sys");
        let zone_dir = |i: usize| sys.join(format!("class/powercap/intel-rapl:{i}"));
        for (i, (name, range)) in zones.iter().enumerate() {
            write(&zone_dir(i).join("name"), &format!("{name}\n"));
            write(&zone_dir(i).join("max_energy_range_uj"), range);
            write(&zone_dir(i).join("energy_uj"), &reads[0][i]);
        }
        let mut config = RaplConfig { source: SourceChoice::Powercap, ..RaplConfig::default() };
        if let Some(d) = domains {
            let mut values = KeyValues::new();
            values.set(slurm_energy_logic::RAPL_KEY_DOMAINS, d);
            config = RaplConfig { source: SourceChoice::Powercap, ..RaplConfig::parse(&values).expect("valid") };
        }
        let paths = SystemPaths { sys: sys.clone(), cpuinfo: dir.path().join("cpuinfo") };
        if let Ok(rapl) = Rapl::open_at(&RaplSettings { keys: config, beside_gpus: false }, &paths) {
            let writes: Vec<_> = reads.iter().map(|values| {
                let (zone_dir, zones) = (&zone_dir, &zones);
                move || for (i, _) in zones.iter().enumerate() {
                    fs::write(zone_dir(i).join("energy_uj"), &values[i]).expect("write");
                }
            }).collect();
            energy_never_falls(rapl, &writes)?;
        }
    }

    /// MSRs, cpuinfo and the CPU topology as any machine (or none) shows them: opened or
    /// refused, and the energy never falls.
    #[test]
    fn msr_files(
        cpuinfo in prop_oneof![
            4 => (select(vec!["GenuineIntel", "AuthenticAMD", "HygonGenuine", "Other"]), prop_oneof![3 => Just(6u64), 2 => Just(0x17), 1 => Just(0x19), 1 => any::<u64>()], prop_oneof![Just(85u64), Just(63), Just(151), any::<u64>()])
                .prop_map(|(v, f, m)| format!("processor\t: 0\nvendor_id\t: {v}\ncpu family\t: {f}\nmodel\t\t: {m}\n")),
            1 => any_text(),
        ],
        online in prop_oneof![2 => Just(None), 1 => cpu_list().prop_map(Some), 2 => Just(Some("0-1".to_string()))],
        package_ids in prop::collection::vec(prop_oneof![3 => Just("0".to_string()), 3 => Just("1".to_string()), 1 => number_text(), 1 => any_text()], 1..3),
        unit in prop_oneof![3 => Just(0xA1003u64), 1 => any::<u64>(), 1 => Just(0)],
        counters in prop::collection::vec(prop::collection::vec(any::<u64>(), 3), 1..6),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sys = dir.path().join("sys");
        write(&dir.path().join("cpuinfo"), &cpuinfo);
        if let Some(online) = &online {
            write(&sys.join("devices/system/cpu/online"), online);
        }
        let msr = |cpu: usize, register: u64, value: u64| {
            use std::os::unix::fs::FileExt;
            let file = fs::OpenOptions::new().create(true).truncate(false).write(true)
                .open(dir.path().join(format!("msr{cpu}"))).expect("msr");
            file.write_all_at(&value.to_le_bytes(), register).expect("write msr");
        };
        let registers = |c: &[u64]| [(0x611u64, c[0]), (0x619, c[1]), (0x64D, c[2]), (0xC001_029B, c[0])];
        for (cpu, id) in package_ids.iter().enumerate() {
            write(&sys.join(format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id")), id);
            msr(cpu, 0x606, unit);
            msr(cpu, 0xC001_0299, unit);
            for (register, value) in registers(&counters[0]) {
                msr(cpu, register, value);
            }
        }
        let config = RaplConfig {
            source: SourceChoice::Msr,
            msr_device: format!("{}/msr%d", dir.path().display()),
            domains: None,
        };
        let paths = SystemPaths { sys, cpuinfo: dir.path().join("cpuinfo") };
        let _ = parse_cpuinfo(&cpuinfo);
        if let Ok(rapl) = Rapl::open_at(&RaplSettings { keys: config, beside_gpus: false }, &paths) {
            let writes: Vec<_> = counters.iter().map(|c| {
                let (msr, package_ids) = (&msr, &package_ids);
                move || for cpu in 0..package_ids.len() {
                    for (register, value) in registers(c) {
                        msr(cpu, register, value);
                    }
                }
            }).collect();
            energy_never_falls(rapl, &writes)?;
        }
    }
}

// ---- pm_counters ----

/// A value file: `VALUE UNIT TIMESTAMP us`, with any value and time, or anything.
fn pm_value(unit: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..10_000_000, 1_700_000_000_000_000u64..1_700_000_100_000_000)
            .prop_map(move |(v, t)| format!("{v} {unit} {t} us\n")),
        2 => (any::<u64>(), any::<u64>()).prop_map(move |(v, t)| format!("{v} {unit} {t} us\n")),
        1 => (number_text(), number_text()).prop_map(move |(v, t)| format!("{v} {unit} {t} us")),
        1 => any_text(),
    ]
}

fn pm_scan() -> impl Strategy<Value = Vec<String>> {
    (
        pm_value("J"),
        pm_value("W"),
        pm_value("J"),
        pm_value("W"),
        prop_oneof![Just("1".to_string()), Just("2".to_string()), any_text()],
    )
        .prop_map(|(e, p, ce, cp, startup)| vec![e, p, ce, cp, startup])
}

const PM_FILES: [&str; 5] = ["energy", "power", "cpu_energy", "cpu_power", "startup"];

proptest! {
    #![proptest_config(cases(CHEAP))]

    #[test]
    fn pm_counters_values(text in prop_oneof![pm_value("J"), pm_value("W")], unit in select(vec!["J", "W"])) {
        if let Some(v) = parse_pm_counters_value(&text, unit) {
            prop_assert!(text.contains(&v.value.to_string()) && text.contains(&v.at_us.to_string()));
        }
    }
}

proptest! {
    #![proptest_config(cases(FILES))]

    /// The controller's files holding anything, scan after scan: the energy never falls
    /// and every power is finite and not negative.
    #[test]
    fn pm_counters_files(scans in prop::collection::vec(pm_scan(), 1..6)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let put = |scan: &[String]| {
            for (file, text) in PM_FILES.iter().zip(scan) {
                fs::write(dir.path().join(file), text).expect("write");
            }
            fs::write(dir.path().join("freshness"), "1\n").expect("write");
        };
        put(&scans[0]);
        let config = PmCountersConfig { dir: dir.path().to_path_buf(), max_watts: None };
        if let Ok(Opened { source: mut pm, .. }) = PmCounters::open(&config) {
            let writes: Vec<_> = scans.iter().map(|s| move || put(s)).collect();
            let t0 = Instant::now();
            let mut last = 0;
            for (k, w) in (1u32..).zip(&writes) {
                w();
                let r = pm.poll(t0 + Duration::from_secs(k.into()));
                prop_assert!(r.energy_uj >= last);
                prop_assert!(r.watts.is_none_or(clean));
                prop_assert!(r.parts.iter().all(|s| s.watts.is_none_or(clean)));
                last = r.energy_uj;
            }
        }
    }
}

// ---- hwmon ----

/// A hwmon attribute: micro-units as the kernel writes them, any number, or anything.
fn hwmon_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..2_000_000_000).prop_map(|v| format!("{v}\n")),
        1 => any::<u64>().prop_map(|v| format!("{v}\n")),
        1 => number_text(),
        1 => any_text(),
    ]
}

proptest! {
    #![proptest_config(cases(20))]

    /// A Grace Hopper module's meter, its label and interval holding anything, read by the
    /// plugin's poller round after round: the energy never falls, every power is finite and
    /// not negative, and nothing panics.
    #[test]
    fn hwmon_files(
        label in prop_oneof![Just("Module Power Socket 0".to_string()), any_text()],
        interval in hwmon_value(),
        scans in prop::collection::vec(hwmon_value(), 1..4),
    ) {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("hwmon1");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("name"), "power_meter\n").expect("write");
        fs::write(dir.join("power1_oem_info"), &label).expect("write");
        fs::write(dir.join("power1_average_interval"), &interval).expect("write");
        fs::write(dir.join("power1_average"), &scans[0]).expect("write");
        let mut values = KeyValues::new();
        values.set("EnergyHwmonDir", root.path().display().to_string());
        let config = Hwmon::parse_config(&values).expect("a valid directory");
        if let Ok(Opened { source: mut hw, .. }) = Hwmon::open(&config) {
            let mut last = 0;
            for scan in &scans {
                fs::write(dir.join("power1_average"), scan).expect("write");
                std::thread::sleep(Duration::from_millis(120));
                let r = hw.poll(Instant::now());
                prop_assert!(r.energy_uj >= last);
                prop_assert!(r.watts.is_none_or(clean));
                last = r.energy_uj;
            }
        }
    }
}

// ---- Variorum's JSON ----

mod variorum {
    use super::*;
    use slurm_energy_logic::variorum::json::{MAX_SOCKETS, NodePower, parse, parse_value};
    use slurm_energy_logic::variorum::protocol::{Invocation, Line};

    /// Samples as the releases write them (see `variorum::json`'s tests for their origin).
    const SAMPLES: [&str; 4] = [
        r#"{"hostname": "quartz12", "timestamp": 1614800000123456, "power_cpu_socket_0": 61.5, "power_mem_socket_0": 8.25, "power_gpu_socket_0": -1.0, "power_cpu_socket_1": 58.0, "power_mem_socket_1": 7.5, "power_gpu_socket_1": -1.0, "power_node": 135.25}"#,
        r#"{"host": "corona285", "timestamp": 1687898983502846, "power_node_watts": 384.0, "power_cpu_watts_socket_0": 85.0, "power_mem_watts_socket_0": 23.0, "power_gpu_watts_socket_0": 66.0, "power_cpu_watts_socket_1": 77.0, "power_mem_watts_socket_1": 23.0, "power_gpu_watts_socket_1": 66.0}"#,
        r#"{"lassen27": {"timestamp": 1711468800000002, "power_node_watts": 1100.0, "num_gpus_per_socket": 2, "socket_0": {"power_cpu_watts": 120.0, "power_mem_watts": 30.0, "power_gpu_watts": {"GPU_0": 210.5, "GPU_1": 190.0}}, "socket_1": {"power_cpu_watts": 110.0, "power_mem_watts": 28.0, "power_gpu_watts": {"GPU_2": 200.0, "GPU_3": 195.5}}}}"#,
        r#"{"tuolumne1": {"timestamp": 1711468800000004, "Socket_0": {"power_cpu_watts": 200.0, "power_apu_watts": {"APU_0": 550.0}}, "socket_1": {"power_io_watts": 12.0, "power_mem_watts": -1.0}}}"#,
    ];

    fn check(p: &NodePower) -> Result<(), TestCaseError> {
        prop_assert!(clean(p.node_watts) && p.node_watts > 0.0, "{p:?}");
        prop_assert!(p.reported_node_watts.is_none_or(clean), "{p:?}");
        prop_assert!(p.sockets.len() <= MAX_SOCKETS);
        for s in &p.sockets {
            for w in [
                s.cpu_watts,
                s.mem_watts,
                s.gpu_watts,
                s.io_watts,
                s.apu_watts,
            ] {
                prop_assert!(w.is_none_or(clean), "{s:?}");
            }
            prop_assert!(
                s.gpus.iter().chain(&s.apus).all(|d| clean(d.watts)),
                "{s:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn every_sample_parses() {
        for s in SAMPLES {
            check(&parse(s).expect(s)).expect(s);
        }
    }

    proptest! {
        #![proptest_config(cases(CHEAP))]

        /// A release's sample with fields broken: clean figures, or an error.
        #[test]
        fn variorum_fields(sample in 0..SAMPLES.len(), mutations in prop::collection::vec(mutation(), 1..4)) {
            let doc = mutate(&serde_json::from_str(SAMPLES[sample]).expect("valid"), &mutations);
            if let Ok(p) = parse_value(&doc) {
                check(&p)?;
            }
            if let Ok(p) = parse(&doc.to_string()) {
                check(&p)?;
            }
        }

        /// The sampler's lines and command line: decoded or refused.
        #[test]
        fn sampler_lines(text in prop_oneof![any_text(), long_text(), (0usize..SAMPLES.len(), mutation()).prop_map(|(s, m)| {
            json!({"ok": true, "json": mutate(&serde_json::from_str(SAMPLES[s]).expect("valid"), &[m]).to_string(), "t_ns": 5}).to_string()
        })]) {
            if let Ok(Line::Sample { json, .. }) = Line::decode(&text)
                && let Ok(p) = parse(&json)
            {
                check(&p)?;
            }
        }

        #[test]
        fn sampler_arguments(args in prop::collection::vec(prop_oneof![
            select(vec!["--library", "--period", "--result-fd", "--parent"]).prop_map(String::from),
            number_text(),
            any_text(),
        ], 0..9)) {
            if let Ok(i) = Invocation::parse(args.into_iter().map(std::ffi::OsString::from)) {
                prop_assert!(!i.period.is_zero() && i.period <= Duration::from_secs(86_400) && i.result_fd >= 0);
            }
        }
    }
}

// ---- Redfish resources ----

#[cfg(feature = "redfish")]
mod redfish {
    use super::*;
    use slurm_energy_logic::RedfishMethod;

    fn reading() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => (0.0f64..1e7).prop_map(|x| json!(x)),
            3 => bad_json(),
        ]
    }

    /// A resource as a BMC may send it: the reading's fields with any values.
    fn resource() -> impl Strategy<Value = Value> {
        prop_oneof![
            (reading(), reading(), reading()).prop_map(|(j, k, w)| json!({
                "EnergyJoules": {"Reading": j}, "EnergykWh": {"Reading": k}, "PowerWatts": {"Reading": w}
            })),
            (reading(), select(vec!["EnergyJoules", "EnergyWh", "EnergykWh", "Power", ""])).prop_map(|(r, t)| json!({
                "ReadingType": t, "Reading": r
            })),
            prop::collection::vec(reading(), 0..8).prop_map(|w| json!({
                "PowerControl": w.into_iter().map(|w| json!({"PowerConsumedWatts": w})).collect::<Vec<_>>()
            })),
            (resource_base(), prop::collection::vec(mutation(), 1..3)).prop_map(|(d, m)| mutate(&d, &m)),
        ]
    }

    fn resource_base() -> impl Strategy<Value = Value> {
        select(vec![
            json!({"EnergykWh": {"Reading": 0.5}, "PowerWatts": {"Reading": 300}}),
            json!({"ReadingType": "EnergyJoules", "Reading": 1234.5}),
            json!({"PowerControl": [{"PowerConsumedWatts": 200}, {"PowerConsumedWatts": 44.5}]}),
        ])
    }

    proptest! {
        #![proptest_config(cases(CHEAP))]

        /// What a chassis says now: finite, not negative figures, or an error naming the
        /// resource.
        #[test]
        fn redfish_readings(doc in resource(), method in 0..4usize) {
            let path = "/redfish/v1/Chassis/1/X".to_string();
            let method = match method {
                0 => RedfishMethod::MetricsEnergy { path },
                1 => RedfishMethod::SensorEnergy { path },
                2 => RedfishMethod::MetricsPower { path },
                _ => RedfishMethod::LegacyPower { path },
            };
            match method.read(&doc) {
                Ok(r) => {
                    // a power reading is passed on as the BMC sent it: the power screen
                    // drops what no node draws (negative, non-finite, over its bound)
                    // before it is energy (power::tests)
                    prop_assert!(r.energy_j.is_none_or(clean) && r.capacity_w.is_none_or(clean), "{r:?} from {doc}");
                    prop_assert!(!r.watts.is_some_and(f64::is_nan), "{r:?} from {doc}");
                }
                Err(e) => prop_assert!(e.contains("/Chassis/1/X"), "{e}"),
            }
        }
    }
}
