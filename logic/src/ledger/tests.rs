use super::*;
use crate::attribution::holders::ObservedInstance;

const LEARNED: Split = Split::Shared { idle_watts: None };

pub(crate) fn idle(watts: f64) -> Split {
    Split::Shared {
        idle_watts: Some(watts),
    }
}

fn step(id: StepId, usage_ns: Option<u64>) -> ObservedStep {
    ObservedStep {
        id,
        usage_ns,
        started: None,
        holds: vec![],
    }
}

fn counters(cpus: u32, usage_s: f64) -> Option<JobCounters> {
    Some(JobCounters {
        cpus,
        memory: None,
        usage_ns: (usage_s * 1e9) as u64,
    })
}

pub(crate) fn observation(
    t0: Instant,
    w0: SystemTime,
    secs: u64,
    joules: u64,
    jobs: Vec<ObservedJob>,
) -> Observation {
    Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_secs(secs),
        wall: w0 + Duration::from_secs(secs),
        node_uj: joules * 1_000_000,
        settled: true,
        jobs,
        parts: vec![],
        counts: vec![],
        devices: vec![],
        watts: None,
    }
}

pub(crate) fn job(job: u32, cpus: u32, usage_s: f64, steps: &[(StepId, f64)]) -> ObservedJob {
    ObservedJob {
        job,
        counters: counters(cpus, usage_s),
        steps: steps
            .iter()
            .map(|(id, s)| step(*id, Some((s * 1e9) as u64)))
            .collect(),
    }
}

#[test]
fn jobs_are_charged_from_their_second_sample_and_sum_to_the_node() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let ext = StepId::EXTERN;
    // no job for 12 s: nobody is charged, the static power is learned (100 W held over
    // SUSTAIN)
    for secs in 0..=12 {
        ledger.update(&observation(t0, w0, secs, 100 * secs, vec![]), LEARNED);
    }
    ledger.update(
        &observation(t0, w0, 13, 1300, vec![job(1, 1, 0.0, &[(ext, 0.0)])]),
        LEARNED,
    );
    assert_eq!(ledger.learned_idle_watts(), Some(100.0));
    assert_eq!(ledger.job(1).map(|a| a.joules), Some(0.0));
    // job 2 arrives; job 1 alone pays the next 300 J
    ledger.update(
        &observation(
            t0,
            w0,
            14,
            1600,
            vec![job(1, 1, 1.0, &[(ext, 0.0)]), job(2, 1, 0.0, &[(ext, 0.0)])],
        ),
        LEARNED,
    );
    assert_eq!(ledger.job(1).map(|a| a.joules), Some(300.0));
    // both: 300 J, 100 W static split 1:1, 200 J dynamic 3:1 by CPU time
    ledger.update(
        &observation(
            t0,
            w0,
            15,
            1900,
            vec![
                job(
                    1,
                    1,
                    1.75,
                    &[(ext, 0.0), (StepId::BATCH, 0.5), (StepId(0), 0.0)],
                ),
                job(2, 1, 0.25, &[(ext, 0.0)]),
            ],
        ),
        LEARNED,
    );
    assert_eq!(ledger.job(1).map(|a| a.joules), Some(300.0 + 50.0 + 150.0));
    assert_eq!(ledger.job(2).map(|a| a.joules), Some(50.0 + 50.0));
    assert_eq!(ledger.step(2, ext).map(|a| a.watts), Some(100.0));
    // the steps of job 1 first seen now start counting at the next sample
    assert_eq!(ledger.step(1, StepId::BATCH).map(|a| a.joules), Some(0.0));
    ledger.update(
        &observation(
            t0,
            w0,
            16,
            2100,
            vec![
                job(
                    1,
                    1,
                    2.75,
                    &[(ext, 0.0), (StepId::BATCH, 0.75), (StepId(0), 1.5)],
                ),
                job(2, 1, 2.75, &[(ext, 0.0)]),
            ],
        ),
        LEARNED,
    );
    // 200 J: static 100 J 1:1, dynamic 100 J by CPU time 1.0:2.5; job 1's steps split
    // its share by their CPU time, 0.25 s (batch) to 1.5 s (step 0)
    let j1 = ledger.job(1).map(|a| a.joules).expect("job 1");
    let j2 = ledger.job(2).map(|a| a.joules).expect("job 2");
    assert!((j1 + j2 - 800.0).abs() < 1e-9, "{j1} + {j2}");
    let batch = ledger
        .step(1, StepId::BATCH)
        .map(|a| a.joules)
        .expect("batch");
    let step0 = ledger.step(1, StepId(0)).map(|a| a.joules).expect("step 0");
    assert!(
        (batch + step0 - (j1 - 500.0)).abs() < 1e-9,
        "{batch} + {step0}"
    );
    assert!((batch * 6.0 - step0).abs() < 1e-9, "by CPU time 0.25:1.5");
    assert_eq!(ledger.step(1, ext).map(|a| a.joules), Some(j1));
}

#[test]
fn an_extern_step_without_cpu_time_of_its_own_gets_the_job() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let observed = |usage_s: f64| ObservedJob {
        job: 4,
        counters: counters(1, usage_s),
        steps: vec![
            step(StepId::EXTERN, None),
            step(StepId::BATCH, Some((usage_s * 1e9) as u64)),
        ],
    };
    let mut ledger = Ledger::default();
    ledger.update(&observation(t0, w0, 0, 0, vec![observed(0.0)]), idle(10.0));
    ledger.update(&observation(t0, w0, 1, 90, vec![observed(0.5)]), idle(10.0));
    assert_eq!(ledger.step(4, StepId::EXTERN).map(|a| a.joules), Some(90.0));
    assert_eq!(ledger.step(4, StepId::BATCH).map(|a| a.joules), Some(90.0));
}

/// The ledger is written and read only in a SlurmdSpoolDir nobody else can write (the
/// error names it), and read never through a link planted in its place.
#[test]
fn the_ledger_is_kept_only_in_a_spool_dir_nobody_else_writes() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let spool = tmp.path().join("spool");
    fs::create_dir(&spool).expect("spool");
    let chmod = |mode| fs::set_permissions(&spool, fs::Permissions::from_mode(mode));
    chmod(0o755).expect("chmod");
    let path = ledger_path(&spool, 0);
    let mut ledger = Ledger::default();
    ledger.describe_source("root's".into());
    ledger.store(&path).expect("store");
    let loaded = |path: &Path| Ledger::load(path).map(|l| l.map(|l| l.source));
    assert_eq!(loaded(&path).expect("load"), Some("root's".to_string()));
    // a link in its place (to a ledger of the same user) is not followed
    let planted = tmp.path().join("planted.json");
    let mut other = Ledger::default();
    other.describe_source("planted".into());
    other.store(&planted).expect("store");
    fs::remove_file(&path).expect("unlink");
    std::os::unix::fs::symlink(&planted, &path).expect("symlink");
    assert!(
        matches!(loaded(&path), Err(LedgerError::Untrusted { .. })),
        "{:?}",
        loaded(&path)
    );
    // nor is a FIFO waited on
    fs::remove_file(&path).expect("unlink");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    assert!(matches!(loaded(&path), Err(LedgerError::Untrusted { .. })));
    fs::remove_file(&path).expect("unlink");
    ledger.store(&path).expect("store");
    // a spool dir others can write: nothing is published there, nor read
    for mode in [0o777, 0o775, 0o1777] {
        chmod(mode).expect("chmod");
        let why = ledger.store(&path).expect_err("not published").to_string();
        assert!(why.starts_with("SlurmdSpoolDir: "), "{why}");
        let why = loaded(&path).expect_err("not read").to_string();
        assert!(why.starts_with("SlurmdSpoolDir: "), "{why}");
    }
    chmod(0o755).expect("chmod");
    assert_eq!(loaded(&path).expect("load"), Some("root's".to_string()));
}

/// A SlurmdSpoolDir as Debian's slurmd package makes it (`/var/lib/slurm/slurmd`,
/// `slurm:slurm` 0755, slurmd running as root): the ledger is published and read there
/// once SlurmUser is known; a spool dir of a job's owner is still refused, and the refusal
/// names the rule. Needs root (the directory is given away).
#[test]
fn the_ledger_is_kept_in_a_spool_dir_of_slurm_user() {
    use std::os::unix::fs::PermissionsExt;
    if !crate::test_support::root_or_skip("giving a directory to another user") {
        return;
    }
    // uids no account of a test machine has (the same SlurmUser as trusted_dir's test)
    let (slurm, job_owner) = (64_123, 64_124);
    let tmp = tempfile::tempdir().expect("tempdir");
    let spool = tmp.path().join("slurmd");
    fs::create_dir(&spool).expect("spool");
    fs::set_permissions(&spool, fs::Permissions::from_mode(0o755)).expect("chmod");
    let chown = |uid| {
        nix::unistd::chown(&spool, Some(nix::unistd::Uid::from_raw(uid)), None).expect("chown")
    };
    let path = ledger_path(&spool, 0);
    let mut ledger = Ledger::default();
    ledger.describe_source("slurmd's".into());
    crate::trust_slurm_user(slurm);
    chown(slurm);
    ledger
        .store(&path)
        .expect("published in SlurmUser's spool dir");
    let loaded = Ledger::load(&path).expect("read").map(|l| l.source);
    assert_eq!(loaded, Some("slurmd's".to_string()));
    chown(job_owner);
    let why = Ledger::load(&path)
        .expect_err("a job owner's dir")
        .to_string();
    assert!(
        why.contains(&format!(
            "(owner uid {job_owner}, mode 755): the rule is a directory, not a link, owned by \
             root or SlurmUser (uid {slurm}), that no other user or group can write"
        )),
        "{why}"
    );
    assert!(ledger.store(&path).is_err());
    // where slurmd refused to publish one, the reader is told why, not only "none"
    fs::remove_file(&path).expect("unlink");
    let why = Ledger::load(&path)
        .expect_err("no ledger, and why")
        .to_string();
    assert!(why.contains("the rule is a directory"), "{why}");
}

#[test]
fn a_stored_ledger_loads_and_charges_the_time_slurmd_was_away() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let ext = StepId::EXTERN;
    let mut ledger = Ledger::default();
    ledger.update(
        &observation(t0, w0, 0, 0, vec![job(9, 2, 0.0, &[(ext, 0.0)])]),
        idle(50.0),
    );
    ledger.update(
        &observation(t0, w0, 2, 400, vec![job(9, 2, 1.0, &[(ext, 0.0)])]),
        idle(50.0),
    );
    ledger.describe_source("rust_rapl: RAPL \"pkg\" of 2 sockets".into());
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    ledger.store(&path).expect("store");
    let mode = fs::metadata(&path).expect("meta").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let stored = Ledger::load(&path).expect("read").expect("a ledger");
    let published = stored.step(9, ext).expect("step");
    assert_eq!(published.joules, 400.0);
    assert_eq!(published.watts, 200.0);
    assert_eq!(stored.node().joules, 400.0);
    assert_eq!(stored.epoch(), ledger.epoch());
    assert_eq!(stored.source(), "rust_rapl: RAPL \"pkg\" of 2 sockets");
    // slurmd restarts 3 s later: its meter starts from zero again
    let mut again = Ledger::load(&path).expect("load").expect("a ledger");
    let t1 = Instant::now();
    again.update(
        &observation(t1, w0, 5, 0, vec![job(9, 2, 9.0, &[(ext, 0.0)])]),
        idle(50.0),
    );
    let close = |a: Option<Account>, j: f64| a.is_some_and(|a| (a.joules - j).abs() < 1e-3);
    // (unix seconds as f64 are exact to a microsecond: 200 W x 1 us)
    assert!(
        close(again.job(9), 400.0 + 3.0 * 200.0),
        "{:?}",
        again.job(9)
    );
    again.update(
        &observation(t1, w0, 6, 150, vec![job(9, 2, 9.5, &[(ext, 0.0)])]),
        idle(50.0),
    );
    assert!(
        close(again.step(9, ext), 1150.0),
        "{:?}",
        again.step(9, ext)
    );
    // the node's account is continued the same way, in the same epoch
    assert!(
        (again.node().joules - 1150.0).abs() < 1e-3,
        "{:?}",
        again.node()
    );
    assert_eq!(again.epoch(), ledger.epoch());
}

/// slurmd killed while the power rises and started again 8 s later: the time it was
/// away is the meter's own counts' rise (across a wrap), split by the model as any
/// interval, not the last power; where the counts cannot tell (a counter that may have
/// wrapped again and no number of wraps the powers make plausible, none kept), the last
/// power, as before.
#[test]
fn the_time_slurmd_was_away_is_the_meters_own_where_its_counts_span_it() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let ext = StepId::EXTERN;
    let wrap = 262_144_000_000; // 262 144 J
    let count = |value_uj: u64| HardwareCount {
        name: "package0".into(),
        value_uj,
        wraps_at_uj: Some(wrap),
        max_watts: 1_000.0,
    };
    // two jobs, 50 W static power: job 1 uses 3 CPUs to job 2's 1
    let jobs = |usage: f64| {
        vec![
            job(1, 2, 3.0 * usage, &[(ext, 0.0)]),
            job(2, 2, usage, &[(ext, 0.0)]),
        ]
    };
    let at = |secs: u64, joules: u64, value_uj: u64, usage: f64| Observation {
        unowned_cpu_ns: 0,
        counts: vec![count(value_uj)],
        ..observation(t0, w0, secs, joules, jobs(usage))
    };
    let mut ledger = Ledger::default();
    let start = wrap - 1_000_000_000; // 1 000 J before a wrap
    ledger.update(&at(0, 0, start, 0.0), idle(50.0));
    // 150 W for 12 s
    ledger.update(
        &at(12, 1_800, start + 1_800_000_000 - wrap, 12.0),
        idle(50.0),
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    ledger.store(&path).expect("store");
    let (before_1, before_2) = (
        ledger.job(1).expect("1").joules,
        ledger.job(2).expect("2").joules,
    );
    // away 8 s at 300 W: 2 400 J; the new meter counts from zero, 1 s after its start
    let t1 = Instant::now();
    let mut again = Ledger::load(&path).expect("load").expect("a ledger");
    again.update(
        &Observation {
            unowned_cpu_ns: 0,
            counts: vec![count(start + 4_200_000_000 - wrap)],
            ..observation(t1, w0 + Duration::from_secs(20), 0, 300, jobs(20.0))
        },
        idle(50.0),
    );
    let node = again.node().joules;
    assert!((node - 4_200.0).abs() < 1e-3, "{node}");
    // the model's split of 2 400 J over 8 s: 400 J static (200 each), 2 000 J by CPU
    let (got_1, got_2) = (
        again.job(1).expect("1").joules - before_1,
        again.job(2).expect("2").joules - before_2,
    );
    assert!(
        (got_1 - 1_700.0).abs() < 1e-3 && (got_2 - 700.0).abs() < 1e-3,
        "{got_1} {got_2}"
    );
    assert_eq!(
        again.step(1, ext).map(|a| a.joules),
        again.job(1).map(|a| a.joules)
    );

    // away 300 s: at 1 kW the counter could have wrapped once more, and its rise (8 W)
    // is nowhere near the 75 W to 225 W the last power makes plausible: the last power
    let mut long = Ledger::load(&path).expect("load").expect("a ledger");
    long.update(
        &Observation {
            unowned_cpu_ns: 0,
            counts: vec![count(start + 4_200_000_000 - wrap)],
            ..observation(t1, w0 + Duration::from_secs(312), 0, 300, jobs(20.0))
        },
        idle(50.0),
    );
    assert!(
        (long.node().joules - (1_800.0 + 150.0 * 300.0)).abs() < 1e-3,
        "{:?}",
        long.node()
    );
    // no counts kept (a power sensor's ledger): the last power too
    let mut powered = Ledger::load(&path).expect("load").expect("a ledger");
    powered.counts.clear();
    powered.update(
        &Observation {
            unowned_cpu_ns: 0,
            counts: vec![count(start + 4_200_000_000 - wrap)],
            ..observation(t1, w0 + Duration::from_secs(20), 0, 300, jobs(20.0))
        },
        idle(50.0),
    );
    assert!(
        (powered.node().joules - 3_000.0).abs() < 1e-3,
        "{:?}",
        powered.node()
    );
}

/// Issue 53: AMD counters (a wrap every 4 096 J, at most 1 000 W) and slurmd away 9.7 s
/// while the power went from 150 W to 300 W (150 W for 3.7 s, 300 W for 6 s: 2 355 J).
/// At 1 000 W the counter could have wrapped twice more than its rise says; the power the
/// new meter measured after the gap (300 W) leaves one number of wraps (75 W to 450 W
/// plausible; the next candidate is 665 W): the gap is the counts' own (before: estimated
/// at the last power, 1 455 J, −38%). Where the power after makes two plausible (900 W),
/// the last power estimates it, as before.
#[test]
fn a_gap_longer_than_a_wrap_window_is_bridged_where_the_powers_leave_one_number_of_wraps() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let wrap = 4_096_000_000;
    let count = |value_uj: u64| HardwareCount {
        name: "package0".into(),
        value_uj: value_uj % wrap,
        wraps_at_uj: Some(wrap),
        max_watts: 1_000.0,
    };
    let start = 4_000_000_000;
    let mut ledger = Ledger::default();
    for secs in [0, 5, 10] {
        let joules = 150 * secs;
        ledger.update(
            &Observation {
                counts: vec![count(start + joules * 1_000_000)],
                ..observation(t0, w0, secs, joules, vec![])
            },
            Split::Node,
        );
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    ledger.store(&path).expect("store");
    let back = |watts_after: f64| {
        let mut again = Ledger::load(&path).expect("load").expect("a ledger");
        again.update(
            &Observation {
                at: Instant::now(),
                wall: w0 + Duration::from_millis(19_700),
                node_uj: 300_000_000,
                counts: vec![count(start + 1_500_000_000 + 2_355_000_000)],
                watts: Some(watts_after),
                ..observation(t0, w0, 0, 0, vec![])
            },
            Split::Node,
        );
        again.node().joules - 1_500.0
    };
    let bridged = back(300.0);
    assert!((bridged - 2_355.0).abs() < 1e-3, "{bridged} J");
    let estimated = back(900.0);
    assert!((estimated - 150.0 * 9.7).abs() < 1e-3, "{estimated} J");
}

/// The cost of a slurmstepd's read (its question to slurmd and the answer, through the
/// doorbell's thread as slurmd runs it; and, for a step slurmd does not answer, loading the
/// file and finding its own step), of slurmd's keeping the answers at an update, and of its
/// write of the file, at 1, 16, 64 and 256 jobs of three steps each, in a temp dir:
/// `cargo test --release -p slurm-energy-logic --lib ledger_read_cost -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn ledger_read_cost() {
    use crate::attribution::StepKey;
    use crate::exchange::ask::{self, Book, Request, Want};
    use std::sync::Arc;
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    let book: Arc<Book> = Arc::default();
    let _bell = crate::exchange::doorbell::Doorbell::open(
        &crate::exchange::doorbell::doorbell_path(&path),
        Arc::default(),
        Arc::clone(&book),
        || {},
    )
    .expect("doorbell");
    for jobs in [1u32, 16, 64, 256] {
        let observed = |usage: f64| -> Vec<ObservedJob> {
            (1..=jobs)
                .map(|j| {
                    job(
                        j,
                        1,
                        usage,
                        &[
                            (StepId::EXTERN, 0.0),
                            (StepId::BATCH, usage),
                            (StepId(0), usage),
                        ],
                    )
                })
                .collect()
        };
        let mut ledger = Ledger::default();
        for secs in 0..3 {
            ledger.update(
                &observation(t0, w0, secs, secs * 300, observed(secs as f64)),
                idle(50.0),
            );
        }
        const ROUNDS: u32 = 2_000;
        let started = Instant::now();
        let cpu = thread_cpu();
        for _ in 0..ROUNDS {
            ledger.store(&path).expect("store");
        }
        let write_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        let write_cpu_us = (thread_cpu() - cpu).as_secs_f64() * 1e6 / f64::from(ROUNDS);
        let started = Instant::now();
        for _ in 0..ROUNDS {
            book.update(&ledger, Instant::now());
        }
        let book_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        let started = Instant::now();
        let mut joules = 0.0;
        for _ in 0..ROUNDS {
            let read = Ledger::load(&path).expect("load").expect("a ledger");
            joules += read.step(jobs, StepId(0)).expect("step").joules;
        }
        let file_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        assert!(joules > 0.0);
        let request = Request::new(
            Some(StepKey {
                job: jobs,
                step: StepId(0),
            }),
            Want::Current,
        );
        let socket = ask::ask_path(&path);
        let mut asked = Vec::with_capacity(ROUNDS as usize);
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let answer = ask::ask(&socket, request, Duration::from_secs(1)).expect("answered");
            asked.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(answer.step, ledger.step(jobs, StepId(0)));
        }
        let ask_us = asked.iter().sum::<f64>() / f64::from(ROUNDS);
        asked.sort_by(f64::total_cmp);
        // the slots: slurmd's write at an update, a step's read of its slot
        let mut table = crate::exchange::slots::Table::new(&path);
        table.write(&ledger).expect("slots");
        let started = Instant::now();
        for _ in 0..ROUNDS {
            table.write(&ledger).expect("slots");
        }
        let slots_write_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        let reader = crate::exchange::slots::Reader::open(&path).expect("slots");
        let mut slotted = Vec::with_capacity(ROUNDS as usize);
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let read = reader.read(request.step);
            slotted.push(started.elapsed().as_secs_f64() * 1e6);
            let crate::exchange::slots::Slot::Found(answer) = read else {
                panic!("{read:?}");
            };
            assert_eq!(answer.step, ledger.step(jobs, StepId(0)));
        }
        let slot_us = slotted.iter().sum::<f64>() / f64::from(ROUNDS);
        slotted.sort_by(f64::total_cmp);
        println!(
            "{jobs:>4} jobs: a step's read (asked) {ask_us:.1} us (median {:.1}, 99th {:.1}); \
             (its slot) {slot_us:.2} us (median {:.2}, 99th {:.2}); \
             from the file ({} bytes) {file_us:.1} us; slurmd's answers kept {book_us:.1} us, \
             its write {write_us:.1} us ({write_cpu_us:.1} us CPU), its slots' write {slots_write_us:.1} us ({} bytes)",
            asked[asked.len() / 2],
            asked[asked.len() * 99 / 100],
            slotted[slotted.len() / 2],
            slotted[slotted.len() * 99 / 100],
            fs::metadata(&path).expect("meta").len(),
            fs::metadata(crate::exchange::slots::slots_path(&path))
                .expect("meta")
                .len(),
        );
    }
}

/// This thread's CPU time so far (a benchmark's: what a sample costs the node, whatever it
/// waits for).
pub(crate) fn thread_cpu() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the thread's CPU time");
    Duration::from(now)
}

/// A requeued job runs again under its id while the ledger still holds its first run:
/// the second run's steps begin from zero, in both modes, and its figure is the
/// node's energy (its share) over the second run alone.
#[test]
fn a_requeued_job_begins_anew() {
    for split in [Split::Node, idle(0.0)] {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut ledger = Ledger::default();
        let run = |started: u64, usage: f64| ObservedJob {
            job: 7,
            counters: counters(1, usage),
            steps: [StepId::BATCH, StepId::EXTERN]
                .into_iter()
                .map(|id| ObservedStep {
                    id,
                    usage_ns: Some((usage * 1e9) as u64),
                    started: Some(w0 + Duration::from_secs(started)),
                    holds: vec![],
                })
                .collect(),
        };
        // 200 W throughout; the first run from 0 s to 10 s, the second from 15 s
        for secs in 0..=10 {
            let obs = observation(t0, w0, secs, secs * 200, vec![run(0, secs as f64)]);
            ledger.update(&obs, split);
        }
        for secs in 11..15 {
            ledger.update(&observation(t0, w0, secs, secs * 200, vec![]), split);
        }
        assert!((ledger.step(7, StepId::BATCH).expect("first").joules - 2_000.0).abs() < 1e-6);
        for secs in 15..=40 {
            let usage = secs as f64 - 15.0;
            let obs = observation(t0, w0, secs, secs * 200, vec![run(15, usage)]);
            ledger.update(&obs, split);
        }
        for id in [StepId::BATCH, StepId::EXTERN] {
            let step = ledger.step(7, id).expect("second");
            assert!(
                (step.joules - 5_000.0).abs() < 1e-6,
                "{split:?} {id:?}: {step:?}"
            );
            assert!((step.since - unix(w0 + Duration::from_secs(15))).abs() < 1e-6);
        }
        assert!(
            (ledger.job(7).expect("job").joules - 5_000.0).abs() < 1e-6,
            "{split:?}"
        );
    }
}

/// A job is charged from its first step's start, also when slurmd first sees it a
/// sample later; the piece of the interval before it came is not its.
#[test]
fn a_new_job_is_charged_from_its_start() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let ext = StepId::EXTERN;
    ledger.update(&observation(t0, w0, 0, 0, vec![]), idle(100.0));
    ledger.update(&observation(t0, w0, 1, 100, vec![]), idle(100.0));
    // the job started 0.25 s into the next second: 25 J before it, 225 J after it
    // (300 W), and its cgroup has counted 0.7 s of CPU since
    let arrived = |usage_s: f64| ObservedJob {
        job: 5,
        counters: counters(1, usage_s),
        steps: vec![ObservedStep {
            id: ext,
            usage_ns: None,
            started: Some(w0 + Duration::from_millis(1250)),
            holds: vec![],
        }],
    };
    ledger.update(
        &observation(t0, w0, 2, 350, vec![arrived(0.7)]),
        idle(100.0),
    );
    let job = ledger.job(5).expect("the job");
    assert!((job.joules - 225.0).abs() < 1e-6, "{job:?}");
    assert!((job.since - unix(w0 + Duration::from_millis(1250))).abs() < 1e-6);
    assert_eq!(ledger.step(5, ext).map(|a| a.joules), Some(job.joules));
    ledger.update(
        &observation(t0, w0, 3, 650, vec![arrived(1.7)]),
        idle(100.0),
    );
    assert!((ledger.job(5).expect("job").joules - 525.0).abs() < 1e-6);
    assert!((ledger.node().joules - 650.0).abs() < 1e-9);
}

/// In node mode every job and step gets the node's energy since it began: from its
/// start within an interval, and, found a sample late, the node's energy since then.
#[test]
fn in_node_mode_each_job_gets_the_node_since_it_began() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let at = |ms: u64| Some(w0 + Duration::from_millis(ms));
    let observed = |job: u32, steps: &[(StepId, Option<SystemTime>)]| ObservedJob {
        job,
        counters: None,
        steps: steps
            .iter()
            .map(|&(id, started)| ObservedStep {
                started,
                ..step(id, None)
            })
            .collect(),
    };
    // 100 W, then 300 W from the second second on
    ledger.update(&observation(t0, w0, 0, 0, vec![]), Split::Node);
    ledger.update(&observation(t0, w0, 1, 100, vec![]), Split::Node);
    // job 1 started at 1.25 s; job 2 at 0.5 s, found only at 3 s with its batch step
    // (started at 2.5 s, first seen then too)
    let one = observed(1, &[(StepId::EXTERN, at(1250))]);
    ledger.update(&observation(t0, w0, 2, 400, vec![one.clone()]), Split::Node);
    let two = observed(2, &[(StepId::EXTERN, at(500)), (StepId::BATCH, at(2500))]);
    ledger.update(
        &observation(t0, w0, 3, 700, vec![one.clone(), two]),
        Split::Node,
    );
    let close = |a: Option<Account>, want: f64| {
        let a = a.expect("account");
        assert!((a.joules - want).abs() < 1e-6, "{a:?}, want {want}");
    };
    close(ledger.job(1), 225.0 + 300.0);
    close(ledger.step(1, StepId::EXTERN), 525.0);
    // 50 J of the first second, 300 + 300 J after
    close(ledger.job(2), 650.0);
    close(ledger.step(2, StepId::EXTERN), 650.0);
    close(ledger.step(2, StepId::BATCH), 150.0);
    assert!((ledger.job(1).expect("job").since - unix(w0) - 1.25).abs() < 1e-6);
    // the node's own account is untouched by its jobs
    assert!((ledger.node().joules - 700.0).abs() < 1e-9);
}

/// A job found a sample after its start (its slurmstepd not yet titled at the sample
/// before) is charged what nobody got since it began.
#[test]
fn a_job_found_late_gets_what_nobody_got_since_its_start() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let ext = StepId::EXTERN;
    let started = |usage_s: f64| ObservedJob {
        job: 6,
        counters: counters(1, usage_s),
        steps: vec![ObservedStep {
            id: ext,
            usage_ns: None,
            started: Some(w0 + Duration::from_millis(1500)),
            holds: vec![],
        }],
    };
    ledger.update(&observation(t0, w0, 0, 0, vec![]), idle(100.0));
    ledger.update(&observation(t0, w0, 1, 100, vec![]), idle(100.0));
    // started at 1.5 s, first seen at 3 s; nobody got the second before
    ledger.update(&observation(t0, w0, 2, 300, vec![]), idle(100.0));
    ledger.update(
        &observation(t0, w0, 3, 600, vec![started(1.5)]),
        idle(100.0),
    );
    // the last second's 300 J, and half of the second before (its 200 J spread evenly)
    let job = ledger.job(6).expect("job").joules;
    assert!((job - 400.0).abs() < 1e-6, "{job}");
    assert_eq!(ledger.step(6, ext).map(|a| a.joules), Some(job));
    assert!((ledger.node().joules - 600.0).abs() < 1e-9);
}

/// A sample milliseconds after the one before (a step's edge asked for it) does not make
/// the published power jump: it is taken over windows of at least a second.
#[test]
fn the_power_is_taken_over_a_second_or_more() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let at = |ms: u64, joules: f64| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_millis(ms),
        wall: w0 + Duration::from_millis(ms),
        node_uj: (joules * 1e6) as u64,
        settled: true,
        jobs: vec![],
        parts: vec![],
        counts: vec![],
        devices: vec![],
        watts: None,
    };
    ledger.update(&at(0, 0.0), Split::Node);
    ledger.update(&at(1000, 300.0), Split::Node);
    assert_eq!(ledger.node().watts, 300.0);
    // 17 ms later, a counter step of 1 J (59 W over those 17 ms)
    ledger.update(&at(1017, 301.0), Split::Node);
    assert_eq!(ledger.node().watts, 300.0);
    ledger.update(&at(2017, 601.0), Split::Node);
    // (Unix seconds as f64 are exact to about a microsecond)
    assert!((ledger.node().watts - 301.0 / 1.017).abs() < 1e-3);
    assert_eq!(ledger.node().joules, 601.0);
}

/// A job's published power is windowed like the node's: a sample milliseconds after
/// the last does not make it jump.
#[test]
fn a_jobs_power_is_taken_over_a_second_or_more() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let at = |ms: u64, joules: f64, usage_s: f64| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_millis(ms),
        wall: w0 + Duration::from_millis(ms),
        node_uj: (joules * 1e6) as u64,
        settled: true,
        jobs: vec![job(3, 1, usage_s, &[(StepId::EXTERN, 0.0)])],
        parts: vec![],
        counts: vec![],
        devices: vec![],
        watts: None,
    };
    ledger.update(&at(0, 0.0, 0.0), idle(0.0));
    ledger.update(&at(1000, 300.0, 1.0), idle(0.0));
    assert_eq!(ledger.job(3).map(|a| a.watts), Some(300.0));
    ledger.update(&at(1017, 301.0, 1.017), idle(0.0));
    assert_eq!(ledger.job(3).map(|a| a.watts), Some(300.0));
    assert_eq!(ledger.step(3, StepId::EXTERN).map(|a| a.watts), Some(300.0));
    assert_eq!(ledger.job(3).map(|a| a.joules), Some(301.0));
}

/// In node mode the ledger keeps the node's account only.
/// Two GPUs: GPU 0 shared by two jobs holding 2 shards each, one busy and one idle;
/// GPU 1 held by nobody for 2 s, then by a job whose tasks start late (charged from
/// its start); every job's extern step carries the job's devices.
#[test]
fn devices_are_charged_to_the_jobs_holding_them() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let split = Split::Devices {
        idle_watts: Some(40.0),
    };
    let at = |secs: u64| {
        (
            t0 + Duration::from_secs(secs),
            w0 + Duration::from_secs(secs),
        )
    };
    let holder = |job: u32, holds: Vec<(u32, f64)>| ObservedJob {
        job,
        counters: None,
        steps: vec![
            ObservedStep {
                holds: vec![],
                ..step(StepId::EXTERN, None)
            },
            ObservedStep {
                holds,
                started: Some(w0),
                ..step(StepId(0), None)
            },
        ],
    };
    // per second: GPU 0 at 240 W, GPU 1 at 100 W
    let sample = |secs: u64, late_holds: bool, busy: Vec<(Option<u32>, f64)>| {
        let (at, wall) = at(secs);
        let late = if late_holds { vec![(1, 1.0)] } else { vec![] };
        Observation {
            unowned_cpu_ns: 0,
            at,
            wall,
            node_uj: secs * 340_000_000,
            settled: true,
            jobs: vec![
                holder(1, vec![(0, 2.0)]),
                holder(2, vec![(0, 2.0)]),
                holder(3, late),
            ],
            parts: vec![],
            watts: None,
            counts: vec![],
            devices: vec![
                ObservedDevice {
                    position: 0,
                    energy_uj: secs * 240_000_000,
                    busy,
                    instances: vec![],
                },
                ObservedDevice {
                    position: 1,
                    energy_uj: secs * 100_000_000,
                    busy: vec![],
                    instances: vec![],
                },
            ],
        }
    };
    ledger.update(&sample(0, false, vec![]), split);
    ledger.update(&sample(1, false, vec![(Some(1), 80.0)]), split);
    ledger.update(&sample(2, false, vec![(Some(1), 80.0)]), split);
    ledger.update(&sample(3, true, vec![(Some(1), 80.0)]), split);
    let joules = |job, step| ledger.step(job, step).expect("step").joules;
    // GPU 0: 3 s x (20 W each of the static 40, the busy job the other 200 W)
    assert_eq!(joules(1, StepId(0)), 3.0 * 220.0);
    assert_eq!(joules(2, StepId(0)), 3.0 * 20.0);
    // GPU 1 from job 3's start, though its tasks told it only at the third second
    assert_eq!(joules(3, StepId(0)), 300.0);
    for job in 1..=3 {
        assert_eq!(joules(job, StepId::EXTERN), joules(job, StepId(0)));
        assert_eq!(ledger.job(job).expect("job").joules, joules(job, StepId(0)));
    }
    assert_eq!(ledger.node().joules, 3.0 * 340.0);
}

/// Without device constraints, job 2 uses GPU 0, which Slurm gave job 1 only, at 60% SM
/// beside job 1's 20%, and a process of no job at 20%: at 240 W with 40 W idle, job 1 pays
/// the idle power and its own use (40 + 200 x 0.2 W), job 2 its use (120 W) on its job
/// and extern step (none of its steps holds the GPU), the no-job use nobody (it stays in
/// the node's figure); job 2's use is logged once.
#[test]
fn a_gpu_is_charged_to_everyone_who_used_it() {
    // the capture is in place before anything is logged
    crate::scheduler::tests::logged();
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let split = Split::Devices {
        idle_watts: Some(40.0),
    };
    let job = |job: u32, holds: Vec<(u32, f64)>| ObservedJob {
        job,
        counters: None,
        steps: vec![
            step(StepId::EXTERN, None),
            ObservedStep {
                holds,
                started: Some(w0),
                ..step(StepId(0), None)
            },
        ],
    };
    let sample = |secs: u64| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_secs(secs),
        wall: w0 + Duration::from_secs(secs),
        node_uj: secs * 240_000_000,
        settled: true,
        jobs: vec![job(1, vec![(0, 1.0)]), job(2, vec![])],
        parts: vec![],
        watts: None,
        counts: vec![],
        devices: vec![ObservedDevice {
            position: 0,
            energy_uj: secs * 240_000_000,
            busy: if secs == 0 {
                vec![]
            } else {
                vec![(Some(1), 20.0), (Some(2), 60.0), (None, 20.0)]
            },
            instances: vec![],
        }],
    };
    for secs in 0..=3 {
        ledger.update(&sample(secs), split);
    }
    let joules = |job, step| ledger.step(job, step).expect("step").joules;
    assert!((joules(1, StepId(0)) - 3.0 * 80.0).abs() < 1e-9);
    assert!((ledger.job(1).expect("job").joules - 3.0 * 80.0).abs() < 1e-9);
    assert!((ledger.job(2).expect("job").joules - 3.0 * 120.0).abs() < 1e-9);
    assert!((joules(2, StepId::EXTERN) - 3.0 * 120.0).abs() < 1e-9);
    assert_eq!(joules(2, StepId(0)), 0.0);
    assert_eq!(ledger.node().joules, 3.0 * 240.0);
    let warned: Vec<String> = crate::scheduler::tests::logged()
        .into_iter()
        .filter(|l| l.starts_with("WARN job 2 uses GPU 0"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
}

/// A GPU whose idle power the admin did not give learns it, and slurmd's log names the key
/// that sets it: rust_gpu's own `EnergyGpuIdleWatts`, not the node meter's
/// `EnergyAttributionIdleWatts` (the first run on a real GPU logged the latter).
#[test]
fn a_gpu_learning_its_idle_power_names_the_key_that_sets_it() {
    crate::scheduler::tests::logged();
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let split = Split::Devices { idle_watts: None };
    let sample = |secs: u64| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_secs(secs),
        wall: w0 + Duration::from_secs(secs),
        node_uj: secs * 77_000_000,
        settled: true,
        jobs: vec![],
        parts: vec![],
        watts: None,
        counts: vec![],
        devices: vec![ObservedDevice {
            position: 7,
            energy_uj: secs * 77_000_000,
            busy: vec![],
            instances: vec![],
        }],
    };
    for secs in 0..=2 * floor::SUSTAIN as u64 {
        ledger.update(&sample(secs), split);
    }
    let said: Vec<String> = crate::scheduler::tests::logged()
        .into_iter()
        .filter(|l| l.contains("static power of GPU 7"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("learned at 77.0 W"), "{said:?}");
    assert!(said[0].contains("(EnergyGpuIdleWatts sets it)"), "{said:?}");
}

/// A MIG-partitioned GPU at 240 W (40 W idle) with a 42-SM instance 90% busy and a
/// 14-SM instance 30% busy: the idle power by size, the rest by size times activity.
#[test]
fn a_partitioned_gpu_is_split_among_its_instances() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let split = Split::Devices {
        idle_watts: Some(40.0),
    };
    let holder = |job: u32, position: u32| ObservedJob {
        job,
        counters: None,
        steps: vec![ObservedStep {
            holds: vec![(position, 1.0)],
            started: Some(w0),
            ..step(StepId(0), None)
        }],
    };
    let sample = |secs: u64| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_secs(secs),
        wall: w0 + Duration::from_secs(secs),
        node_uj: secs * 240_000_000,
        settled: true,
        jobs: vec![holder(4, 100), holder(5, 101)],
        parts: vec![],
        watts: None,
        counts: vec![],
        devices: vec![ObservedDevice {
            position: 0,
            energy_uj: secs * 240_000_000,
            busy: vec![],
            instances: vec![
                ObservedInstance {
                    position: 100,
                    sms: 42,
                    activity: 90.0,
                },
                ObservedInstance {
                    position: 101,
                    sms: 14,
                    activity: 30.0,
                },
            ],
        }],
    };
    for secs in 0..=2 {
        ledger.update(&sample(secs), split);
    }
    let joules = |job| ledger.step(job, StepId(0)).expect("step").joules;
    // per second: static 30 + 10 W, dynamic 200 W by 3780 : 420
    assert!((joules(4) - 2.0 * 210.0).abs() < 1e-9, "{}", joules(4));
    assert!((joules(5) - 2.0 * 30.0).abs() < 1e-9, "{}", joules(5));
}

/// A job that runs 1 000 steps one after another (each a second, at 250 W) keeps its
/// running steps and at most [`ENDED_STEPS_KEPT`] ended ones, in a ledger file that
/// stops growing; its own figure is still the node's energy over its whole life, and
/// once it has left it keeps the steps it had.
#[test]
fn a_job_of_a_thousand_steps_keeps_a_bounded_ledger_and_its_whole_energy() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let at = |ms: u64| w0 + Duration::from_millis(ms);
    const STEPS: u32 = 1000;
    // step k runs from k + 0.5 s and is seen at the sample of second k + 1 only
    let observed = |secs: u32| {
        let mut steps = vec![ObservedStep {
            started: Some(w0),
            ..step(StepId::EXTERN, None)
        }];
        if (1..=STEPS).contains(&secs) {
            steps.push(ObservedStep {
                started: Some(at(u64::from(secs) * 1000 - 500)),
                ..step(StepId(secs - 1), None)
            });
        }
        vec![ObservedJob {
            job: 9,
            counters: None,
            steps,
        }]
    };
    let mut largest = 0;
    for secs in 0..=STEPS + 1 {
        let obs = Observation {
            unowned_cpu_ns: 0,
            jobs: observed(secs),
            ..observation(t0, w0, u64::from(secs), u64::from(secs) * 250, vec![])
        };
        ledger.update(&obs, Split::Node);
        let steps = ledger.jobs().map(|j| j.steps().count()).sum::<usize>();
        // the extern step, the running step, the ended ones kept
        assert!(steps <= 2 + ENDED_STEPS_KEPT, "{steps} steps at {secs} s");
        largest = largest.max(ledger.to_text().len());
    }
    let job = ledger.job(9).expect("job");
    assert_eq!(job.joules, 250.0 * f64::from(STEPS + 1));
    assert_eq!(ledger.node().joules, 250.0 * f64::from(STEPS + 1));
    assert_eq!(
        ledger.step(9, StepId::EXTERN).map(|a| a.joules),
        Some(job.joules)
    );
    // the last steps ended are there with their figure (half a second at 250 W)
    let kept: Vec<StepId> = ledger
        .jobs()
        .flat_map(|j| j.steps().map(|(id, _)| id).collect::<Vec<_>>())
        .filter(|&id| id != StepId::EXTERN)
        .collect();
    let first_kept = STEPS - ENDED_STEPS_KEPT as u32;
    assert_eq!(kept, (first_kept..STEPS).map(StepId).collect::<Vec<_>>());
    let last = ledger
        .step(9, StepId(STEPS - 1))
        .expect("the last step")
        .joules;
    assert!((last - 125.0).abs() < 1e-3, "{last}");
    assert_eq!(ledger.step(9, StepId(0)), None);
    // a step's entry is about 110 bytes: the file stays under 6 KB, where keeping
    // every step would have made it over 100 KB
    let text = ledger.to_text();
    assert!(
        largest < 512 + 160 * (2 + ENDED_STEPS_KEPT),
        "{largest} bytes"
    );
    println!(
        "the ledger of a job of {STEPS} steps: {} bytes at its end, {largest} at most",
        text.len()
    );
    // stored and loaded, the same steps with the same figures (times go through
    // decimal text: equal to the microsecond, not to the last bit)
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    ledger.store(&path).expect("stored");
    let loaded = Ledger::load(&path).expect("loads").expect("a ledger");
    let steps = |l: &Ledger| -> Vec<(StepId, f64)> {
        l.jobs()
            .flat_map(|j| j.steps().map(|(s, a)| (s, a.joules)).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(steps(&loaded), steps(&ledger));
    assert!((loaded.sampled_at() - ledger.sampled_at()).abs() < 1e-6);
    // the job leaves: it keeps the steps it had, as they were, while it is kept
    for secs in STEPS + 2..STEPS + 2 + 90 {
        let obs = observation(t0, w0, u64::from(secs), u64::from(secs) * 250, vec![]);
        ledger.update(&obs, Split::Node);
    }
    assert_eq!(ledger.job(9).map(|a| a.joules), Some(job.joules));
    assert_eq!(
        ledger.jobs().map(|j| j.steps().count()).sum::<usize>(),
        1 + ENDED_STEPS_KEPT
    );
}

#[test]
fn node_mode_keeps_the_node_account() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let jobs = || vec![job(1, 1, 0.0, &[(StepId::EXTERN, 0.0)])];
    ledger.update(&observation(t0, w0, 0, 0, jobs()), Split::Node);
    ledger.update(&observation(t0, w0, 2, 500, jobs()), Split::Node);
    assert_eq!(ledger.node().joules, 500.0);
    assert_eq!(ledger.node().watts, 250.0);
    // a job seen at both samples: the node's energy between
    assert_eq!(ledger.job(1).map(|a| a.joules), Some(500.0));
}

#[test]
fn a_file_of_another_version_or_garbage_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("ledger.json");
    assert!(Ledger::load(&path).expect("absent").is_none());
    fs::write(&path, r#"{"version": 2, "jobs": []}"#).expect("write");
    assert!(matches!(
        Ledger::load(&path),
        Err(LedgerError::Format { .. })
    ));
    fs::write(&path, r#"{"version": 1, "jobs": []}"#).expect("write");
    let e = Ledger::load(&path).expect_err("version 1");
    assert!(e.to_string().contains("version 1, not 2"), "{e}");
    // a whole ledger with a negative or absurd figure is refused, not counted
    let mut ledger = Ledger::default();
    let (t0, w0) = (Instant::now(), SystemTime::now());
    ledger.update(&observation(t0, w0, 0, 0, vec![]), Split::Node);
    let text = ledger.to_text();
    let bad = text.replace(r#""joules":0.0"#, r#""joules":-5.0"#);
    assert_ne!(bad, text);
    fs::write(&path, bad).expect("write");
    assert!(matches!(
        Ledger::load(&path),
        Err(LedgerError::Format { .. })
    ));
    // cut short, as by a full disk
    fs::write(&path, &text[..text.len() / 2]).expect("write");
    assert!(matches!(
        Ledger::load(&path),
        Err(LedgerError::Format { .. })
    ));
    fs::write(&path, "{").expect("write");
    assert!(matches!(
        Ledger::load(&path),
        Err(LedgerError::Format { .. })
    ));
}

/// A step's power is one the node drew: a step found after its start is charged the node's
/// energy since then within one interval, and its power is over its life so far, not that
/// interval's; a step whose first interval is a few milliseconds (its first sample rung
/// just after its start) has no power until a window spans a second, never the counter's
/// step magnified (a counter that advanced 5 J in 20 ms reads 250 W for a 200 W node).
#[test]
fn a_steps_power_is_a_power_the_node_drew() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let at_ms = |ms: u64, joules: f64, jobs: Vec<ObservedJob>| Observation {
        unowned_cpu_ns: 0,
        at: t0 + Duration::from_millis(ms),
        wall: w0 + Duration::from_millis(ms),
        node_uj: (joules * 1e6) as u64,
        settled: true,
        jobs,
        parts: vec![],
        counts: vec![],
        devices: vec![],
        watts: None,
    };
    let started = |job: u32, ms: u64| ObservedJob {
        job,
        counters: counters(1, 0.0),
        steps: vec![ObservedStep {
            started: Some(w0 + Duration::from_millis(ms)),
            ..step(StepId::EXTERN, None)
        }],
    };
    // 200 W; job 1 started at 0.2 s and is first seen at 2 s: charged 360 J then, over
    // 1.8 s of its life
    for s in 0..=1 {
        ledger.update(&at_ms(s * 1000, 200.0 * s as f64, vec![]), Split::Node);
    }
    ledger.update(&at_ms(2000, 400.0, vec![started(1, 200)]), Split::Node);
    let job = ledger.job(1).expect("job 1");
    // (unix times in f64 carry microseconds)
    assert!((job.joules - 360.0).abs() < 1e-3, "{}", job.joules);
    assert!((job.watts - 200.0).abs() < 1e-3, "{} W", job.watts);
    // job 2 starts at 2.98 s; a sample rung at 3 s finds the counter 5 J up in its 20 ms
    ledger.update(
        &at_ms(3000, 605.0, vec![started(1, 200), started(2, 2980)]),
        Split::Node,
    );
    let job = ledger.job(2).expect("job 2");
    assert_eq!(job.watts, 0.0, "no power over 20 ms");
    // a second later its window spans a second
    ledger.update(
        &at_ms(4000, 800.0, vec![started(1, 200), started(2, 2980)]),
        Split::Node,
    );
    let watts = ledger.job(2).expect("job 2").watts;
    assert!((watts - 200.0).abs() <= 0.03 * 200.0, "{watts} W");
}

/// Issue 44: a job holding two GPUs whose processes use only the first: the second's
/// energy over the job is idle-held, exactly (GPU 1 at 70 W for 3 s: 210 J), on the job and
/// on the step that holds it; the job's parts are each GPU's energy and add up to it; all
/// of it is kept through the file.
#[test]
fn a_held_gpu_none_of_its_processes_used_is_idle_held() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let split = Split::Devices {
        idle_watts: Some(40.0),
    };
    let job1 = ObservedJob {
        job: 1,
        counters: None,
        steps: vec![
            ObservedStep {
                started: Some(w0),
                ..step(StepId::EXTERN, None)
            },
            ObservedStep {
                holds: vec![(0, 1.0), (1, 1.0)],
                started: Some(w0),
                ..step(StepId(0), None)
            },
        ],
    };
    let device =
        |position: u32, watts: u64, secs: u64, busy: Vec<(Option<u32>, f64)>| ObservedDevice {
            position,
            energy_uj: secs * watts * 1_000_000,
            busy,
            instances: vec![],
        };
    let mut ledger = Ledger::default();
    for secs in 0..=3 {
        let obs = Observation {
            unowned_cpu_ns: 0,
            devices: vec![
                device(0, 300, secs, vec![(Some(1), 50.0)]),
                device(1, 70, secs, vec![]),
            ],
            ..observation(t0, w0, secs, 370 * secs, vec![job1.clone()])
        };
        ledger.update(&obs, split);
    }
    for ledger in [
        ledger.clone(),
        Ledger::parse(ledger.to_text().as_bytes()).expect("the ledger read back"),
    ] {
        let view = ledger.jobs().next().expect("job 1");
        let b = view.breakdown();
        assert_eq!(b.idle_held.gpu, Some(3.0 * 70.0));
        assert_eq!(
            b.idle_held.cpu, None,
            "the GPUs' meters do not measure CPUs"
        );
        let parts = [("gpu0".to_string(), 900.0), ("gpu1".to_string(), 210.0)];
        assert_eq!(b.parts, BTreeMap::from(parts.clone()));
        assert_eq!(view.account().joules, 1110.0);
        for id in [StepId::EXTERN, StepId(0)] {
            let step = view.step_breakdown(id).expect("step");
            assert_eq!(step.idle_held.gpu, Some(210.0), "{id:?}");
            assert_eq!(step.parts, BTreeMap::from(parts.clone()), "{id:?}");
        }
    }
}

/// Issue 44: pm_counters' parts beside a whole-node meter (cpu 250 W, memory 50 W of the
/// node's 500 W; its reads in whole joules): in node mode a job gets each part's energy and
/// the rest; on a shared node each job's share takes each part in proportion. Either way
/// a job's and a step's parts add up to its figure (to 0.1%, here to rounding).
#[test]
fn a_jobs_parts_add_up_to_its_energy() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let ext = StepId::EXTERN;
    let part = |label: &str, joules: u64| Part {
        label: label.into(),
        joules: joules as f64,
        watts: None,
    };
    let run = |split: Split| {
        let mut ledger = Ledger::default();
        for secs in 0..=4u64 {
            let jobs = vec![
                job(
                    1,
                    2,
                    1.5 * secs as f64,
                    &[(ext, 0.0), (StepId(0), 1.5 * secs as f64)],
                ),
                job(2, 2, 0.5 * secs as f64, &[(ext, 0.0)]),
            ];
            let obs = Observation {
                unowned_cpu_ns: 0,
                parts: vec![part("cpu", 250 * secs), part("memory", 50 * secs)],
                ..observation(t0, w0, secs, 500 * secs, jobs)
            };
            ledger.update(&obs, split);
        }
        ledger
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    for split in [Split::Node, idle(100.0)] {
        let ledger = run(split);
        for view in ledger.jobs() {
            let joules = view.account().joules;
            let b = view.breakdown();
            assert!(joules > 0.0);
            assert!(
                close(b.parts.values().sum(), joules),
                "{split:?}: {b:?} of {joules}"
            );
            // the node's composition: cpu 50%, memory 10%, rest 40%
            assert!(close(b.parts["cpu"], 0.5 * joules), "{split:?}: {b:?}");
            assert!(close(b.parts["memory"], 0.1 * joules), "{split:?}: {b:?}");
            assert!(close(b.parts["rest"], 0.4 * joules), "{split:?}: {b:?}");
            for (id, account) in view.steps() {
                let parts: f64 = view.step_breakdown(id).expect("step").parts.values().sum();
                assert!(close(parts, account.joules), "{split:?} {id:?}");
            }
        }
        if split == Split::Node {
            let b = ledger.jobs().next().expect("job 1").breakdown().clone();
            assert_eq!(b.parts["cpu"], 4.0 * 250.0);
            assert_eq!(
                b.idle_held,
                IdleHeld::default(),
                "node mode tells no idle share"
            );
        }
    }
}

/// RAPL's counts make its node figure: its packages and DRAM are the parts, no rest, a
/// count's wrap taken (package-0 at 200 W wraps every 5 s, at 1000 J).
#[test]
fn rapls_domains_are_the_parts_across_a_wrap() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let count = |name: &str, value_uj: u64| HardwareCount {
        name: name.into(),
        value_uj,
        wraps_at_uj: Some(1_000_000_000),
        max_watts: 1000.0,
    };
    let mut ledger = Ledger::default();
    for secs in 0..=8u64 {
        let obs = Observation {
            unowned_cpu_ns: 0,
            counts: vec![
                count("package-0", (600 + 200 * secs) * 1_000_000 % 1_000_000_000),
                count("dram-0", 20 * secs * 1_000_000),
            ],
            ..observation(t0, w0, secs, 220 * secs, vec![job(1, 2, 1.0, &[])])
        };
        ledger.update(&obs, Split::Node);
    }
    let b = ledger.jobs().next().expect("job 1").breakdown().clone();
    let parts = [
        ("dram-0".to_string(), 160.0),
        ("package-0".to_string(), 1600.0),
    ];
    assert_eq!(b.parts, BTreeMap::from(parts));
}

/// Issue 44: on a shared node (100 W static), a job alone holding 2 CPUs and using one
/// CPU-second a second: its static share is the static power (it holds all the jobs'
/// CPUs), and half of it is idle-held: 50 J a second.
#[test]
fn a_job_using_one_of_its_two_cpus_holds_half_its_static_share_idle() {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    for secs in 0..=3u64 {
        let jobs = vec![job(1, 2, secs as f64, &[(StepId::EXTERN, 0.0)])];
        ledger.update(&observation(t0, w0, secs, 300 * secs, jobs), idle(100.0));
    }
    let view = ledger.jobs().next().expect("job 1");
    assert_eq!(view.account().joules, 900.0);
    assert_eq!(view.breakdown().idle_held.cpu, Some(3.0 * 50.0));
    assert_eq!(view.breakdown().idle_held.gpu, None, "no device seen");
    // the source measures no parts: none, not all of it as rest
    assert!(view.breakdown().parts.is_empty());
}

/// The plugin a ledger names is its source's first word: not the meter's description,
/// which names a BMC's address and user (a job's record keeps the plugin alone).
#[test]
fn a_ledgers_plugin_is_its_source_without_the_meters_description() {
    let mut ledger = Ledger::default();
    assert_eq!(ledger.plugin(), "");
    ledger.describe_source("rust_ipmi: lan+ 10.1.2.3:623 as admin: DCMI power reading".into());
    assert_eq!(ledger.plugin(), "rust_ipmi");
    ledger.describe_source("rust_rapl".into());
    assert_eq!(ledger.plugin(), "rust_rapl");
}
