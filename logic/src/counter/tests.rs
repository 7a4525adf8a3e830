use super::*;
use std::time::Duration;

const M: u64 = 1 << 32;

fn at(start: Instant, secs: f64) -> Instant {
    start + Duration::from_secs_f64(secs)
}

#[test]
fn counts_plain_and_wrapped_deltas_exactly() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1e9);
    assert_eq!(c.advance(M - 100, t0), Advance::Started);
    assert_eq!(
        c.advance(M - 40, at(t0, 1.0)),
        Advance::Counted { units: 60 }
    );
    // wraps through zero
    assert_eq!(c.advance(25, at(t0, 2.0)), Advance::Counted { units: 65 });
    assert_eq!(c.total_units(), 125);
}

/// Reads (seconds after `t0`, raw value) in order; what each did.
fn drive(c: &mut WrappingCounter, t0: Instant, reads: &[(f64, u64)]) -> Vec<Advance> {
    reads
        .iter()
        .map(|&(s, raw)| c.advance(raw, at(t0, s)))
        .collect()
}

#[test]
fn a_reset_is_not_a_wrap_and_is_confirmed_by_the_next_read() {
    let t0 = Instant::now();
    // 1000 units/s at most; counter at 500_000 drops to 0: as a wrap that would be
    // 2^32 - 500_000 units in one second.
    let mut c = WrappingCounter::new(M, 1000.0);
    let steps = drive(
        &mut c,
        t0,
        &[(0.0, 499_000), (1.0, 499_500), (2.0, 0), (2.5, 300)],
    );
    assert_eq!(steps[1], Advance::Counted { units: 500 });
    assert_eq!(
        steps[2],
        Advance::Suspect {
            raw_delta: Some(M - 499_500)
        }
    );
    // counting resumes from the new value; the 1 s gap is estimated at the 600 units/s
    // measured after it
    assert_eq!(
        steps[3],
        Advance::Reset {
            gap: Duration::from_secs(1),
            units: 300
        }
    );
    assert_eq!(c.total_units(), 500 + 300 + 600);
}

#[test]
fn a_restart_the_hardware_announces_counts_on_from_the_new_value() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    c.advance(10_000, t0);
    c.advance(10_200, at(t0, 1.0));
    // restarted 2 s after the last read, at 0, and already at 150: the gap is
    // estimated at the 300 units/s measured from then on
    assert_eq!(
        c.restarted(150, at(t0, 3.0)),
        Advance::Reset {
            gap: Duration::from_secs(2),
            units: 0
        }
    );
    assert_eq!(c.advance(450, at(t0, 4.0)), Advance::Counted { units: 300 });
    assert_eq!(c.total_units(), 200 + 300 + 600);
}

#[test]
fn a_reset_counter_that_has_not_moved_yet_is_held_then_confirmed() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    let steps = drive(
        &mut c,
        t0,
        &[(0.0, 50_000), (1.0, 50_400), (2.0, 0), (3.0, 0), (4.0, 400)],
    );
    assert!(matches!(steps[2], Advance::Suspect { .. }), "{steps:?}");
    assert_eq!(steps[3], Advance::Held);
    assert_eq!(
        steps[4],
        Advance::Reset {
            gap: Duration::from_secs(1),
            units: 400
        }
    );
    // 400 units in the 2 s since the reset was first read: the 1 s gap is 200
    assert_eq!(c.total_units(), 400 + 400 + 200);
}

/// The case measured on a cluster: a package counter reads one wrong value, a little
/// behind the truth, for 1.5 s; the jump back from it fits under the maximum power.
#[test]
fn a_bogus_constant_behind_the_truth_costs_nothing() {
    let t0 = Instant::now();
    // 225 units/s, at most 1000; reads every 0.5 s; the bogus value is 1000 units
    // behind the count at 10 s
    let truth = |s: f64| 7_000_000 + (225.0 * s).round() as u64;
    let bogus = truth(10.0) - 1000;
    let reads: Vec<(f64, u64)> = (0..=40)
        .map(|k| {
            let s = 0.5 * f64::from(k);
            let raw = if (10.0..11.5).contains(&s) {
                bogus
            } else {
                truth(s)
            };
            (s, raw)
        })
        .collect();
    let mut c = WrappingCounter::new(M, 1000.0);
    let steps = drive(&mut c, t0, &reads);
    assert!(matches!(steps[20], Advance::Suspect { .. }), "{steps:?}");
    assert_eq!(steps[21..23], [Advance::Held, Advance::Held]);
    assert_eq!(
        steps[23],
        Advance::Recovered {
            units: truth(11.5) - truth(9.5)
        }
    );
    assert_eq!(c.total_units(), truth(20.0) - truth(0.0));
}

#[test]
fn several_different_bogus_reads_in_a_row_cost_nothing() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    let steps = drive(
        &mut c,
        t0,
        &[
            (0.0, 1_000_000),
            (1.0, 1_000_200),
            (1.5, 3_000_000_000), // far ahead
            (2.0, 999_000),       // behind: a wrap if it were true
            (2.5, 999_000),
            (3.0, 0),
            (3.5, 1_000_700),
            (4.0, 1_000_800),
        ],
    );
    assert!(
        steps[2..6]
            .iter()
            .all(|s| matches!(s, Advance::Suspect { .. } | Advance::Held)),
        "{steps:?}"
    );
    assert_eq!(steps[6], Advance::Recovered { units: 500 });
    assert_eq!(c.total_units(), 800);
}

#[test]
fn a_bogus_value_the_good_one_could_reach_later_stays_suspect() {
    let t0 = Instant::now();
    // 1500 units ahead at 100 units/s: impossible at once, within 1000 units/s after
    // 1.5 s, yet still the same bogus value
    let mut c = WrappingCounter::new(M, 1000.0);
    let steps = drive(
        &mut c,
        t0,
        &[
            (0.0, 10_000),
            (1.0, 10_100),
            (1.1, 11_600),
            (2.0, 11_600),
            (3.0, 11_600),
            (3.5, 10_350),
        ],
    );
    assert!(matches!(steps[2], Advance::Suspect { .. }), "{steps:?}");
    assert_eq!(steps[3..5], [Advance::Held, Advance::Held]);
    assert_eq!(steps[5], Advance::Recovered { units: 250 });
    assert_eq!(c.total_units(), 350);
}

#[test]
fn a_bogus_read_at_a_wrap_is_never_a_wrap() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    // just below the top, a read a little behind (a full wrap if taken as true), then
    // the true count across zero
    let steps = drive(
        &mut c,
        t0,
        &[(0.0, M - 300), (1.0, M - 100), (2.0, M - 2000), (3.0, 100)],
    );
    assert!(matches!(steps[2], Advance::Suspect { .. }), "{steps:?}");
    assert_eq!(steps[3], Advance::Recovered { units: 200 });
    // just past zero, a read from before the wrap, then the true count
    let steps = drive(&mut c, t0, &[(4.0, 200), (5.0, M - 50), (6.0, 400)]);
    assert_eq!(steps[0], Advance::Counted { units: 100 });
    assert!(matches!(steps[1], Advance::Suspect { .. }), "{steps:?}");
    assert_eq!(steps[2], Advance::Recovered { units: 200 });
    assert_eq!(c.total_units(), 700);
}

#[test]
fn a_bogus_baseline_is_replaced_and_its_gap_estimated() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    // the first read is bogus (and read twice); the truth runs at 200 units/s
    let steps = drive(
        &mut c,
        t0,
        &[
            (0.0, 3_000_000_000),
            (0.5, 3_000_000_000),
            (1.0, 1000),
            (2.0, 1200),
            (3.0, 1400),
        ],
    );
    assert_eq!(steps[0], Advance::Started);
    assert_eq!(steps[1], Advance::Counted { units: 0 });
    assert!(matches!(steps[2], Advance::Suspect { .. }), "{steps:?}");
    // the gap runs from the first read of the bogus value (nothing counted since)
    assert_eq!(
        steps[3],
        Advance::Reset {
            gap: Duration::from_secs(1),
            units: 200
        }
    );
    assert_eq!(steps[4], Advance::Counted { units: 200 });
    // 3 s at 200 units/s, the first second estimated
    assert_eq!(c.total_units(), 600);
}

#[test]
fn a_value_beyond_the_modulus_is_suspect() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(1000, 1e6);
    c.advance(10, t0);
    assert!(matches!(
        c.advance(5000, at(t0, 1.0)),
        Advance::Suspect { .. }
    ));
    assert_eq!(c.advance(5000, at(t0, 2.0)), Advance::Held);
}

#[test]
fn several_wraps_during_a_long_gap_follow_the_last_power() {
    let t0 = Instant::now();
    let modulus = 100_000;
    // the domain could do 1_000_000 units/s: a 10 s gap may hide up to 100 wraps
    let mut c = WrappingCounter::new(modulus, 1_000_000.0);
    c.advance(0, t0);
    // 0.5 s at 25_000 units/s
    assert_eq!(
        c.advance(12_500, at(t0, 0.5)),
        Advance::Counted { units: 12_500 }
    );
    // 10 s later at the same power: 250_000 units = 2 wraps + 50_000
    assert_eq!(
        c.advance(62_500, at(t0, 10.5)),
        Advance::Counted { units: 250_000 }
    );
}

#[test]
fn steps_seen_by_reads_microseconds_apart_are_counted() {
    let t0 = Instant::now();
    // 1000 units/s at most; the counter steps by 10 units every 10 ms (1 W-ish)
    let mut c = WrappingCounter::new(M, 1000.0);
    c.advance(100, t0);
    // reads 1 µs apart straddle a step: the increment accrued since before t0
    assert_eq!(
        c.advance(100, at(t0, 0.009_999)),
        Advance::Counted { units: 0 }
    );
    assert_eq!(
        c.advance(110, at(t0, 0.010_000)),
        Advance::Counted { units: 10 }
    );
    assert_eq!(
        c.advance(110, at(t0, 0.019_999)),
        Advance::Counted { units: 0 }
    );
    assert_eq!(
        c.advance(120, at(t0, 0.020_001)),
        Advance::Counted { units: 10 }
    );
    assert_eq!(c.total_units(), 20);
}

#[test]
fn a_stalled_counter_catching_up_between_close_reads_is_counted() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1000.0);
    c.advance(0, t0);
    for k in 1..=60 {
        assert_eq!(
            c.advance(0, at(t0, 0.01 * k as f64)),
            Advance::Counted { units: 0 }
        );
    }
    // 0.6 s of energy appears at once, 2 µs after the previous read
    assert_eq!(
        c.advance(500, at(t0, 0.600_002)),
        Advance::Counted { units: 500 }
    );
}

#[test]
fn a_stuck_counter_adds_nothing_then_catches_up() {
    let t0 = Instant::now();
    let mut c = WrappingCounter::new(M, 1e6);
    c.advance(1000, t0);
    assert_eq!(c.advance(1000, at(t0, 1.0)), Advance::Counted { units: 0 });
    assert_eq!(c.advance(1000, at(t0, 2.0)), Advance::Counted { units: 0 });
    assert_eq!(
        c.advance(3000, at(t0, 3.0)),
        Advance::Counted { units: 2000 }
    );
    assert_eq!(c.total_units(), 2000);
}
