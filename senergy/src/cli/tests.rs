use std::collections::BTreeMap;

use clap::CommandFactory;
use clap::error::ErrorKind;

use super::*;

const SUBCOMMANDS: [&str; 3] = ["job", "usage", "check"];

/// A fixed "now" for usage's default period: 2027-01-15T08:00:00Z.
const NOW: i64 = 1_800_000_000;

fn subcommand(name: &str) -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand(name)
        .unwrap_or_else(|| panic!("no subcommand {name}"))
        .clone()
}

/// `senergy NAME --help` (long) or `-h` (short), as printed.
fn help(name: &str, long: bool) -> String {
    let mut sub = subcommand(name);
    let styled = if long {
        sub.render_long_help()
    } else {
        sub.render_help()
    };
    styled.to_string()
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("senergy").chain(args.iter().copied()))
}

#[test]
fn command_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn check_help_offers_only_what_check_reads() {
    for long in [false, true] {
        let text = help("check", long);
        for absent in [
            "--csv",
            "--config",
            "--carbon-intensity",
            "--carbon-csv",
            "--price",
            "--currency",
            "--prometheus",
            "--plot",
        ] {
            assert!(
                !text.contains(absent),
                "check's help offers {absent}:\n{text}"
            );
        }
        for present in ["--node", "--compare", "--json"] {
            assert!(
                text.contains(present),
                "check's help lacks {present}:\n{text}"
            );
        }
    }
    // usage asks no Prometheus and draws no plot
    let usage = help("usage", true);
    assert!(!usage.contains("--prometheus <") && !usage.contains("--plot"));
}

/// A refused combination is clap's own error (exit 2), wherever it is written.
#[test]
fn refused_combinations_are_the_parsers_errors() {
    for args in [
        &["job", "1", "--json", "--csv"][..],
        &["job", "--csv", "1", "--json"],
        &["usage", "--json", "--csv"],
    ] {
        let kind = parse(args).err().map(|e| e.kind());
        assert_eq!(kind, Some(ErrorKind::ArgumentConflict), "{args:?}");
    }
    for args in [
        &["check", "--csv"][..],
        &["check", "--price", "0.2"],
        &["usage", "--prometheus", "http://p:9090"],
        &["usage", "--plot", "u.svg"],
    ] {
        let kind = parse(args).err().map(|e| e.kind());
        assert_eq!(kind, Some(ErrorKind::UnknownArgument), "{args:?}");
    }
    assert!(parse(&["job", "1", "--json", "--csv"]).is_err_and(|e| e.exit_code() == 2));
}

/// The example lines of a help text: those under EXAMPLES that run senergy.
fn examples(text: &str) -> Vec<String> {
    let Some((_, block)) = text.split_once("\nEXAMPLES\n") else {
        return Vec::new();
    };
    block
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("senergy ") || l.starts_with("sudo senergy "))
        .map(String::from)
        .collect()
}

/// A shell line's words as senergy gets them: no `sudo`, no comment, no redirection.
fn words(line: &str) -> Vec<&str> {
    line.split('#')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip_while(|w| *w != "senergy")
        .skip(1)
        .take_while(|w| !w.starts_with('>'))
        .collect()
}

#[test]
fn each_subcommands_help_ends_with_examples_that_run() {
    for name in SUBCOMMANDS {
        for long in [false, true] {
            let text = help(name, long);
            let lines = examples(&text);
            assert!(lines.len() >= 2, "senergy {name}: {lines:?}\n{text}");
            // the examples are the help's last section
            let last = text.trim_end().lines().last().unwrap_or_default();
            assert!(text.rfind("\nEXAMPLES\n") > text.rfind("\nEXIT"), "{text}");
            assert!(last.starts_with("        "), "{name}: ends with {last:?}");
            for line in &lines {
                let args = words(line);
                assert_eq!(args.first(), Some(&name), "{line}");
                if let Err(e) = parse(&args) {
                    panic!("the example {line:?} of senergy {name} does not parse: {e}");
                }
            }
        }
    }
    let job = help("job", true);
    for wanted in ["senergy job 1234 --plot job.svg", "--carbon-intensity 350"] {
        assert!(job.contains(wanted), "{job}");
    }
}

/// Every schema the help mentions is docs/senergy.md's; the README has none.
#[test]
fn json_help_names_the_manual() {
    for name in SUBCOMMANDS {
        let sub = subcommand(name);
        let json = sub
            .get_arguments()
            .find(|a| a.get_id() == "json")
            .and_then(|a| a.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            json.contains("docs/senergy.md"),
            "senergy {name} --json: {json:?}"
        );
        let text = help(name, true);
        assert!(!text.contains("README"), "senergy {name}: {text}");
    }
    let top = Cli::command().render_long_help().to_string();
    assert!(top.contains("docs/senergy.md"), "{top}");
    assert!(!top.contains("README"), "{top}");
    // one line per subcommand, with its purpose
    for name in SUBCOMMANDS {
        let line = top
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {top}"));
        assert!(line.split_whitespace().count() > 4, "{line}");
    }
}

/// Every invocation the docs, the demo and the cluster tests make still parses.
#[test]
fn documented_invocations_parse() {
    let mut lines: Vec<String> = Vec::new();
    for doc in [
        include_str!("../../../README.md"),
        include_str!("../../../docs/senergy.md"),
    ] {
        let mut in_sh = false;
        for line in doc.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
            } else if in_sh && (line.starts_with("senergy ") || line.starts_with("sudo senergy ")) {
                lines.push(line.into());
            }
        }
    }
    assert!(lines.len() >= 9, "{lines:?}");
    // ci/demo.sh and tests/tests/cluster_*.rs, as they call senergy
    for line in [
        "senergy job 7 --carbon-intensity 350 --price 0.25 --currency EUR",
        "senergy job 7 --json --carbon-intensity 300 --price 0.2 --currency EUR",
        "senergy job 7 --config /x/senergy.conf",
        "senergy job 7 --carbon-csv /x/grid.csv",
        "senergy job 7 --json --carbon-csv /x/grid.csv --prometheus http://127.0.0.1:9090 --plot /x/job.svg",
        "senergy usage --start 1 --end 2 --json --carbon-intensity 200 --price 0.1",
        "senergy usage --start 1 --end 2 --json --accounts acct_b",
        "senergy usage --start 1 --end 2 --json --users alice",
        "senergy check --node n1",
        "senergy check --compare 3 --json",
        "senergy check --json",
    ] {
        lines.push(line.into());
    }
    for line in &lines {
        if let Err(e) = parse(&words(line)) {
            panic!("{line:?} does not parse: {e}");
        }
    }
}

/// The site file of the tests: empty, so that no test reads /etc/slurm/senergy.conf or
/// $SENERGY_CONF; and one that sets every figure.
struct Files {
    _dir: tempfile::TempDir,
    empty: String,
    site: String,
    series: String,
    pue_series: String,
}

fn files() -> Files {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8 path").to_string()
    };
    let empty = write("empty.toml", "");
    let site = write(
        "site.toml",
        "carbon_intensity = 123\nprice_per_kwh = 0.5\ncurrency = \"CHF\"\n",
    );
    let series = write("grid.csv", "time,g\n2026-01-01T00:00:00Z,300\n");
    let pue_series = write("pue.csv", "time,pue\n2026-01-01T00:00:00Z,1.3\n");
    Files {
        _dir: dir,
        empty,
        site,
        series,
        pue_series,
    }
}

/// What a subcommand's code reads of its command line: its plan, in words.
fn plan_of(args: &[&str]) -> String {
    let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let plan = match &cli.command {
        None => cli.list.plan(NOW).map(|p| format!("{p:?}")),
        Some(Command::Job(a)) => a.plan().map(|p| format!("{p:?}")),
        Some(Command::Usage(a)) => a.plan(NOW).map(|p| format!("{p:?}")),
        Some(Command::Check(a)) => a.plan().map(|p| format!("{p:?}")),
        Some(Command::Mail(a)) => Ok(format!("{:?}", a.args)),
        Some(Command::Record(a)) => Ok(format!(
            "{:?} {:?} {:?} {:?}",
            a.job, a.node, a.entry, a.since
        )),
    };
    plan.unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Each option a subcommand offers changes what its code does: given, the plan differs
/// from the plan without it. An option added without a value here fails the test.
#[test]
fn every_option_a_subcommand_offers_changes_its_plan() {
    let f = files();
    let samples: BTreeMap<&str, Vec<&str>> = [
        ("jobs", vec!["2"]),
        ("plot", vec!["--plot", "job.png"]),
        ("json", vec!["--json"]),
        ("csv", vec!["--csv"]),
        ("summary", vec!["--summary"]),
        ("wait", vec!["--wait", "30"]),
        ("mail_slots", vec!["--wait", "30", "--mail-slots", "4"]),
        (
            "ended_after",
            vec!["--wait", "30", "--ended-after", "1800000000"],
        ),
        ("carbon_intensity", vec!["--carbon-intensity", "350"]),
        ("carbon_csv", vec!["--carbon-csv", &f.series]),
        ("price", vec!["--price", "0.25"]),
        ("currency", vec!["--currency", "EUR"]),
        ("market_intensity", vec!["--market-intensity", "0"]),
        ("market_csv", vec!["--market-csv", &f.series]),
        ("pue", vec!["--pue", "1.2"]),
        ("pue_csv", vec!["--pue-csv", &f.pue_series]),
        ("prometheus", vec!["--prometheus", "http://prometheus:9090"]),
        ("start", vec!["--start", "2026-11-01"]),
        ("end", vec!["--end", "now+1days"]),
        ("accounts", vec!["--accounts", "physics,chem"]),
        ("names", vec!["-M", "other"]),
        ("all_users", vec!["-a"]),
        ("format", vec!["--format", "id,energy_j"]),
        ("users", vec!["--users", "alice"]),
        ("node", vec!["--node", "n7"]),
        ("job", vec!["12"]),
        (
            "entry",
            vec!["12", "--node", "n7", "--since", "1", "--entry", "{}"],
        ),
        (
            "since",
            vec!["12", "--node", "n7", "--entry", "{}", "--since", "1"],
        ),
        ("compare", vec!["--compare", "60"]),
        ("conf", vec!["--conf", "acct_gather.conf"]),
        (
            "slurm_conf",
            vec!["--conf", "acct_gather.conf", "--slurm-conf", "slurm.conf"],
        ),
        (
            "plugins",
            vec!["--conf", "acct_gather.conf", "--plugins", "rust_rapl"],
        ),
    ]
    .into_iter()
    .collect();
    let bases: [(&str, Vec<&str>); 5] = [
        ("", vec!["--config", &f.empty]),
        ("job", vec!["job", "1", "--config", &f.empty]),
        ("usage", vec!["usage", "--config", &f.empty]),
        ("check", vec!["check"]),
        ("record", vec!["record"]),
    ];
    let mut tried = 0;
    for (name, base) in &bases {
        let plain = plan_of(base);
        let command = match *name {
            // senergy with no subcommand: the list of jobs
            "" => Cli::command(),
            name => subcommand(name),
        };
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let given: Vec<&str> = if id == "config" {
                // the empty site file against one that sets figures
                base.iter()
                    .map(|a| if *a == f.empty { f.site.as_str() } else { a })
                    .collect()
            } else {
                let extra = samples
                    .get(id)
                    .unwrap_or_else(|| panic!("senergy {name}: no sample for {id}"));
                base.iter().chain(extra).copied().collect()
            };
            assert_ne!(
                plan_of(&given),
                plain,
                "senergy {name}: {given:?} changes nothing"
            );
            tried += 1;
        }
    }
    // the list of jobs 18 (start, end, users, all_users, accounts, format, clusters, json,
    // csv, config, eight figures), job 19 (jobs, plot, json, csv, summary, wait,
    // mail_slots, ended_after, config, eight figures, prometheus, clusters), usage 16,
    // check 6, record 4 (job, node, and the writer's entry and since)
    assert_eq!(tried, 63);
}

#[test]
fn usage_period_defaults_to_the_30_days_before_now() {
    let f = files();
    let cli = parse(&["usage", "--config", &f.empty]).expect("parsed");
    let Some(Command::Usage(args)) = &cli.command else {
        panic!("not usage")
    };
    let plan = args.plan(NOW).expect("plan");
    assert_eq!(plan.period, (NOW + 1 - 30 * 86400, NOW + 1));
    let cli = parse(&["usage", "--start", "200", "--end", "100"]).expect("parsed");
    let Some(Command::Usage(args)) = &cli.command else {
        panic!("not usage")
    };
    assert!(matches!(args.plan(NOW), Err(Failure::Input(m)) if m.contains("empty")));
}

#[test]
fn check_compare_window() {
    let window = |args: &[&str]| {
        let Some(Command::Check(a)) = parse(args).expect("parsed").command else {
            panic!("not check")
        };
        a.plan().map(|p| p.compare)
    };
    assert_eq!(
        window(&["check", "--compare"]).ok(),
        Some(Some(Duration::from_secs(30)))
    );
    assert_eq!(
        window(&["check", "--compare", "--json"]).ok(),
        Some(Some(Duration::from_secs(30)))
    );
    for bad in ["1", "3601", "NaN"] {
        assert!(window(&["check", "--compare", bad]).is_err(), "{bad}");
    }
}

#[test]
fn job_ids() {
    assert_eq!(job_id("123").expect("valid"), (123, None, None));
    assert_eq!(job_id("123_4").expect("valid"), (123, Some(4), None));
    assert_eq!(
        job_id("123.0").expect("valid"),
        (123, None, Some("0".into()))
    );
    assert_eq!(
        job_id("123_4.batch").expect("valid"),
        (123, Some(4), Some("batch".into()))
    );
    for bad in ["", "12a", "1_", "_3", "1.x", "1.", ".0", "1.2.3"] {
        assert!(job_id(bad).is_err(), "{bad}");
    }
}
