use super::*;
use crate::accounting::Accounting;
use crate::attribution::procs::Procs;
use crate::attribution::steps::tests::Node;
use crate::attribution::{Attribution, Mode, cgroup, grant};
use crate::runtime::step::StepFigure;
use std::fs;
use std::time::SystemTime;

/// A benchmark's sample `k`: the node at 300 W, a second after sample `k - 1`, told the
/// keeper as an update (the benchmark's keeper updates at every sample).
fn node_sample(
    keeper: &mut Keeper,
    accounting: &mut Accounting,
    (t0, w0): (Instant, SystemTime),
    k: u32,
) {
    let at = Duration::from_secs(u64::from(k));
    let reading = Reading {
        energy_uj: u64::from(k) * 300_000_000,
        complete: true,
        ..Reading::default()
    };
    accounting.record(&reading, t0 + at, w0 + at);
    keeper.interval = Duration::ZERO;
    keeper.on_sample(accounting, &Reading::default());
}

/// The numbers of jobs a benchmark runs: 1, 16, 64 and 256, or those `BENCH_JOBS` lists
/// (`BENCH_JOBS=256`, to profile one).
fn bench_jobs() -> Vec<u32> {
    match std::env::var("BENCH_JOBS") {
        Ok(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect(),
        Err(_) => vec![1, 16, 64, 256],
    }
}

/// The mean wall and CPU time, µs, of the samples `ks`, each timed alone once the writer's
/// thread is done with the update before it: slurmd samples once a second, and the thread
/// writes a ledger of 256 jobs in milliseconds, so a sample never finds it still at work.
fn timed_samples(
    keeper: &mut Keeper,
    accounting: &mut Accounting,
    start: (Instant, SystemTime),
    ks: std::ops::RangeInclusive<u32>,
) -> (f64, f64) {
    let (mut wall, mut cpu, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
    for k in ks {
        while Arc::strong_count(&keeper.ledger) > 1 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let (started, cpu_before) = (Instant::now(), crate::ledger::tests::thread_cpu());
        node_sample(keeper, accounting, start, k);
        wall += started.elapsed();
        cpu += crate::ledger::tests::thread_cpu() - cpu_before;
        n += 1;
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n.max(1));
    (per(wall), per(cpu))
}

/// The attribution cost per sample in steady state (counters read, model, ledger
/// written) with 1, 16, 64 and 256 one-CPU jobs of two steps each over a faithful v1 tree,
/// their slurmstepds among 500 other processes (found at the first sample only):
/// `cargo test --release -p slurm-energy-logic --lib attribution_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn attribution_cost_per_sample() {
    for jobs in bench_jobs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
        let proc_root = tmp.path().join("proc");
        fs::create_dir_all(&spool).expect("spool");
        for pid in 1..=500 {
            procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
        }
        let mut sockets = Vec::new();
        for job in 1..=jobs {
            let cpu = (job - 1).to_string();
            let steps = [("step_extern", 0), ("step_batch", 1000)];
            let dir = cgroup::tests::v1_tree(&cgroups, "slurm", job, &cpu, u64::MAX, 1000, &steps);
            for (k, step) in [StepId::EXTERN, StepId::BATCH].into_iter().enumerate() {
                // who runs it, as its slurmstepd says (for the metrics' owners)
                grant::tests::grant(job, step, vec![])
                    .publish(&spool)
                    .expect("grant");
                let pid = 1000 + 2 * job + k as u32;
                let stepd = cgroup::tests::v1_stepd(&dir, &step.cgroup_name(), true);
                let socket = spool.join(format!("n1_{job}.{}", step.0));
                sockets.push(procs::tests::stepd(
                    &proc_root,
                    pid,
                    StepKey::new(job, step),
                    &stepd,
                    &socket,
                ));
            }
        }
        let site = Site {
            spool,
            cgroup_root: cgroups,
            proc_root,
        };
        // as slurmd keeps it: the file written by a thread of its own
        let mut keeper = Keeper::shared(&site, 0, None)
            .expect("keeper")
            .writing_off_the_sample();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let rounds = 200u32;
        node_sample(&mut keeper, &mut accounting, (t0, w0), 0);
        let (observed, _, _) = keeper.observe(&[]);
        assert!(observed.iter().all(|j| j.counters.is_some()));
        let (us, cpu_us) = timed_samples(&mut keeper, &mut accounting, (t0, w0), 1..=rounds);
        // back to back, as the benchmark measured until 2026-12-07: the next sample copies
        // the ledger while the writer's thread still holds it, which slurmd's samples (a
        // second apart) never do
        let started = Instant::now();
        for k in rounds + 1..=2 * rounds {
            node_sample(&mut keeper, &mut accounting, (t0, w0), k);
        }
        let back_to_back = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        // the same with no file written at all (ledger, slots), by any thread (above, the
        // writer's thread shares the machine's cores with the sample): their place is a
        // directory others may write, where a write is refused at once (a `stat`)
        let untrusted = tmp.path().join("untrusted");
        fs::create_dir(&untrusted).expect("dir");
        fs::set_permissions(
            &untrusted,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .expect("chmod");
        let untrusted = Publisher::new(&untrusted.join("ledger.json"));
        let publisher = std::mem::replace(&mut keeper.publisher, untrusted);
        let (unstored, unstored_cpu) = timed_samples(
            &mut keeper,
            &mut accounting,
            (t0, w0),
            2 * rounds + 1..=3 * rounds,
        );
        keeper.publisher = publisher;
        // the part of it that finds the jobs and reads their cgroups
        let started = Instant::now();
        for _ in 0..rounds {
            assert_eq!(keeper.observe(&[]).0.len(), jobs as usize);
        }
        let observe = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        // the same with the Prometheus metrics file written at each sample
        let file = tmp.path().join("slurm_energy.prom");
        let readable = crate::replace::Access {
            mode: 0o644,
            group: None,
        };
        let who = crate::metrics::Identity {
            node: "n1".into(),
            source: "rust_rapl".into(),
            attribution: keeper.attribution().into(),
        };
        let mut metrics = crate::metrics::MetricsFile::open(&file, readable).expect("opened");
        let mut keeper = keeper.publishing(
            true,
            Box::new(move |ledger, owners| {
                metrics.write(&crate::metrics::render(ledger, owners, &who));
            }),
        );
        let (with_metrics, with_metrics_cpu) = timed_samples(
            &mut keeper,
            &mut accounting,
            (t0, w0),
            3 * rounds + 1..=4 * rounds,
        );
        let bytes = fs::metadata(&file).map_or(0, |m| m.len());
        println!(
            "{jobs} jobs: {us:.0} us per sample ({:.1} us per job; {cpu_us:.0} us CPU), of which steps and \
             cgroups read {observe:.0} us ({:.1} us per job); with no ledger file written \
             {unstored:.0} us ({unstored_cpu:.0} us CPU); with the metrics file \
             ({bytes} bytes, by the writer's thread) {with_metrics:.0} us ({with_metrics_cpu:.0} us \
             CPU); back to back {back_to_back:.0} us",
            us / f64::from(jobs),
            observe / f64::from(jobs)
        );
    }
}

/// The GPU attribution cost per sample in steady state (steps found, their GPUs known,
/// each GPU's processes' use charged per job, ledger written) with 1, 16, 64 and 256 jobs
/// sharing 8 GPUs by shards, each with a process using its GPU, among 500 other
/// processes: `cargo test --release -p slurm-energy-logic --lib gpu_attribution_cost --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn gpu_attribution_cost_per_sample() {
    use crate::source::DeviceReading;
    for jobs in [1u32, 16, 64, 256] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, proc_root) = (tmp.path().join("spool"), tmp.path().join("proc"));
        fs::create_dir_all(&spool).expect("spool");
        for pid in 1..=500 {
            procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
        }
        let mut sockets = Vec::new();
        for job in 1..=jobs {
            let (stepd, task) = (10_000 + 2 * job, 10_001 + 2 * job);
            let job_dir = format!("0::/system.slice/slurmstepd.scope/job_{job}");
            let socket = spool.join(format!("n1_{job}.0"));
            let cgroup = format!("{job_dir}/step_0/slurm\n");
            sockets.push(procs::tests::stepd(
                &proc_root,
                stepd,
                StepKey::new(job, StepId(0)),
                &cgroup,
                &socket,
            ));
            let task_cgroup = format!("{job_dir}/step_0/user/task_0\n");
            procs::tests::process(&proc_root, task, "python", &task_cgroup);
            grant::tests::shards(job, StepId(0), 2, job % 8)
                .publish(&spool)
                .expect("grant");
        }
        // as slurmd keeps it: the file written by a thread of its own
        let mut keeper = Keeper::devices(&spool, 0, GresOrder::Detected, Some(60.0), &proc_root)
            .expect("keeper")
            .writing_off_the_sample();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let rounds = 200u32;
        let mut started = Instant::now();
        for k in 0..=rounds {
            if k == 1 {
                started = Instant::now();
            }
            let devices: Vec<DeviceReading> = (0..8u32)
                .map(|gpu| DeviceReading {
                    position: gpu,
                    file: Some((195, gpu)),
                    energy_uj: u64::from(k) * 300_000_000,
                    watts: Some(300.0),
                    busy: (1..=jobs)
                        .filter(|job| job % 8 == gpu)
                        .map(|job| (10_001 + 2 * job, u64::from(k) * u64::from(job)))
                        .collect(),
                    instances: vec![],
                })
                .collect();
            let at = Duration::from_secs(u64::from(k));
            let reading = Reading {
                energy_uj: u64::from(k) * 2_400_000_000,
                complete: true,
                ..Reading::default()
            };
            accounting.record(&reading, t0 + at, w0 + at);
            keeper.interval = Duration::ZERO;
            keeper.on_sample(&accounting, &Reading { devices, ..reading });
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let charged = (1..=jobs)
            .filter(|job| {
                keeper
                    .ledger
                    .step(*job, StepId(0))
                    .is_some_and(|a| a.joules > 0.0)
            })
            .count();
        assert_eq!(charged, jobs as usize, "every job holds its GPU");
        println!(
            "{jobs} jobs on 8 GPUs: {us:.0} us per sample ({:.1} us per job)",
            us / f64::from(jobs)
        );
    }
}

#[test]
fn without_cgroups_the_keeper_says_what_is_missing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let site = Site {
        spool: tmp.path().to_path_buf(),
        cgroup_root: tmp.path().join("nothing"),
        proc_root: tmp.path().join("proc"),
    };
    let e = Keeper::shared(&site, 0, None).err().expect("error");
    assert!(e.contains("cgroup"), "{e}");
}

#[test]
fn a_step_reads_its_share_extrapolated_and_never_less() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
    fs::create_dir_all(&spool).expect("spool");
    let job = cgroup::tests::v1_tree(
        &cgroups,
        "slurm",
        5,
        "0",
        u64::MAX,
        0,
        &[("step_extern", 0)],
    );
    let proc_root = tmp.path().join("proc");
    let stepd = cgroup::tests::v1_stepd(&job, "step_extern", true);
    let socket = spool.join("n1_5.4294967292");
    let _sock = procs::tests::stepd(
        &proc_root,
        40,
        StepKey::new(5, StepId::EXTERN),
        &stepd,
        &socket,
    );
    let procs = Procs::from_path(&proc_root);
    let site = Site {
        spool: spool.clone(),
        cgroup_root: cgroups.clone(),
        proc_root,
    };
    let attribution = Attribution {
        mode: Mode::Shared,
        idle_watts: Some(10.0),
    };
    let mut keeper = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
    let mut share = StepFigure::from_path(&ledger_path(&spool, 0), &procs, 40, true);
    // no ledger yet: no figure at all, not 0 J
    assert!(!share.read().complete);

    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let reading = |uj| Reading {
        energy_uj: uj,
        complete: true,
        ..Reading::default()
    };
    accounting.record(&reading(0), t0, w0);
    keeper.on_sample(&accounting, &Reading::default());
    // 2 s later, 200 J: the job alone gets it all, at 100 W
    let later = |s| (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
    let (t, w) = later(2);
    accounting.record(&reading(200_000_000), t, w);
    keeper.interval = Duration::ZERO;
    // the file is written at every update: this step reads it (no doorbell)
    keeper.on_sample(&accounting, &Reading::default());
    let first = share.read();
    assert!(first.complete);
    // over its life: from its slurmstepd's start (its socket's time here, a moment before
    // the first sample: no energy was seen before that sample)
    let started = fs::metadata(&socket)
        .and_then(|m| m.modified())
        .expect("socket's time");
    let life = crate::ledger::unix(w) - crate::ledger::unix(started);
    let watts = first.watts.expect("a power");
    assert!(
        (watts - 200.0 / life).abs() < 0.01,
        "{watts} W over {life} s"
    );
    // read now, i.e. up to 2 s before the sample's wall time: no extrapolation back
    assert!(first.energy_uj >= 200_000_000, "{}", first.energy_uj);
    assert!(
        first.energy_uj <= 200_000_000 + 300_000_000,
        "capped at 3 s"
    );
    // the power falls to 0: the next sample publishes no more joules; the figure is
    // the published one again, not what was brought forward at the old power
    let (t, w) = later(3);
    accounting.record(&reading(200_000_000), t, w);
    keeper.interval = Duration::ZERO;
    keeper.on_sample(&accounting, &Reading::default());
    let after_fall = share.read();
    assert_eq!(after_fall.watts, Some(0.0));
    assert_eq!(after_fall.energy_uj, 200_000_000);
    // the ledger is continued by a new keeper
    let again = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
    assert_eq!(
        again.ledger.step(5, StepId::EXTERN).map(|a| a.joules),
        Some(200.0)
    );
}

/// A step's last read is answered by an update that charges it, and no later one does;
/// with its extern step's, its job is charged no more, and the node's energy goes to the
/// jobs still on it. Forgotten with the step.
#[test]
fn a_step_is_charged_up_to_its_last_read_and_its_job_no_more_after_its_extern_steps() {
    let mut node = Node::new("cgroup");
    let mount = node.site.cgroup_root.clone();
    let five = [("step_extern", 0), ("step_batch", 0)];
    let job5 = cgroup::tests::v1_tree(&mount, "slurm", 5, "0", u64::MAX, 0, &five);
    let job6 = cgroup::tests::v1_tree(&mount, "slurm", 6, "1", u64::MAX, 0, &five[..1]);
    let stepd = |job: &str, step| cgroup::tests::v1_stepd(job, step, true);
    node.start(5, StepId::EXTERN, 40, &stepd(&job5, "step_extern"));
    node.start(5, StepId::BATCH, 41, &stepd(&job5, "step_batch"));
    node.start(6, StepId::EXTERN, 50, &stepd(&job6, "step_extern"));
    // no static power, nobody busy: each job gets half of each interval
    let mut keeper = Keeper::shared(&node.site, 0, Some(0.0)).expect("keeper");
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let mut sample = |keeper: &mut Keeper, s: u64, last_read: Option<u32>| {
        let (t, w) = (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
        let reading = Reading {
            energy_uj: s * 100_000_000,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading, t, w);
        keeper.interval = Duration::ZERO;
        if let Some(pid) = last_read {
            keeper.pace().last_read(pid);
        }
        keeper.on_sample(&accounting, &Reading::default());
        let joules = |job, step| keeper.ledger.step(job, step).map(|a| a.joules.round());
        (
            joules(5, StepId::EXTERN),
            joules(5, StepId::BATCH),
            joules(6, StepId::EXTERN),
        )
    };
    sample(&mut keeper, 0, None);
    let (_, batch, _) = sample(&mut keeper, 2, None);
    assert_eq!(sample(&mut keeper, 2, None).0, Some(100.0));
    // the batch step's last read: the update that answers charges it
    let (extern5, batch_last, six) = sample(&mut keeper, 4, Some(41));
    assert_eq!((extern5, six), (Some(200.0), Some(200.0)));
    assert!(batch_last > batch, "{batch_last:?} > {batch:?}");
    // the job goes on in its extern step; its batch step is charged no more
    assert_eq!(
        sample(&mut keeper, 6, None),
        (Some(300.0), batch_last, Some(300.0))
    );
    // the extern step's last read, answered; then the job is charged no more
    assert_eq!(
        sample(&mut keeper, 8, Some(40)),
        (Some(400.0), batch_last, Some(400.0))
    );
    assert_eq!(
        sample(&mut keeper, 10, None),
        (Some(400.0), batch_last, Some(600.0))
    );
    assert_eq!(keeper.ledger.job(5).map(|a| a.joules.round()), Some(400.0));
    // a pid that is no step's changes nothing
    assert_eq!(
        sample(&mut keeper, 12, Some(99)),
        (Some(400.0), batch_last, Some(800.0))
    );
    node.ends(5, StepId::EXTERN, 40);
    node.ends(5, StepId::BATCH, 41);
    sample(&mut keeper, 14, None);
    assert!(keeper.ended.is_empty(), "{:?}", keeper.ended);
}

/// Steps ask slurmd for their figures, but the ledger file (what a step reads when slurmd
/// does not answer, what a slurmd started again continues from, what senergy reads) is
/// written at every update, and when slurmd stops; every update is
/// also in the book that answers the questions.
#[test]
fn the_ledger_file_and_the_slots_are_written_at_each_update_and_at_the_end() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut keeper = Keeper::node(tmp.path(), 0).expect("keeper");
    let path = keeper.path().to_path_buf();
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let written = || {
        Ledger::load(&path)
            .expect("ledger")
            .map(|l| l.sampled_at() - crate::ledger::unix(w0))
    };
    let mut sample = |keeper: &mut Keeper, secs: u64| {
        let at = Duration::from_secs(secs);
        let reading = Reading {
            energy_uj: secs * 100_000_000,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading, t0 + at, w0 + at);
        // each sample updates (the pace counts real time; these are a second apart)
        keeper.interval = Duration::ZERO;
        keeper.on_sample(&accounting, &Reading::default());
    };
    // to the unix time's last bit (2.4e-7 s in 2026): the sample's wall time goes through the
    // accounting's clock and the file's text
    let near = |got: Option<f64>, secs: f64| got.is_some_and(|t| (t - secs).abs() < 1e-6);
    for secs in 0..4 {
        sample(&mut keeper, secs);
        assert!(near(written(), secs as f64), "at {secs} s: {:?}", written());
    }
    let book = keeper.book();
    let (mine, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
    let current = crate::exchange::ask::Request::new(None, crate::exchange::ask::Want::Current);
    book.take(current, theirs, Instant::now());
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &mine, &mut bytes).expect("answer");
    let answer = crate::exchange::ask::Answer::decode(&bytes).expect("an answer");
    assert!((answer.sampled_at - crate::ledger::unix(w0) - 3.0).abs() < 1e-3);
    // the slots, which Slurm's periodic polls read, hold the same update's figures
    let slots = crate::exchange::slots::Reader::open(&path).expect("the slots");
    let crate::exchange::slots::Slot::Found(slotted) = slots.read(None) else {
        panic!("the node's figures in the slots");
    };
    assert_eq!(slotted, answer);
    drop(keeper);
    assert!(
        near(written(), 3.0),
        "written as slurmd stops: {:?}",
        written()
    );
}
