//! Exact accumulation of wrapping hardware energy counters.
//!
//! A RAPL counter is an N-bit register that wraps to zero. Between two reads the energy is
//! `(cur - prev) mod modulus` plus any whole wraps the reads missed. The meter reads often
//! enough that at most one wrap can occur; when a read comes after a longer gap (a stopped
//! process), the number of wraps is chosen so the implied power is closest to the last
//! measured power.
//!
//! Counters move in steps (the hardware updates about every millisecond; a stalled counter
//! catches up later), so two reads microseconds apart can see a large step. The energy of
//! an increment accrued after the last read that still saw the previous value, and before
//! this read: that window, not the time since the previous read, bounds what is plausible.
//!
//! A read further from the last good value than the maximum power allows is not a wrap: it
//! is a reset or a bogus read (torn, corrupted), and one read cannot tell which. It becomes
//! a suspect, nothing is counted for it, and the last good value stays the anchor; the
//! reads after it decide:
//! - one that continues the last good value (plausible from it; across a long gap, wraps
//!   chosen at the measured power) is counted from that value: the suspect was a bad read
//!   and is forgotten, so it costs nothing;
//! - one that advances plausibly from the suspect but not from the good value confirms a
//!   reset: counting goes on from the suspect, and the gap between the good value (since it
//!   was first read: a value read unchanged counted nothing since) and the suspect is
//!   estimated from the power measured from the suspect on (the power before may be
//!   meaningless: a stuck counter's, or nothing at all after a bogus first read);
//! - one that repeats the suspect decides nothing (a bogus constant, or a reset counter that
//!   has not moved yet), however long it stays;
//! - any other is a new suspect in its place.
//!
//! So a jump from a value that was never confirmed is never counted: not the jump back from
//! a bogus read, not a wrap implied by one. The one read that cannot be checked is the
//! first (a process's baseline): if it is bogus, the reads after it are suspects that
//! confirm each other, and the gap is estimated. A bogus value the true count could have
//! reached from the value read before it (less than the maximum power allows ahead of it;
//! for a baseline, that much behind the truth) is indistinguishable from a burst of power
//! and is counted as one.

use std::time::{Duration, Instant};

/// How long the hardware may have held the first value read before it was read (it
/// updates about every millisecond; generous).
const FIRST_VALUE_AGE: Duration = Duration::from_millis(100);
/// The measured power (for the wraps in a long gap, or a reset's gap) is taken over at
/// least this long, so steps between close reads do not make it jump.
const RATE_WINDOW: Duration = Duration::from_millis(500);

/// How one read advanced the counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Advance {
    /// First read: a baseline, no energy yet.
    Started,
    /// `units` of energy since the last good read (wraps included).
    Counted { units: u64 },
    /// The read is further from the last good value than the maximum power allows
    /// (`raw_delta` units on; `None`: outside the counter's range): a reset or a bogus
    /// read. Nothing is counted until a later read tells which.
    Suspect { raw_delta: Option<u64> },
    /// The read repeats the suspect: still undecided, nothing counted.
    Held,
    /// The read continues the last good value: the suspect reads before it were bogus and
    /// are forgotten; `units` counted from the good value.
    Recovered { units: u64 },
    /// The read advances from the suspect: the counter was reset. `units` counted since
    /// the suspect; the `gap` before it is estimated from the power measured from the
    /// suspect on, and added once that is measured (at once when the read is at least
    /// `RATE_WINDOW` after the suspect).
    Reset { gap: Duration, units: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    value: u64,
    /// The first read that saw `value`.
    first_at: Instant,
    /// The latest read that saw `value`.
    at: Instant,
    /// The energy in the next increment accrued after this instant: the last read that saw
    /// the value before `value`.
    since: Instant,
}

impl Seen {
    /// `value` read at `now`, one read after `self`.
    fn then(self, value: u64, now: Instant) -> Seen {
        if value == self.value {
            // unchanged: the increment still to come keeps accruing since `self.since`
            Seen { at: now, ..self }
        } else {
            Seen {
                value,
                first_at: now,
                at: now,
                since: self.at,
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct WrappingCounter {
    /// Values lie in `0..modulus`.
    modulus: u64,
    /// Units per second the domain can never exceed.
    max_units_per_sec: f64,
    /// The last value counted from.
    good: Option<Seen>,
    /// A read the last good value cannot have reached, not yet decided.
    suspect: Option<Seen>,
    /// Units per second, measured over at least `RATE_WINDOW`.
    rate: f64,
    /// Where the current rate measurement started: (when, total units then).
    rate_from: Option<(Instant, u64)>,
    /// A reset's gap, waiting for the power measured after it.
    unestimated_gap: Duration,
    total_units: u64,
}

impl WrappingCounter {
    pub fn new(modulus: u64, max_units_per_sec: f64) -> Self {
        Self {
            modulus,
            max_units_per_sec,
            good: None,
            suspect: None,
            rate: 0.0,
            rate_from: None,
            unestimated_gap: Duration::ZERO,
            total_units: 0,
        }
    }

    /// Units accumulated since the first read.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    pub fn advance(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(good) = self.good else {
            self.rate_from = Some((now, 0));
            self.good = Some(Seen {
                value: raw % self.modulus,
                first_at: now,
                at: now,
                since: now.checked_sub(FIRST_VALUE_AGE).unwrap_or(now),
            });
            return Advance::Started;
        };
        // the same suspect value read again, even once the good value could have reached
        // it, is no more credible than the first time
        if let Some(suspect) = &mut self.suspect
            && raw == suspect.value
        {
            suspect.at = now;
            return Advance::Held;
        }
        if let Some(units) = self.plausible_from(good, raw, now) {
            self.good = Some(good.then(raw, now));
            self.add(units, now);
            return match self.suspect.take() {
                Some(_) => Advance::Recovered { units },
                None => Advance::Counted { units },
            };
        }
        if let Some(suspect) = self.suspect
            && let Some(units) = self.plausible_from(suspect, raw, now)
        {
            return self.confirm_reset(good, suspect, raw, units, now);
        }
        // the previous read: the suspect's if there is one (a good read clears it)
        let previous = self.suspect.map_or(good.at, |s| s.at);
        self.suspect = Some(Seen {
            value: raw,
            first_at: now,
            at: now,
            since: previous,
        });
        Advance::Suspect {
            raw_delta: self.delta(good.value, raw),
        }
    }

    /// The hardware says its counter started again (a node controller's restart, told by
    /// its `startup` file) at an unknown moment since the last good read: counting goes on
    /// from `raw`, and the gap since that read is estimated as a reset's is, from the power
    /// measured from now on.
    pub fn restarted(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(good) = self.good else {
            return self.advance(raw, now);
        };
        let gap = now.saturating_duration_since(good.at);
        self.good = Some(Seen {
            value: raw % self.modulus,
            first_at: now,
            at: now,
            since: now,
        });
        self.suspect = None;
        self.unestimated_gap += gap;
        self.rate_from = Some((now, self.total_units));
        Advance::Reset { gap, units: 0 }
    }

    /// The units from `from` to `raw`, if the domain can have produced them by `now`.
    fn plausible_from(&self, from: Seen, raw: u64, now: Instant) -> Option<u64> {
        let delta = self.delta(from.value, raw)?;
        let window = now.saturating_duration_since(from.since).as_secs_f64();
        let max_units = self.max_units_per_sec * window;
        if delta as f64 > max_units {
            return None;
        }
        let wraps_possible = (max_units / self.modulus as f64).floor() as u64;
        if wraps_possible == 0 {
            return Some(delta);
        }
        let elapsed = now.saturating_duration_since(from.at).as_secs_f64();
        Some(self.with_likely_wraps(delta, elapsed, wraps_possible))
    }

    /// `raw - from` modulo the counter's range; `None` for a value out of range (never
    /// plausible).
    fn delta(&self, from: u64, raw: u64) -> Option<u64> {
        (raw < self.modulus)
            .then(|| raw.wrapping_sub(from).wrapping_add(self.modulus) % self.modulus)
    }

    fn confirm_reset(
        &mut self,
        good: Seen,
        suspect: Seen,
        raw: u64,
        units: u64,
        now: Instant,
    ) -> Advance {
        let gap = suspect.first_at.saturating_duration_since(good.first_at);
        self.good = Some(suspect.then(raw, now));
        self.suspect = None;
        self.unestimated_gap += gap;
        self.rate_from = Some((suspect.first_at, self.total_units));
        self.add(units, now);
        Advance::Reset { gap, units }
    }

    fn add(&mut self, units: u64, now: Instant) {
        self.total_units = self.total_units.saturating_add(units);
        let Some((from, total_then)) = self.rate_from else {
            return;
        };
        let secs = now.saturating_duration_since(from);
        if secs < RATE_WINDOW {
            return;
        }
        self.rate = (self.total_units - total_then) as f64 / secs.as_secs_f64();
        if !self.unestimated_gap.is_zero() {
            let estimate = (self.rate * self.unestimated_gap.as_secs_f64()).round() as u64;
            self.total_units = self.total_units.saturating_add(estimate);
            self.unestimated_gap = Duration::ZERO;
        }
        self.rate_from = Some((now, self.total_units));
    }

    /// After a gap long enough for several wraps, pick the wrap count whose energy is
    /// closest to what the measured power predicts.
    fn with_likely_wraps(&self, delta: u64, elapsed: f64, wraps_possible: u64) -> u64 {
        let expected = self.rate * elapsed;
        let wraps = ((expected - delta as f64) / self.modulus as f64)
            .round()
            .clamp(0.0, wraps_possible as f64) as u64;
        delta.saturating_add(wraps.saturating_mul(self.modulus))
    }
}

#[cfg(test)]
mod tests {
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
        let steps = drive(&mut c, t0, &[(4.0, 300), (5.0, M - 50), (6.0, 500)]);
        assert_eq!(steps[0], Advance::Counted { units: 200 });
        assert!(matches!(steps[1], Advance::Suspect { .. }), "{steps:?}");
        assert_eq!(steps[2], Advance::Recovered { units: 200 });
        assert_eq!(c.total_units(), 800);
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
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const M: u64 = 1 << 32;

    proptest! {
        /// A counter read every second at up to 300 of its 1000 units/s, across wraps,
        /// with runs of a bogus constant (behind the count, as a torn read) between true
        /// reads: the total is exactly the true energy.
        #[test]
        fn runs_of_a_bogus_constant_cost_nothing(
            // often close enough to the top to wrap during the run
            start in prop_oneof![M - 30_000..M, 0..M],
            reads in proptest::collection::vec((0u64..=300, any::<bool>(), 5_000..M / 2), 2..80),
        ) {
            let t0 = Instant::now();
            let mut c = WrappingCounter::new(M, 1000.0);
            let mut truth = start;
            let mut energy = 0;
            let mut bogus = None;
            c.advance(start, t0);
            let last = reads.len() - 1;
            for (k, &(units, is_bogus, behind)) in reads.iter().enumerate() {
                truth = (truth + units) % M;
                energy += units;
                // a run keeps one wrong value; the last read is true
                let raw = if is_bogus && k < last {
                    *bogus.get_or_insert((truth + M - behind) % M)
                } else {
                    bogus = None;
                    truth
                };
                c.advance(raw, t0 + Duration::from_secs(k as u64 + 1));
            }
            prop_assert_eq!(c.total_units(), energy);
        }
    }
}
