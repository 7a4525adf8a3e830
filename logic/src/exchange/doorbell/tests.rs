use super::*;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicU32;
use std::time::Instant;

#[test]
fn a_ring_is_answered_and_the_step_waits_for_the_ledger() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let bell = doorbell_path(&ledger);
    let rings = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&rings);
    let written = ledger.clone();
    let doorbell = Doorbell::open(&bell, Arc::default(), Arc::default(), move || {
        counted.fetch_add(1, Ordering::SeqCst);
        fs::write(&written, "{}").expect("ledger");
    })
    .expect("doorbell");
    // bound in a directory only slurmd's user can enter, from before the bind
    let door = bell.parent().expect("its directory");
    assert_eq!(door, tmp.path().join("energy-ledger.0.door"));
    let mode = fs::metadata(door).expect("directory").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    assert_eq!(rings.load(Ordering::SeqCst), 1);
    // written a moment ago: fresh, no ring
    assert!(freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    assert_eq!(rings.load(Ordering::SeqCst), 1);
    sleep(FRESH * 2);
    assert!(freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    assert_eq!(rings.load(Ordering::SeqCst), 2);
    let t0 = Instant::now();
    drop(doorbell);
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    assert!(!bell.exists(), "the socket is removed");
    // nobody listens: the step does not wait
    sleep(FRESH * 2);
    let t0 = Instant::now();
    assert!(!freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    // a wait would last ANSWER_WAIT; well under it leaves room for a loaded machine
    assert!(t0.elapsed() < ANSWER_WAIT / 4, "{:?}", t0.elapsed());
}

/// A last read rings even just after an update, and waits for the one that answers it;
/// slurmd learns whose it was, once; anything else heard is an ordinary ring.
#[test]
fn a_last_read_rings_and_says_whose() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let bell = doorbell_path(&ledger);
    let pace = Arc::new(Pace::default());
    let rings = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&rings);
    let written = ledger.clone();
    let _doorbell = Doorbell::open(&bell, Arc::clone(&pace), Arc::default(), move || {
        counted.fetch_add(1, Ordering::SeqCst);
        // as slurmd writes it: a new file in its place
        let new = written.with_extension("new");
        fs::write(&new, "{}").expect("ledger");
        fs::rename(&new, &written).expect("ledger");
    })
    .expect("doorbell");
    assert!(freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    assert_eq!(rings.load(Ordering::SeqCst), 1);
    assert_eq!(pace.take_last_reads(), Vec::<u32>::new());
    // the ledger was written a moment ago: a last read rings all the same, and is heard
    // (this process is slurmd's user, as the kernel's credentials on the ring say)
    assert!(freshen(&bell, &ledger, Ring::Last { stepd: 4242 }).is_fresh());
    assert_eq!(rings.load(Ordering::SeqCst), 2);
    assert_eq!(pace.take_last_reads(), vec![4242]);
    assert_eq!(pace.take_last_reads(), Vec::<u32>::new());
    for garbage in [
        &b"last"[..],
        b"last -1",
        b"last 99999999999",
        b"\xff\xfe",
        b"",
    ] {
        assert_eq!(Ring::decode(garbage), Ring::Fresh, "{garbage:?}");
    }
    let last = Ring::Last { stepd: u32::MAX };
    assert_eq!(Ring::decode(last.encode().as_bytes()), last);
}

/// Only slurmd's user, by the kernel's credentials on the datagram, is heard: root,
/// whose slurmstepds ring, in production; the tests' user where slurmd runs as it.
#[test]
fn a_ring_from_another_user_says_nothing() {
    let last = Ring::Last { stepd: 4242 };
    let said = last.encode();
    assert_eq!(Ring::heard(said.as_bytes(), Some(0), 0), Some(last));
    assert_eq!(Ring::heard(b"ring", Some(0), 0), Some(Ring::Fresh));
    assert_eq!(Ring::heard(said.as_bytes(), Some(1000), 1000), Some(last));
    for (sender, slurmd) in [
        (Some(1000), 0),
        (Some(65534), 0),
        (None, 0),
        (Some(0), 1000),
    ] {
        assert_eq!(Ring::heard(said.as_bytes(), sender, slurmd), None);
        assert_eq!(Ring::heard(b"ring", sender, slurmd), None);
    }
}

/// The doorbell's directory is slurmd's alone or the doorbell does not open: a link
/// planted in its place, or a directory others may enter, is refused before any bind.
#[test]
fn the_doorbell_listens_only_in_a_directory_of_its_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let bell = doorbell_path(&ledger);
    let door = bell.parent().expect("its directory").to_path_buf();
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).expect("dir");
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::symlink(&elsewhere, &door).expect("symlink");
    let why = Doorbell::open(&bell, Arc::default(), Arc::default(), || {})
        .err()
        .expect("a link refused");
    assert!(why.contains(", a link)"), "{why}");
    assert_eq!(fs::read_dir(&elsewhere).expect("dir").count(), 0);
    fs::remove_file(&door).expect("unlink");
    fs::create_dir(&door).expect("dir");
    fs::set_permissions(&door, fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(Doorbell::open(&bell, Arc::default(), Arc::default(), || {}).is_err());
    assert!(!bell.exists(), "nothing bound");
    fs::set_permissions(&door, fs::Permissions::from_mode(0o700)).expect("chmod");
    let _doorbell = Doorbell::open(&bell, Arc::default(), Arc::default(), || {}).expect("its own");
    assert!(bell.exists());
}

/// Samples every 100 ms, a step asking at each: the first [`RING_BURST`] asks are
/// answered at once, then one every 1 / [`RING_RATE`] s; without asks, an update every
/// interval.
#[test]
fn rings_are_answered_at_once_then_paced() {
    let pace = Pace::default();
    let t0 = Instant::now();
    let interval = Duration::from_millis(500);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert!(
        pace.take(at(0), at(0), interval),
        "the first sample updates"
    );
    let mut updates = vec![];
    for ms in (100..=3000).step_by(100) {
        let wait = pace.ask(at(ms));
        let taken = pace.take(at(ms), at(ms), interval);
        if !taken {
            assert!(!wait.is_zero(), "at {ms} ms");
        }
        if taken {
            updates.push(ms);
        }
    }
    // at once while the bucket lasts (8, refilled by 0.4 per 100 ms: 12 in a row),
    // then every 250 ms or more (the 500 ms interval answering too)
    let at_once: Vec<u64> = (1..=12).map(|k| k * 100).collect();
    assert_eq!(updates[..12], at_once[..]);
    for pair in updates[12..].windows(2) {
        assert!(pair[1] - pair[0] >= 200, "{updates:?}");
    }
    let most = RING_BURST + RING_RATE * 3.0 + 3.0 / 0.5 + 1.0;
    assert!(updates.len() as f64 <= most, "{updates:?}");
    // then nobody asks: an update every interval
    assert!(!pace.take(at(3200), at(3200), interval) || !pace.take(at(3300), at(3300), interval));
    assert!(pace.take(at(4000), at(4000), interval));
    // an empty bucket makes a ring wait at most a quarter of a second
    let (t1, pace) = (at(5000), Pace::default());
    for k in 0..20u32 {
        let now = t1 + Duration::from_micros(u64::from(k));
        pace.ask(now);
        pace.take(now, now, interval);
    }
    let wait = pace.ask(t1);
    assert!(
        !wait.is_zero() && wait <= Duration::from_millis(250),
        "{wait:?}"
    );
}

/// A step asks while a sample is under way (its reading taken before the ask): the
/// update that sample makes does not answer it, so the next sample is an update too,
/// at once rather than an interval later (two steps ending together: the second's
/// last read waited for the periodic update, past its wait, and was brought forward).
#[test]
fn an_ask_during_a_sample_is_answered_by_the_next() {
    let pace = Pace::default();
    let t0 = Instant::now();
    let interval = Duration::from_millis(500);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert!(pace.take(at(0), at(0), interval));
    // asked at 100 ms; the sample read at 90 ms and is taken at 110 ms
    assert!(pace.ask(at(100)).is_zero());
    assert!(
        pace.take(at(110), at(90), interval),
        "the ask makes it an update"
    );
    assert!(
        pace.take(at(112), at(111), interval),
        "its reading came before the ask: the next sample answers it"
    );
    assert!(!pace.take(at(114), at(113), interval), "answered: no more");
}

/// A source dated by its hardware (a node controller scanning every 100 ms): a step
/// asks 30 ms after a scan. The sample its ask wakes reads that scan again, taken
/// before the ask: the ask waits, the sampler is told to sample again soon, and the
/// samples of the same scan spend nothing of the bucket; the first reading of the next
/// scan answers it. An ask nobody waits for any longer keeps no one sampling.
#[test]
fn an_ask_waits_for_a_reading_taken_after_it_and_the_sampler_is_told() {
    let pace = Pace::default();
    let t0 = Instant::now();
    let interval = Duration::from_millis(500);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    assert!(pace.take(at(0), at(0), interval));
    assert!(!pace.awaits_newer_reading(at(1)), "nobody asked");
    // scans at 100 and 200 ms; the ask at 130 ms
    assert!(pace.ask(at(130)).is_zero());
    // the sample it wakes, at 131 ms, reads the scan of 100 ms: an update (it answers
    // the asks before that scan), not of this ask, which still waits
    assert!(pace.take(at(131), at(100), interval));
    assert!(pace.awaits_newer_reading(at(131)));
    // the samples at 151, 171 and 191 ms read the same scan: no update
    for ms in [151, 171, 191] {
        let updated = pace.take(at(ms), at(100), interval);
        assert!(!updated, "at {ms} ms: the same scan again is no update");
        assert!(pace.awaits_newer_reading(at(ms)), "at {ms} ms");
    }
    assert!(pace.lock().spent <= 1.0, "{:?}", pace.lock());
    // the scan of 200 ms, read at 211 ms: an update that answers
    assert!(pace.take(at(211), at(200), interval));
    assert!(!pace.awaits_newer_reading(at(212)));
    // an ask whose asker stopped waiting keeps no sampler busy
    pace.ask(at(300));
    assert!(pace.awaits_newer_reading(at(300) + ANSWER_WAIT / 2));
    assert!(!pace.awaits_newer_reading(at(300) + ANSWER_WAIT));
}

/// 1 000 rings in a burst (an `sstat` loop in every job) cause at most [`RING_BURST`] +
/// [`RING_RATE`] × T updates over T (and the periodic ones), and the last ring is
/// answered.
#[test]
fn a_burst_of_rings_makes_a_few_updates_a_second() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bell = doorbell_path(&tmp.path().join("energy-ledger.0.json"));
    let pace = Arc::new(Pace::default());
    let updates = Arc::new(Mutex::new(Vec::new()));
    let (taker, taken) = (Arc::clone(&pace), Arc::clone(&updates));
    // the sampler's part: a sample at each wake, an update when the pace allows
    let _doorbell = Doorbell::open(&bell, Arc::clone(&pace), Arc::default(), move || {
        let now = Instant::now();
        if taker.take(now, now, Duration::from_secs(1)) {
            taken.lock().expect("updates").push(now);
        }
    })
    .expect("doorbell");
    let t0 = Instant::now();
    let (mut rung, mut last_ring) = (0, t0);
    for k in 0..1000 {
        // the socket's queue holds a few hundred: a ring beyond is refused, as a step
        // that rings then does not wait
        let sent = Instant::now();
        if ring(&bell, Ring::Fresh) {
            rung += 1;
            last_ring = sent;
        }
        if k % 100 == 99 {
            sleep(Duration::from_millis(50));
        }
    }
    sleep(Duration::from_millis(600));
    let updates = updates.lock().expect("updates").clone();
    let last = *updates.last().expect("an update");
    assert!(last >= last_ring, "the last ring is answered");
    let span = last.duration_since(t0).as_secs_f64();
    let most = (RING_BURST + RING_RATE * span + span.ceil() + 1.0) as usize;
    assert!(
        updates.len() <= most,
        "{} updates for {rung} rings over {span:.3} s",
        updates.len()
    );
    println!(
        "{rung} rings over {:.3} s: {} updates",
        last_ring.duration_since(t0).as_secs_f64(),
        updates.len()
    );
}

#[test]
fn a_step_waits_no_longer_than_the_answer_wait() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let bell = doorbell_path(&ledger);
    // slurmd listens but never writes (hung)
    let _doorbell = Doorbell::open(&bell, Arc::default(), Arc::default(), || {}).expect("doorbell");
    let t0 = Instant::now();
    assert!(!freshen(&bell, &ledger, Ring::Fresh).is_fresh());
    let waited = t0.elapsed();
    assert!(
        waited >= ANSWER_WAIT && waited < ANSWER_WAIT * 3,
        "{waited:?}"
    );
}
