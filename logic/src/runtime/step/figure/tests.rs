use super::*;
use crate::attribution::procs;
use crate::exchange::doorbell::ANSWER_WAIT;
use crate::exchange::{ask, doorbell, slots};
use crate::ledger::{self, Ledger};
use crate::source::PartReading;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A requeued job's new slurmstepd reads the ledger before slurmd has seen its run: the
/// step of its name that the ledger holds began 30 s before this process, and is the
/// run before; it counts nothing of it. Once the ledger holds this run's step, it
/// counts that.
/// A /proc under `dir` (returned) where process 40 is `slurmstepd: [7.batch]`, started 5 s
/// ago: 1 000 s since boot, the process at 99 500 ticks.
fn batch_stepd(dir: &Path) -> PathBuf {
    let proc_root = dir.join("proc");
    fs::create_dir_all(proc_root.join("40")).expect("proc");
    fs::write(proc_root.join("uptime"), "1000.00 1.00\n").expect("uptime");
    fs::write(
        proc_root.join("40/stat"),
        "40 (slurmstepd) S 1 40 40 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99500 0 0\n",
    )
    .expect("stat");
    fs::write(proc_root.join("40/cmdline"), "slurmstepd: [7.batch]\0").expect("cmdline");
    proc_root
}

/// A ledger of slurmd splitting by `split`, begun 100 s before `now`, whose node account
/// holds `node_j` at 100 W and job 7 and its batch step `step_j` at `step_watts`.
fn publish_split(path: &Path, now: f64, split: &str, node_j: f64, step_j: f64, step_watts: f64) {
    let node = serde_json::json!({"joules": node_j, "watts": 100.0, "since": now - 100.0});
    let step = serde_json::json!({"joules": step_j, "watts": step_watts, "since": now - 1.0});
    let text = serde_json::json!({
        "version": ledger::VERSION, "epoch": ((now - 100.0) * 1e6) as u64,
        "sampled_at": unix_now(), "node": node, "parts": [], "split": split,
        "jobs": [{"job": 7, "last_seen": now, "account": step,
                  "steps": [{"step": StepId::BATCH.0, "last_seen": now, "account": step}]}],
    });
    fs::write(path, text.to_string()).expect("ledger");
}

#[test]
fn a_step_counts_only_its_own_run_of_its_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("ledger.json");
    let now = unix_now();
    let publish = |since: f64, joules: f64| {
        let account = serde_json::json!({"joules": joules, "watts": 100.0, "since": since});
        let text = serde_json::json!({
            "version": ledger::VERSION, "epoch": ((now - 100.0) * 1e6) as u64,
            "sampled_at": unix_now(), "node": account, "parts": [],
            "learned_idle_watts": null,
            "jobs": [{"job": 7, "last_seen": now, "account": account,
                      "steps": [{"step": StepId::BATCH.0, "last_seen": now, "account": account}]}],
        });
        fs::write(&path, text.to_string()).expect("ledger");
    };
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true).stacked();
    publish(now - 35.0, 3_000.0);
    let first = step.read();
    assert!(first.complete);
    assert_eq!(first.energy_uj, 0, "the run before is not this step's");
    publish(now - 5.0, 400.0);
    assert_eq!(step.read().energy_uj, 400_000_000);
}

/// The doorbell of the ledger at `path` as a slurmd of before opened it: rings only, no
/// questions (the tests of a step's reads through the file, which a step falls back to).
fn as_before(path: &Path) {
    fs::remove_file(ask::ask_path(path)).expect("the socket for questions");
}

/// A ledger's node account at unix time `sampled_at`, begun at `epoch`, published.
/// The ledger at `path` as slurmd left it when it is late: written longer ago than a
/// figure is brought forward.
fn make_late(path: &Path) {
    let written = SystemTime::now() - LEDGER_PERIOD - Duration::from_millis(500);
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(written))
        .expect("ledger's time");
}

fn publish(path: &Path, epoch: f64, sampled_at: f64, joules: f64, watts: f64) {
    let text = serde_json::json!({
        "version": ledger::VERSION,
        "epoch": (epoch * 1e6) as u64,
        "sampled_at": sampled_at,
        "node": {"joules": joules, "watts": watts, "since": epoch},
        "parts": [{"label": "Accel0", "joules": joules / 2.0, "watts": null}],
        "learned_idle_watts": null,
        "jobs": [],
    });
    fs::write(path, text.to_string()).expect("ledger");
}

/// A step asks slurmd for a fresh sample at its edges only: its first read, and a read
/// without tasks from elsewhere than Slurm's periodic polls (its last, as its tasks are
/// removed, or sstat's). A step that never has tasks (26.05's extern step) does not ring
/// at each of its polls. While tasks run, sstat's read rings only where its figure could
/// not be brought forward to the call: plugins are stacked, or the ledger is late.
#[test]
fn a_step_rings_at_its_edges_not_at_slurms_periodic_polls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = tmp.path().join("proc");
    let path = tmp.path().join("energy-ledger.0.json");
    let rings = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&rings);
    let now = unix_now();
    publish(&path, now - 100.0, now, 1000.0, 200.0);
    let ledger = path.clone();
    let pace = Arc::default();
    let _bell = doorbell::Doorbell::open(
        &doorbell::doorbell_path(&path),
        pace,
        Arc::default(),
        move || {
            counted.fetch_add(1, Ordering::SeqCst);
            publish(&ledger, now - 100.0, unix_now(), 1000.0, 200.0);
        },
    )
    .expect("doorbell");
    as_before(&path);
    procs::tests::process(&proc_root, 40, "slurmstepd: [5.extern]", "0::/");
    // a read from `thread` makes the rings counted `expected`, once they arrived (an sstat
    // read does not wait for its own: it reaches slurmd's thread a moment later)
    let read_from = |step: &mut StepFigure, thread: &str, expected: u32, why: &str| {
        procs::tests::name_calling_thread(thread);
        // the ledger written just now would need no ring
        std::thread::sleep(Duration::from_millis(30));
        assert!(step.read().complete);
        let deadline = Instant::now() + Duration::from_secs(1);
        while rings.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(rings.load(Ordering::SeqCst), expected, "{why}");
    };
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false);
    read_from(&mut step, "acctg", 1, "the first read rings");
    read_from(&mut step, "acctg", 1, "a periodic poll does not");
    read_from(&mut step, "acctg_energy", 1, "nor a profile's");
    read_from(&mut step, "slurmstepd", 2, "the last poll does");
    procs::tests::child(&proc_root, 40, 41);
    read_from(&mut step, "slurmstepd", 2, "not while tasks run");
    // slurmd is late: the ledger was written longer ago than a figure is brought forward
    make_late(&path);
    read_from(&mut step, "acctg", 2, "a periodic poll still does not");
    read_from(
        &mut step,
        "slurmstepd",
        3,
        "sstat's read while tasks run does, when the ledger is late",
    );
    read_from(&mut step, "slurmstepd", 3, "and not once it was answered");
    // stacked, a figure is not brought forward: sstat's read while tasks run rings
    let mut stacked =
        StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false).stacked();
    read_from(
        &mut stacked,
        "acctg",
        3,
        "with tasks, the first read does not",
    );
    read_from(
        &mut stacked,
        "acctg",
        3,
        "stacked: a periodic poll does not",
    );
    read_from(&mut stacked, "slurmstepd", 4, "stacked: sstat's read does");
}

/// In node mode a step's figure is the node's energy since its first reading, brought
/// up to the call; a slurmd gone, a corrupt ledger or a new one never cost it what it
/// had, and a ledger that never was gives no figure rather than 0 J.
#[test]
fn a_step_reads_the_node_since_it_began_and_keeps_its_figure_through_trouble() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(tmp.path()), 1, false);
    let first = step.read();
    assert!(!first.complete, "no ledger: unavailable");
    // each read brings the ledger's last sample up to itself: on a loaded machine the
    // figure moves by the node's power over the time these steps take
    let began = Instant::now();
    let epoch = unix_now() - 100.0;
    let now = unix_now();
    // the ledger sampled 0.5 s ago at 1000 J, 200 W: the step began at ~1100 J
    publish(&path, epoch, now - 0.5, 1000.0, 200.0);
    let start = step.read();
    assert!(start.complete);
    assert!(start.energy_uj < 1_000_000, "{}", start.energy_uj);
    let now = unix_now();
    publish(&path, epoch, now, 1900.0, 300.0);
    let counted_at = Instant::now();
    let reading = step.read();
    let figure = reading.energy_uj as f64 / 1e6;
    let slack = 1.0 + 300.0 * began.elapsed().as_secs_f64();
    assert!((figure - 800.0).abs() < slack, "{figure} (±{slack})");
    // the node's parts, for the profile
    assert_eq!(
        reading.parts,
        vec![PartReading {
            label: "Accel0",
            energy_uj: Some(950_000_000),
            watts: None
        }]
    );
    // corrupt: the figure stays
    fs::write(&path, "{\"version\": 2, \"jo").expect("corrupt");
    let kept = step.read();
    assert!(kept.complete && kept.watts.is_none());
    assert!((kept.energy_uj as f64 / 1e6 - figure).abs() < 1.0);
    // stale (slurmd gone for 20 s): the figure stays
    let now = unix_now();
    publish(&path, epoch, now - 20.0, 5000.0, 300.0);
    assert!((step.read().energy_uj as f64 / 1e6 - figure).abs() < 1.0);
    // a new ledger begun 2 s from now, 50 J into it: kept + 2 s at 300 W + 50 J, and
    // the time the test itself took since the last read it counted, at 300 W
    let now = unix_now();
    publish(&path, now + 2.0, now + 2.0, 50.0, 100.0);
    let test_took = counted_at.elapsed().as_secs_f64() * 300.0;
    let after = step.read().energy_uj as f64 / 1e6;
    let least = figure + 600.0 + 50.0;
    assert!(
        after >= least - 1.0 && after <= least + test_took + 1.0,
        "{after} vs {figure}"
    );
}

/// slurmd killed: a read of its last ledger while it is away (older than a figure is
/// brought forward, not yet stale: the slots file it left, or its file) counts the figure
/// to the ledger's sample and a second after, not to the read; when slurmd begins a new
/// ledger, the time from there to the new ledger's start is estimated at the step's last
/// power, none of it lost (counted from the read, the 4 s between were).
#[test]
fn a_read_while_slurmd_is_away_loses_no_time_to_the_new_ledger() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(tmp.path()), 1, false);
    let epoch = unix_now() - 100.0;
    let t = unix_now();
    // its first read: the node at 1000 J 6 s ago, brought forward a second at 300 W
    publish(&path, epoch, t - 6.0, 1000.0, 300.0);
    assert!(step.read().complete);
    // slurmd's last sample before it was killed, 5 s ago: 300 J since, and a second more
    publish(&path, epoch, t - 5.0, 1300.0, 300.0);
    let figure = step.read().energy_uj as f64 / 1e6;
    assert!((figure - 300.0).abs() < 1.0, "{figure}");
    // slurmd back with a new ledger begun a second from now, 30 J into it: the 5 s from
    // the figure's end (4 s ago) to the new start at 300 W are estimated
    publish(&path, t + 1.0, t + 1.0, 30.0, 300.0);
    let after = step.read().energy_uj as f64 / 1e6;
    let expected = figure + 5.0 * 300.0 + 30.0;
    assert!(
        (after - expected).abs() < 1.0,
        "{after} J against {expected} J"
    );
}

/// A ledger at `path` and a slurmd that answers each ring with a fresh sample of it; what
/// the rings said is in the pace.
fn answered_ledger(path: &Path) -> (Arc<doorbell::Pace>, doorbell::Doorbell) {
    let now = unix_now();
    publish(path, now - 100.0, now, 1000.0, 200.0);
    let ledger = path.to_path_buf();
    let pace: Arc<doorbell::Pace> = Arc::default();
    let bell = doorbell::Doorbell::open(
        &doorbell::doorbell_path(path),
        Arc::clone(&pace),
        Arc::default(),
        move || {
            let new = ledger.with_extension("new");
            publish(&new, now - 100.0, unix_now(), 1000.0, 200.0);
            fs::rename(&new, &ledger).expect("ledger");
        },
    )
    .expect("doorbell");
    as_before(path);
    (pace, bell)
}

/// Once its tasks, seen at a read, are gone, a step's read is its last: it says so once in
/// its ring, with its slurmstepd's pid, so that slurmd charges it no more after answering.
/// A step never seen with tasks says nothing of the kind.
#[test]
fn a_step_whose_tasks_are_gone_says_its_read_is_its_last_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = tmp.path().join("proc");
    let path = tmp.path().join("energy-ledger.0.json");
    let (pace, _bell) = answered_ledger(&path);
    procs::tests::process(&proc_root, 40, "slurmstepd: [5.batch]", "0::/");
    procs::tests::name_calling_thread("slurmstepd");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false);
    let mut read = || {
        assert!(step.read().complete);
        pace.take_last_reads()
    };
    assert_eq!(read(), Vec::<u32>::new(), "the first read, before any task");
    assert_eq!(read(), Vec::<u32>::new(), "no task seen yet");
    procs::tests::child(&proc_root, 40, 41);
    assert_eq!(read(), Vec::<u32>::new(), "its task runs");
    fs::write(proc_root.join("40/task/40/children"), "").expect("children");
    assert_eq!(read(), vec![40], "its task is gone");
    assert_eq!(read(), Vec::<u32>::new(), "said once");
}

/// From 25.05 an extern step runs no task: its last read is its main thread's once its
/// job's other steps, seen before, are gone; not its first reads before they began, not a
/// read from another thread (sstat's, the periodic polls) between or after them.
#[test]
fn an_extern_step_left_alone_by_its_jobs_steps_says_its_main_threads_read_is_its_last() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = tmp.path().join("proc");
    let path = tmp.path().join("energy-ledger.0.json");
    let (pace, _bell) = answered_ledger(&path);
    procs::tests::process(&proc_root, 50, "slurmstepd: [7.extern]", "0::/");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 50, true);
    let mut read = |thread: &str, tid: u32| {
        procs::tests::name_calling_thread(thread);
        procs::tests::write_calling_tid(&proc_root, tid);
        assert!(step.read().complete);
        pace.take_last_reads()
    };
    let none = Vec::<u32>::new();
    assert_eq!(read("slurmstepd", 50), none, "the first read");
    assert_eq!(
        read("slurmstepd", 50),
        none,
        "its job's steps have not begun"
    );
    let batch = tmp.path().join("n1_7.4294967291");
    let _listening = std::os::unix::net::UnixListener::bind(&batch).expect("socket");
    let _other_job =
        std::os::unix::net::UnixListener::bind(tmp.path().join("n1_8.0")).expect("socket");
    assert_eq!(
        read("acctg", 51),
        none,
        "a periodic poll while the batch step runs"
    );
    assert_eq!(
        read("slurmstepd", 50),
        none,
        "its main thread while the batch step runs"
    );
    fs::remove_file(&batch).expect("the batch step ends");
    assert_eq!(
        read("slurmstepd", 52),
        none,
        "sstat's read, from another thread"
    );
    assert_eq!(read("acctg", 51), none, "a periodic poll");
    assert_eq!(
        read("slurmstepd", 50),
        vec![50],
        "its main thread, left alone"
    );
    assert_eq!(read("slurmstepd", 50), none, "said once");
}

/// slurmd samples for a step's ring after the step's call, and may write that sample a
/// while later (a loaded node): the step's figure is the sample's, not brought forward by
/// that while at the power the ledger published, a window's that here reaches back before
/// the power fell (19 J too many in a 400 J step, as 0.1 s at 190 W).
#[test]
fn a_sample_taken_for_a_steps_ring_is_not_brought_forward() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let epoch = unix_now() - 100.0;
    publish(&path, epoch, unix_now() - 0.5, 900.0, 0.0);
    let answers = Arc::new(AtomicU32::new(0));
    let answered = Arc::clone(&answers);
    let ledger = path.clone();
    let _bell = doorbell::Doorbell::open(
        &doorbell::doorbell_path(&path),
        Arc::default(),
        Arc::default(),
        move || {
            let sampled = unix_now();
            std::thread::sleep(Duration::from_millis(100));
            let (joules, watts) = match answered.fetch_add(1, Ordering::SeqCst) {
                0 => (1000.0, 0.0),
                _ => (1400.0, 190.0),
            };
            let new = ledger.with_extension("new");
            publish(&new, epoch, sampled, joules, watts);
            fs::rename(&new, &ledger).expect("ledger");
        },
    )
    .expect("doorbell");
    as_before(&path);
    // no tasks: each read is at the step's edge and rings
    let mut step = StepFigure::from_path(&path, &Procs::from_path(tmp.path()), 1, false);
    let mut read = || {
        // a ledger written just before would need no ring
        std::thread::sleep(Duration::from_millis(30));
        step.read()
    };
    assert_eq!(read().energy_uj, 0, "the first read");
    let last = read();
    assert_eq!(answers.load(Ordering::SeqCst), 2);
    assert_eq!(last.energy_uj, 400_000_000);
}

/// `sstat` on a running step is an RPC slurmd forwards to the slurmstepd, holding one of
/// its threads until the answer: with plugins stacked (a figure not brought forward, so
/// such a read asks for a fresh ledger) or a late ledger, the read still never waits for
/// slurmd, even one that never answers; the ring reaches slurmd all the same.
#[test]
fn an_sstat_read_never_waits_for_slurmd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = tmp.path().join("proc");
    let path = tmp.path().join("energy-ledger.0.json");
    let now = unix_now();
    publish(&path, now - 100.0, now, 1000.0, 200.0);
    let rings = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&rings);
    // a starved slurmd: it hears the rings and publishes nothing
    let _bell = doorbell::Doorbell::open(
        &doorbell::doorbell_path(&path),
        Arc::default(),
        Arc::default(),
        move || {
            counted.fetch_add(1, Ordering::SeqCst);
        },
    )
    .expect("doorbell");
    as_before(&path);
    procs::tests::process(&proc_root, 40, "slurmstepd: [5.0]", "0::/");
    procs::tests::child(&proc_root, 40, 41);
    for stacked in [true, false] {
        let step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false);
        let mut step = if stacked { step.stacked() } else { step };
        procs::tests::name_calling_thread("acctg");
        assert!(step.read().complete);
        // the ledger older than a figure is brought forward: late, in both cases
        make_late(&path);
        let before = rings.load(Ordering::SeqCst);
        procs::tests::name_calling_thread("slurmstepd");
        let t0 = Instant::now();
        assert!(step.read().complete);
        let took = t0.elapsed();
        // a wait would last ANSWER_WAIT; well under it leaves room for a loaded machine
        assert!(
            took < doorbell::ANSWER_WAIT / 4,
            "stacked {stacked}: sstat's read took {took:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(1);
        while rings.load(Ordering::SeqCst) == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            rings.load(Ordering::SeqCst),
            before + 1,
            "stacked {stacked}"
        );
    }
}

/// After `scontrol reconfigure` to `node`, a new step's slurmstepd reads `node` while
/// slurmd still splits the node among its jobs (a slurmd that could not apply it, or of
/// another version: a step never decides how to read from its own file):
/// the step takes its share, as the ledger's slurmd splits, not the node's energy (which
/// would charge each job the whole node).
#[test]
fn a_step_reads_its_figure_as_slurmd_splits_whatever_its_own_file_says() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("ledger.json");
    let now = unix_now();
    let publish = |node_j, share_j| publish_split(&path, now, "shared", node_j, share_j, 25.0);
    let configured_node = false;
    let mut step =
        StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, configured_node).stacked();
    publish(3_000.0, 100.0);
    assert_eq!(step.read().energy_uj, 100_000_000);
    publish(3_500.0, 225.0);
    assert_eq!(
        step.read().energy_uj,
        225_000_000,
        "its share, not the node's 500 J since it began"
    );
    assert!(step.describe().contains("share"), "{}", step.describe());
}

/// A step begun in `node` mode reads on when slurmd, reconfigured, splits the node: its
/// figure at the switch is its own account in the ledger, which slurmd kept as the node's
/// energy since the step began up to the switch, and its share is added from then on, never
/// the node's whole energy for the rest of its life. Reads are as sparse as Slurm's polls:
/// none between the step's first and the switch.
#[test]
fn a_step_begun_in_node_mode_takes_its_share_once_slurmd_splits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("ledger.json");
    let now = unix_now();
    let publish = |split, node_j, step_j| publish_split(&path, now, split, node_j, step_j, 50.0);
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false).stacked();
    publish("node", 3_000.0, 0.0);
    assert_eq!(step.read().energy_uj, 0);
    // unread: 200 J as the node's, then slurmd is reconfigured and splits: 50 J of share
    publish("node", 3_200.0, 200.0);
    publish("shared", 3_300.0, 250.0);
    assert_eq!(step.read().energy_uj, 250_000_000);
    publish("shared", 3_500.0, 350.0);
    assert_eq!(
        step.read().energy_uj,
        350_000_000,
        "its account: not the node's 500 J since it began"
    );
}

/// A step whose slurmd answers questions takes its figure from the answer: its own step's
/// share, with no ledger file on disk at all (never parsed, never waited for).
#[test]
fn a_step_takes_its_figure_from_slurmds_answer_without_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("energy-ledger.0.json");
    let now = unix_now();
    publish_split(&path, now, "shared", 5_000.0, 300.0, 30.0);
    let ledger = Ledger::load(&path).expect("ledger").expect("a ledger");
    fs::remove_file(&path).expect("no file");
    let _bell = answering(&path, ledger);
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true).stacked();
    let first = step.read();
    assert!(first.complete, "answered");
    assert_eq!(first.energy_uj, 300_000_000, "its own step's share");
    assert_eq!(first.watts, Some(30.0));
    assert!(!path.exists());
}

/// A slurmd whose doorbell answers every question about the ledger at `path` from
/// `ledger`, as of a sample it takes when asked.
fn answering(path: &Path, ledger: Ledger) -> doorbell::Doorbell {
    let book: Arc<ask::Book> = Arc::default();
    let booked = Arc::clone(&book);
    doorbell::Doorbell::open(
        &doorbell::doorbell_path(path),
        Arc::default(),
        book,
        move || booked.update(&ledger, Instant::now()),
    )
    .expect("doorbell")
}

/// A slurmd that listens but does not answer (starved): the step's first read waits no
/// longer than it did for the file before the questions ([`ANSWER_WAIT`]), then takes its
/// figure from the file as it is, and says so.
#[test]
fn a_step_slurmd_does_not_answer_reads_the_file_within_the_wait() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("energy-ledger.0.json");
    let now = unix_now();
    publish_split(&path, now, "shared", 5_000.0, 300.0, 30.0);
    let _bell = doorbell::Doorbell::open(
        &doorbell::doorbell_path(&path),
        Arc::default(),
        Arc::default(),
        || {},
    )
    .expect("doorbell");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true).stacked();
    let t0 = Instant::now();
    let first = step.read();
    let took = t0.elapsed();
    assert!(took >= ANSWER_WAIT && took < ANSWER_WAIT * 2, "{took:?}");
    assert!(first.complete);
    assert_eq!(first.energy_uj, 300_000_000);
}

/// Slurm's periodic polls read the step's slot, which slurmd wrote at its last update,
/// without asking slurmd: its answer on the socket (kept from the update before) is not
/// what the step counts. The step's first read, an edge, asks; and once the slots file is
/// stale (slurmd stopped updating it) the step asks again.
#[test]
fn a_periodic_poll_reads_its_slot_without_asking_slurmd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    let path = tmp.path().join("energy-ledger.0.json");
    let now = unix_now();
    publish_split(&path, now, "shared", 5_000.0, 300.0, 30.0);
    let asked = Ledger::load(&path).expect("ledger").expect("a ledger");
    let _bell = answering(&path, asked);
    // slurmd's next update, in the slots alone
    publish_split(&path, now, "shared", 5_100.0, 340.0, 40.0);
    let slotted = Ledger::load(&path).expect("ledger").expect("a ledger");
    fs::remove_file(&path).expect("no file");
    let mut table = slots::Table::new(&path);
    table.write(&slotted).expect("slots");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true).stacked();
    let first = step.read();
    assert_eq!(first.energy_uj, 300_000_000, "its first read asks slurmd");
    procs::tests::name_calling_thread("acctg");
    let polled = step.read();
    assert_eq!(
        polled.energy_uj, 340_000_000,
        "a periodic poll reads its slot"
    );
    assert_eq!(polled.watts, Some(40.0));
    // a stale slot (slurmd stopped writing it) is not taken: the step asks slurmd
    let slots_of = |joules: f64, sampled_at: f64| {
        publish_split(&path, now, "shared", 5_200.0, joules, 40.0);
        let mut text: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).expect("ledger")).expect("json");
        text["sampled_at"] = serde_json::json!(sampled_at);
        fs::write(&path, text.to_string()).expect("ledger");
        let ledger = Ledger::load(&path).expect("ledger").expect("a ledger");
        fs::remove_file(&path).expect("no file");
        ledger
    };
    table.write(&slots_of(380.0, now - 600.0)).expect("slots");
    assert_eq!(
        step.read().energy_uj,
        340_000_000,
        "nothing counted from it"
    );
    // slurmd writes them again: the next poll reads its slot
    table.write(&slots_of(400.0, unix_now())).expect("slots");
    assert_eq!(step.read().energy_uj, 400_000_000, "read again");
}

/// The cost of a slurmstepd's read at one of Slurm's periodic polls (its step's slot read,
/// the calling thread's name, the figure counted), its tasks running, in a temp dir's
/// /proc and spool: `cargo test --release -p slurm-energy-logic --lib step_poll_cost --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn step_poll_cost() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proc_root = batch_stepd(tmp.path());
    procs::tests::child(&proc_root, 40, 41);
    let path = tmp.path().join("energy-ledger.0.json");
    let now = unix_now();
    publish_split(&path, now, "shared", 5_000.0, 300.0, 30.0);
    let ledger = Ledger::load(&path).expect("ledger").expect("a ledger");
    let mut table = slots::Table::new(&path);
    table.write(&ledger).expect("slots");
    let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true);
    assert!(step.read().complete, "its first read, from the file");
    // from here its slot alone can answer
    fs::remove_file(&path).expect("no file");
    procs::tests::name_calling_thread("acctg");
    const ROUNDS: u32 = 20_000;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        assert!(step.read().watts == Some(30.0));
    }
    let ns = started.elapsed().as_secs_f64() * 1e9 / f64::from(ROUNDS);
    println!("a step's periodic poll: {ns:.0} ns");
}
