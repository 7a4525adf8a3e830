use super::*;
use crate::exchange::doorbell::{Doorbell, doorbell_path};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A ledger of two jobs (7 and 8), each with a batch step; job 8's figures are ten times
/// job 7's, so that any of them in an answer to job 7 shows.
fn two_jobs(sampled_at: f64) -> Ledger {
    let account =
        |joules: f64| serde_json::json!({"joules": joules, "watts": joules / 10.0, "since": 1.0});
    let text = serde_json::json!({
        "version": crate::ledger::VERSION, "epoch": 1_000_000u64, "sampled_at": sampled_at,
        "node": account(5_000.0), "parts": [{"label": "cpu", "joules": 4_000.0, "watts": 40.0}],
        "split": "shared",
        "jobs": [
            {"job": 7, "last_seen": sampled_at, "account": account(111.0),
             "steps": [{"step": StepId::BATCH.0, "last_seen": sampled_at, "account": account(111.0)}]},
            {"job": 8, "last_seen": sampled_at, "account": account(2_229.0),
             "steps": [{"step": StepId::BATCH.0, "last_seen": sampled_at, "account": account(2_229.0)}]},
        ],
    });
    Ledger::parse(text.to_string().as_bytes()).expect("a ledger")
}

fn batch(job: u32) -> Option<StepKey> {
    Some(StepKey {
        job,
        step: StepId::BATCH,
    })
}

#[test]
fn a_question_says_the_same_at_both_ends() {
    for want in [
        Want::Current,
        Want::Refresh,
        Want::Fresh,
        Want::Last { stepd: u32::MAX },
    ] {
        for step in [None, batch(7), batch(u32::MAX)] {
            let request = Request::new(step, want);
            assert_eq!(Request::decode(request.encode().as_bytes()), Some(request));
            // as a slurmstepd of the version before asks: read, and told apart
            let before = request.one_back().expect("a version before");
            assert_eq!(before.version, 2);
            assert!(before.encode().starts_with("ask "), "{}", before.encode());
            assert_eq!(Request::decode(before.encode().as_bytes()), Some(before));
            assert_eq!(before.one_back(), None, "version 1 took no questions");
        }
    }
    // rings of before, and garbage, are no questions
    for other in [
        &b"ring"[..],
        b"last 42",
        b"ask",
        b"ask 7.4294967291",
        b"ask 7 fresh",
        b"ask 7.x fresh",
        b"ask 7.1 last",
        b"ask 7.1 last -1",
        b"ask 7.1 fresh more",
        b"ask - stale",
        // versions outside the window: refused, never guessed at
        b"ask4 7.1 fresh",
        b"ask1 7.1 fresh",
        b"ask2 7.1 fresh",
        b"askx 7.1 fresh",
        b"ask3",
        b"\xff\xfe",
        b"",
    ] {
        assert_eq!(Request::decode(other), None, "{other:?}");
    }
    let answer = Answer::from_ledger(&two_jobs(10.0), batch(7));
    assert_eq!(Answer::decode(&answer.encode()), Some(answer));
    assert_eq!(Answer::decode(b"{\"epoch\": 1}"), None);
}

/// slurmd answers a question with the asking step's account and the node's, nothing of
/// another job: job 8's figures appear nowhere in the bytes sent for job 7, and a step the
/// ledger does not hold gets no account (not another's).
#[test]
fn a_question_is_answered_for_the_asking_step_only() {
    let ledger = two_jobs(10.0);
    let book = Book::default();
    book.update(&ledger, Instant::now());
    let answer = |step| {
        let (mine, theirs) = UnixStream::pair().expect("pair");
        let want = Want::Current;
        book.take(Request::new(step, want), theirs, Instant::now());
        let mut bytes = Vec::new();
        (&mine).read_to_end(&mut bytes).expect("answer");
        bytes
    };
    let seven = answer(batch(7));
    let text = String::from_utf8(seven.clone()).expect("text");
    assert!(!text.contains("2229") && !text.contains("222.9"), "{text}");
    let seven = Answer::decode(&seven).expect("an answer");
    assert_eq!(seven.step.map(|a| a.joules), Some(111.0));
    assert_eq!(seven.node.joules, 5_000.0);
    assert_eq!(seven.shares, Some(true));
    assert_eq!(seven.epoch, 1_000_000);
    let eight = Answer::decode(&answer(batch(8))).expect("an answer");
    assert_eq!(eight.step.map(|a| a.joules), Some(2_229.0));
    for other in [
        batch(9),
        Some(StepKey {
            job: 7,
            step: StepId(0),
        }),
        None,
    ] {
        let got = Answer::decode(&answer(other)).expect("an answer");
        assert_eq!(got.step, None, "{other:?}");
        assert_eq!(got.node.joules, 5_000.0);
    }
}

/// A question for a fresh figure waits for an update taken after it came: an update from
/// a reading taken before does not answer it. Before any update, a question that does not
/// wait is refused (closed unanswered), and the step reads the file.
#[test]
fn a_fresh_question_is_answered_by_the_next_update_only() {
    let book = Book::default();
    let (mine, theirs) = UnixStream::pair().expect("pair");
    let step = batch(7);
    book.take(Request::new(step, Want::Current), theirs, Instant::now());
    let mut bytes = Vec::new();
    (&mine).read_to_end(&mut bytes).expect("closed");
    assert!(bytes.is_empty(), "refused before the first update");

    let before = Instant::now();
    let (mine, theirs) = UnixStream::pair().expect("pair");
    let asked = Instant::now();
    book.take(Request::new(step, Want::Last { stepd: 40 }), theirs, asked);
    assert_eq!(book.waiting(), 1);
    book.update(&two_jobs(10.0), before);
    assert_eq!(book.waiting(), 1, "a reading taken before the question");
    book.update(&two_jobs(11.0), Instant::now());
    assert_eq!(book.waiting(), 0);
    let mut bytes = Vec::new();
    (&mine).read_to_end(&mut bytes).expect("answer");
    let answer = Answer::decode(&bytes).expect("an answer");
    assert_eq!(answer.sampled_at, 11.0);
    assert_eq!(answer.step.map(|a| a.joules), Some(111.0));
}

/// Through the doorbell as slurmd opens it: a question for the current figure is answered
/// from memory without a sample (and without a ledger file), a fresh one after the sample
/// its question asks for; a last one tells slurmd whose last read it was.
#[test]
fn a_step_asks_slurmd_and_is_answered_on_the_doorbell() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let (pace, book) = (
        Arc::new(crate::exchange::doorbell::Pace::default()),
        Arc::new(Book::default()),
    );
    let samples = Arc::new(AtomicU32::new(0));
    let (counted, booked) = (Arc::clone(&samples), Arc::clone(&book));
    let _bell = Doorbell::open(
        &doorbell_path(&ledger),
        Arc::clone(&pace),
        Arc::clone(&book),
        move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            booked.update(&two_jobs(20.0 + f64::from(n)), Instant::now());
        },
    )
    .expect("doorbell");
    book.update(&two_jobs(10.0), Instant::now());
    let socket = ask_path(&ledger);
    let wait = Duration::from_secs(2);
    let current = ask(&socket, Request::new(batch(7), Want::Current), wait).expect("answered");
    assert_eq!(current.sampled_at, 10.0);
    assert_eq!(current.step.map(|a| a.joules), Some(111.0));
    assert_eq!(
        samples.load(Ordering::SeqCst),
        0,
        "no sample for a current figure"
    );
    assert!(!ledger.exists(), "no file read or written");
    let fresh = ask(&socket, Request::new(batch(7), Want::Fresh), wait).expect("answered");
    assert_eq!(samples.load(Ordering::SeqCst), 1);
    assert_eq!(fresh.sampled_at, 20.0);
    let last = Request::new(batch(8), Want::Last { stepd: 4242 });
    let last = ask(&socket, last, wait).expect("answered");
    assert_eq!(last.step.map(|a| a.joules), Some(2_229.0));
    assert_eq!(pace.take_last_reads(), vec![4242]);
}

/// A slurmd that listens but never updates (starved, hung) keeps a fresh question no
/// longer than the step waits; a socket nobody listens on refuses at once.
#[test]
fn a_question_slurmd_does_not_answer_costs_the_wait_at_most() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("energy-ledger.0.json");
    let _bell = Doorbell::open(
        &doorbell_path(&ledger),
        Arc::default(),
        Arc::default(),
        || {},
    )
    .expect("doorbell");
    let socket = ask_path(&ledger);
    let wait = Duration::from_millis(200);
    let t0 = Instant::now();
    let fresh = Request::new(batch(7), Want::Fresh);
    assert_eq!(ask(&socket, fresh, wait), Err(Unanswered::TimedOut));
    let took = t0.elapsed();
    assert!(took >= wait && took < wait * 3, "{took:?}");
    // before its first update slurmd has nothing to answer at once: dropped, not waited
    let t0 = Instant::now();
    let current = Request::new(batch(7), Want::Current);
    assert_eq!(ask(&socket, current, wait), Err(Unanswered::Dropped));
    assert!(t0.elapsed() < wait, "{:?}", t0.elapsed());
    let t0 = Instant::now();
    let nobody = tmp.path().join("nobody");
    assert_eq!(ask(&nobody, current, wait), Err(Unanswered::Refused));
    assert!(t0.elapsed() < wait / 4, "{:?}", t0.elapsed());
}

/// Questions that wait are kept no longer than any asker waits: a slurmd whose meter
/// stopped updating does not pile up a connection per step's edge.
#[test]
fn a_waiting_question_is_dropped_once_nobody_waits_for_it() {
    let book = Book::default();
    let t0 = Instant::now();
    let fresh = Request::new(batch(7), Want::Fresh);
    let mut askers = Vec::new();
    for k in 0..3u64 {
        let (mine, theirs) = UnixStream::pair().expect("pair");
        askers.push(mine);
        book.take(fresh, theirs, t0 + Duration::from_millis(k * 100));
    }
    assert_eq!(book.waiting(), 3);
    let (_mine, theirs) = UnixStream::pair().expect("pair");
    book.take(
        fresh,
        theirs,
        t0 + KEPT_WAITING + Duration::from_millis(150),
    );
    assert_eq!(book.waiting(), 2, "the two oldest are gone");
    let mut bytes = Vec::new();
    (&askers[0]).read_to_end(&mut bytes).expect("closed");
    assert!(bytes.is_empty(), "closed unanswered");
}
