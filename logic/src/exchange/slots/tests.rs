use super::*;
use crate::ledger::Split;
use crate::ledger::tests::{idle, job, observation};
use std::time::{Instant, SystemTime};

/// A ledger of `jobs` jobs of three steps each (extern, batch, step 0), split as `split`,
/// over three samples, with two parts.
fn ledger_of(jobs: impl Iterator<Item = u32> + Clone, split: Split) -> Ledger {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    for secs in 0..3u64 {
        let usage = secs as f64;
        let observed = jobs
            .clone()
            .map(|j| {
                job(
                    j,
                    1,
                    usage,
                    &[
                        (StepId::EXTERN, 0.0),
                        (StepId::BATCH, usage),
                        (StepId(0), usage / 2.0),
                    ],
                )
            })
            .collect();
        let obs = crate::ledger::Observation {
            unowned_cpu_ns: 0,
            parts: vec![
                Part {
                    label: "package-0".into(),
                    joules: 100.0 * usage,
                    watts: Some(100.0),
                },
                Part {
                    label: "dram-0".into(),
                    joules: 10.0 * usage,
                    watts: None,
                },
            ],
            ..observation(t0, w0, secs, secs * 300, observed)
        };
        ledger.update(&obs, split);
    }
    ledger
}

fn keys(ledger: &Ledger) -> Vec<StepKey> {
    ledger
        .jobs()
        .flat_map(|j| {
            j.steps()
                .map(move |(step, _)| StepKey { job: j.id, step })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What slurmd answers on the socket, less the node's parts where the step reads its share.
fn answered(ledger: &Ledger, key: Option<StepKey>) -> Answer {
    let mut answer = Answer::from_ledger(ledger, key);
    if key.is_some() && answer.shares == Some(true) {
        answer.parts.clear();
    }
    answer
}

/// Every step of 40 jobs reads, in one `pread` of its slot, what slurmd's answer on the
/// socket gives it, in node and shared mode; the node's figures (parts included) while it
/// has no name; and a step the ledger does not hold is missing, never another's figure.
#[test]
fn a_step_reads_from_its_slot_what_slurmd_would_answer() {
    for split in [Split::Node, idle(50.0)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let ledger = ledger_of(1..=40, split);
        let mut table = Table::new(&path);
        table.write(&ledger).expect("written");
        let reader = Reader::open(&path).expect("opened");
        // twice the steps, a power of two; more where the seed put too many together
        assert!((256..=MAX_GROWTH * 256).contains(&reader.capacity));
        assert_eq!(reader.seed, table.seed);
        let keys = keys(&ledger);
        assert_eq!(keys.len(), 120);
        for key in keys {
            let read = reader.read(Some(key));
            assert_eq!(read, Slot::Found(answered(&ledger, Some(key))), "{key:?}");
            if let Slot::Found(a) = read {
                assert!(a.step.is_some_and(|s| s.since > 0.0), "{key:?}");
            }
        }
        let node = reader.read(None);
        assert_eq!(node, Slot::Found(answered(&ledger, None)));
        assert!(matches!(&node, Slot::Found(a) if a.parts.len() == 2));
        for job in [41, 0, u32::MAX] {
            let absent = StepKey {
                job,
                step: StepId(0),
            };
            assert_eq!(reader.read(Some(absent)), Slot::Missing);
        }
    }
}

/// `count` keys (step 0 of jobs from 1 up) whose home is slot 0 in a table of
/// `capacity` seeded with `seed`, found by search as a job's owner would who knew the seed.
fn keys_at_zero(count: usize, capacity: usize, seed: u64) -> Vec<u32> {
    (1..u32::MAX)
        .filter(|&j| {
            let key = StepKey {
                job: j,
                step: StepId(0),
            };
            home(key, capacity, seed) == 0
        })
        .take(count)
        .collect()
}

fn step_0(job: u32) -> StepKey {
    StepKey {
        job,
        step: StepId(0),
    }
}

/// Keys of one home slot: each finds its own slot among them, a key of the same home the
/// table does not hold finds none; more of them than a probe covers grow the table.
#[test]
fn keys_of_one_home_are_probed_and_each_reads_its_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let mut table = Table::new(&path);
    let at_zero = keys_at_zero(PROBES + 2, MIN_CAPACITY, table.seed);
    let held: Vec<StepKey> = at_zero[..PROBES - 1].iter().map(|&j| step_0(j)).collect();
    let places = place(&held, MIN_CAPACITY, table.seed);
    assert_eq!(places, (0..PROBES - 1).map(Some).collect::<Vec<_>>());
    let too_many: Vec<StepKey> = at_zero[..PROBES + 1].iter().map(|&j| step_0(j)).collect();
    assert_eq!(place(&too_many, MIN_CAPACITY, table.seed)[PROBES], None);

    let ledger = ledger_of(at_zero[..PROBES - 1].iter().copied(), idle(50.0));
    table.write(&ledger).expect("written");
    let reader = Reader::open(&path).expect("opened");
    for job in &at_zero[..PROBES - 1] {
        let own = ledger.step(*job, StepId(0));
        assert!(own.is_some());
        match reader.read(Some(step_0(*job))) {
            Slot::Found(a) => assert_eq!(a.step, own, "job {job}"),
            other => panic!("job {job}: {other:?}"),
        }
    }
    // a key of the same home the table does not hold: its probe meets the others' slots
    // and an empty one, and takes none of theirs
    assert_eq!(reader.read(Some(step_0(at_zero[PROBES]))), Slot::Missing);

    // more keys of one home than a probe covers: a larger table, each found
    let ledger = ledger_of(at_zero.iter().copied(), idle(50.0));
    table.write(&ledger).expect("written");
    let reader = Reader::open(&path).expect("opened");
    assert!(reader.capacity > MIN_CAPACITY);
    for job in &at_zero {
        match reader.read(Some(step_0(*job))) {
            Slot::Found(a) => assert_eq!(a.step, ledger.step(*job, StepId(0)), "job {job}"),
            other => panic!("job {job}: {other:?}"),
        }
    }
}

/// Keys a job's owner chose to collide (issue 53): without the seed they collide by
/// chance only; with it (as if it were known) the table grows no further than
/// [`MAX_GROWTH`] times what its steps need, and the keys left without a slot read
/// `Missing` (their steps ask slurmd), never another's figure. Before, the table doubled
/// until all fit: a file of GiB rewritten at each update, or an aborted allocation.
#[test]
fn colliding_keys_never_grow_the_table_past_its_bound() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let mut table = Table::new(&path);
    // 12 keys that share slot 0 up to a table of 2^18 slots: each doubling would leave
    // them together
    let big = 1 << 18;
    let chosen = keys_at_zero(12, big, table.seed);
    let ledger = ledger_of(chosen.iter().copied(), idle(50.0));
    let steps = keys(&ledger).len();
    table.write(&ledger).expect("written");
    let bytes = std::fs::metadata(slots_path(&path)).expect("file").len() as usize;
    let bound = MAX_GROWTH * capacity_for(steps);
    assert_eq!(
        bytes,
        HEADER + NODE_SIZE + (bound + PROBES - 1) * SLOT_SIZE,
        "grown to its bound, {bound} slots, no further"
    );
    let reader = Reader::open(&path).expect("opened");
    let all = keys(&ledger);
    let places = place(&all, reader.capacity, table.seed);
    let mut missing = 0;
    for (key, at) in all.iter().zip(places) {
        match (reader.read(Some(*key)), at) {
            (Slot::Found(a), Some(_)) => assert_eq!(a.step, ledger.step(key.job, key.step)),
            (Slot::Missing, None) => missing += 1,
            (read, at) => panic!("{key:?} at {at:?}: {read:?}"),
        }
    }
    // at most a probe's worth of the chosen keys found a slot
    assert!(missing >= 12 - PROBES, "{missing}");
    // the same keys under another slurmd's seed: spread by chance, all in a small table
    let other = tmp.path().join("energy-ledger.1.json");
    let mut fresh = Table::new(&other);
    assert_ne!(fresh.seed, table.seed);
    fresh.write(&ledger).expect("written");
    let reader = Reader::open(&other).expect("opened");
    assert!(reader.capacity <= bound, "{}", reader.capacity);
    for job in &chosen {
        assert!(
            matches!(reader.read(Some(step_0(*job))), Slot::Found(_)),
            "job {job}"
        );
    }
}

/// A record read while slurmd wrote it, its first bytes new and its last old, or new at
/// both ends around old bytes: never taken, whatever the key it shows.
#[test]
fn a_torn_record_is_never_taken() {
    let update = |joules| Update {
        epoch: 7,
        sampled_at: 1000.0 + joules,
        shares: Some(true),
        node: Account {
            joules,
            watts: 100.0,
            since: 1.0,
        },
    };
    let account = |joules| Account {
        joules,
        watts: 10.0,
        since: 2.0,
    };
    let key = StepKey {
        job: 5,
        step: StepId(1),
    };
    let (mut old, mut new) = ([0u8; SLOT_SIZE], [0u8; SLOT_SIZE]);
    encode_slot(&mut old, 1, key, update(10.0), account(1.0));
    encode_slot(&mut new, 2, key, update(20.0), account(2.0));
    assert_eq!(unframe(&old), Framed::Whole(1));
    assert_eq!(unframe(&new), Framed::Whole(2));
    assert_eq!(decode_slot(&new), (key, update(20.0), account(2.0)));
    assert_eq!(unframe(&[0u8; SLOT_SIZE]), Framed::Empty);
    for cut in [8, 40, 64, 100, SLOT_SIZE - 8] {
        let mut torn = old;
        torn[..cut].copy_from_slice(&new[..cut]);
        assert_eq!(unframe(&torn), Framed::Torn, "cut at {cut}");
    }
    // both ends of the new write around the old middle: the checksum tells
    let mut torn = old;
    torn[..8].copy_from_slice(&new[..8]);
    torn[SLOT_SIZE - 16..].copy_from_slice(&new[SLOT_SIZE - 16..]);
    assert_eq!(unframe(&torn), Framed::Torn);
    let mut torn = new;
    torn[56..64].copy_from_slice(&old[56..64]);
    assert_eq!(unframe(&torn), Framed::Torn);

    // in a file: the step's slot torn, its read says so after its tries
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let ledger = ledger_of(1..=3, idle(50.0));
    let mut table = Table::new(&path);
    table.write(&ledger).expect("written");
    let reader = Reader::open(&path).expect("opened");
    let key = StepKey {
        job: 2,
        step: StepId(0),
    };
    assert!(matches!(reader.read(Some(key)), Slot::Found(_)));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(slots_path(&path))
        .expect("open");
    // every slot of its probe (the seed decides which one is its own)
    let home = home(key, reader.capacity, reader.seed);
    for slot in home..home + PROBES {
        let at = SLOTS_AT + slot * SLOT_SIZE;
        file.write_all_at(&[0xff; 8], at as u64).expect("torn");
    }
    assert_eq!(reader.read(Some(key)), Slot::Torn);
}

/// The table grows past twice the steps and shrinks again: a reader of the old file reads
/// nothing from it (its length cut) and finds its slot in the new one, of a new
/// generation; the file is rewritten in place otherwise.
#[test]
fn the_table_grows_and_its_readers_open_the_new_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let generation = || {
        let bytes = std::fs::read(slots_path(&path)).expect("read");
        (u64_at(&bytes, 32), u32_at(&bytes, 16) as usize, bytes.len())
    };
    let mut table = Table::new(&path);
    table
        .write(&ledger_of(1..=3, Split::Node))
        .expect("written");
    assert_eq!(generation().0, 1);
    let key = StepKey {
        job: 3,
        step: StepId::BATCH,
    };
    let reader = Reader::open(&path).expect("opened");
    let small = ledger_of(1..=4, Split::Node);
    table.write(&small).expect("written");
    // in place: the same file, read by the same reader
    assert_eq!(generation().0, 1);
    assert_eq!(
        reader.read(Some(key)),
        Slot::Found(answered(&small, Some(key)))
    );

    let large = ledger_of(1..=200, Split::Node);
    table.write(&large).expect("written");
    let (grown, capacity, len) = generation();
    assert_eq!(grown, 2);
    assert!((2048..=MAX_GROWTH * 2048).contains(&capacity), "{capacity}");
    assert_eq!(len, SLOTS_AT + (capacity + PROBES - 1) * SLOT_SIZE);
    assert_eq!(reader.read(Some(key)), Slot::Gone);
    let reader = Reader::open(&path).expect("opened");
    assert_eq!(
        reader.read(Some(key)),
        Slot::Found(answered(&large, Some(key)))
    );

    table.write(&small).expect("written");
    assert_eq!(generation().0, 3);
    assert_eq!(reader.read(Some(key)), Slot::Gone);
    let reader = Reader::open(&path).expect("opened");
    assert_eq!(reader.capacity, MIN_CAPACITY);
    assert_eq!(
        reader.read(Some(key)),
        Slot::Found(answered(&small, Some(key)))
    );

    // a slurmd started again builds its own file: the table of the one before is cut
    let mut again = Table::new(&path);
    again.write(&small).expect("written");
    assert_eq!(reader.read(Some(key)), Slot::Gone);
}

/// A node whose parts do not fit the node's block: a step of node mode asks slurmd
/// rather than read the node without its parts.
#[test]
fn parts_that_do_not_fit_are_asked_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy-ledger.0.json");
    let mut ledger = ledger_of(1..=2, Split::Node);
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let obs = crate::ledger::Observation {
        unowned_cpu_ns: 0,
        parts: vec![Part {
            label: "x".repeat(MAX_LABEL + 1),
            joules: 1.0,
            watts: None,
        }],
        ..observation(t0, w0, 9, 9 * 300, vec![])
    };
    ledger.update(&obs, Split::Node);
    let mut table = Table::new(&path);
    table.write(&ledger).expect("written");
    let reader = Reader::open(&path).expect("opened");
    assert_eq!(reader.read(None), Slot::Missing);
}

/// A slots file is read only as slurmd's ledger is: never through a link, nor in a spool
/// directory others may write (where slurmd writes none either): the step asks slurmd.
#[test]
fn a_planted_or_linked_slots_file_is_never_read() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).expect("dir");
    let path = real.join("energy-ledger.0.json");
    Table::new(&path)
        .write(&ledger_of(1..=2, Split::Node))
        .expect("written");
    assert!(Reader::open(&path).is_some(), "slurmd's own");
    // a link at the slots' name, to a good file
    let linked = tmp.path().join("linked");
    std::fs::create_dir(&linked).expect("dir");
    let link_path = linked.join("energy-ledger.0.json");
    std::os::unix::fs::symlink(slots_path(&path), slots_path(&link_path)).expect("link");
    assert!(Reader::open(&link_path).is_none(), "read through a link");
    // a directory others may write: slurmd writes no slots there, and none is read
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).expect("dir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let planted = open.join("energy-ledger.0.json");
    assert!(
        Table::new(&planted)
            .write(&ledger_of(1..=2, Split::Node))
            .is_err()
    );
    std::fs::copy(slots_path(&path), slots_path(&planted)).expect("copy");
    assert!(
        Reader::open(&planted).is_none(),
        "read in a directory others write"
    );
}
