//! Exact accumulation of wrapping hardware energy counters.
//!
//! A RAPL counter is an N-bit register that wraps to zero. Between two reads the energy is
//! `(cur - prev) mod modulus` plus any whole wraps the reads missed. The meter reads often
//! enough that at most one wrap can occur; when a read comes after a longer gap (a stopped
//! process), the number of wraps is chosen so the implied power is closest to the last
//! measured power. A delta larger than the maximum power allows is not a wrap but a reset or
//! a bogus read: it is never counted as energy; the gap is estimated from the last power.
//!
//! Counters move in steps (the hardware updates about every millisecond; a stalled counter
//! catches up later), so two reads microseconds apart can see a large step. The energy of
//! an increment accrued after the last read that still saw the previous value, and before
//! this read: that window, not the time since the previous read, bounds what is plausible.

use std::time::{Duration, Instant};

/// How long the hardware may have held the first value read before it was read (it
/// updates about every millisecond; generous).
const FIRST_VALUE_AGE: Duration = Duration::from_millis(100);
/// The measured power (for estimating a glitch's gap, or the wraps in a long gap) is taken
/// over at least this long, so steps between close reads do not make it jump.
const RATE_WINDOW: Duration = Duration::from_millis(500);

/// How one read advanced the counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Advance {
    /// First read: a baseline, no energy yet.
    Started,
    /// `units` of energy since the previous read (wraps included).
    Counted { units: u64 },
    /// The delta was impossible for the domain's maximum power; `estimated_units` were added
    /// instead, from the last measured power over the elapsed time.
    Glitch {
        raw_delta: u64,
        estimated_units: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Last {
    value: u64,
    at: Instant,
    /// The energy in the next increment accrued after this instant: the last read that saw
    /// the value before `value`.
    since: Instant,
}

#[derive(Debug, Clone)]
pub struct WrappingCounter {
    /// Values lie in `0..modulus`.
    modulus: u64,
    /// Units per second the domain can never exceed.
    max_units_per_sec: f64,
    last: Option<Last>,
    /// Units per second, measured over at least `RATE_WINDOW`.
    rate: f64,
    /// Where the current rate measurement started: (when, total units then).
    rate_from: Option<(Instant, u64)>,
    total_units: u64,
}

impl WrappingCounter {
    pub fn new(modulus: u64, max_units_per_sec: f64) -> Self {
        Self {
            modulus,
            max_units_per_sec,
            last: None,
            rate: 0.0,
            rate_from: None,
            total_units: 0,
        }
    }

    /// Units accumulated since the first read.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    pub fn advance(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(last) = self.last else {
            self.rate_from = Some((now, 0));
            self.last = Some(Last {
                value: raw % self.modulus,
                at: now,
                since: now.checked_sub(FIRST_VALUE_AGE).unwrap_or(now),
            });
            return Advance::Started;
        };
        if raw == last.value {
            // unchanged: the increment still to come keeps accruing since `last.since`
            self.last = Some(Last { at: now, ..last });
            return Advance::Counted { units: 0 };
        }
        self.last = Some(Last {
            value: raw % self.modulus,
            at: now,
            since: last.at,
        });
        let window = now.saturating_duration_since(last.since).as_secs_f64();
        let elapsed = now.saturating_duration_since(last.at).as_secs_f64();
        let max_units = self.max_units_per_sec * window;
        let delta = if raw >= self.modulus {
            u64::MAX // out of range: never a valid counter value
        } else {
            raw.wrapping_sub(last.value).wrapping_add(self.modulus) % self.modulus
        };

        let counted = if (delta as f64) <= max_units {
            let wraps_possible = (max_units / self.modulus as f64).floor() as u64;
            if wraps_possible == 0 {
                delta
            } else {
                self.with_likely_wraps(delta, elapsed, wraps_possible)
            }
        } else {
            return self.estimate_gap(delta, elapsed, now);
        };
        self.add(counted, now);
        Advance::Counted { units: counted }
    }

    /// The hardware says its counter started again (a node controller's restart) at an
    /// unknown moment since the last read: the energy since then is estimated from the
    /// last measured power, and counting goes on from `raw`.
    pub fn restarted(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(last) = self.last else {
            return self.advance(raw, now);
        };
        self.last = Some(Last {
            value: raw % self.modulus,
            at: now,
            since: last.at,
        });
        let elapsed = now.saturating_duration_since(last.at).as_secs_f64();
        self.estimate_gap(raw.wrapping_sub(last.value), elapsed, now)
    }

    fn estimate_gap(&mut self, raw_delta: u64, elapsed: f64, now: Instant) -> Advance {
        let estimated_units = (self.rate * elapsed).round() as u64;
        self.add(estimated_units, now);
        Advance::Glitch {
            raw_delta,
            estimated_units,
        }
    }

    fn add(&mut self, units: u64, now: Instant) {
        self.total_units = self.total_units.saturating_add(units);
        if let Some((from, total_then)) = self.rate_from {
            let secs = now.saturating_duration_since(from);
            if secs >= RATE_WINDOW {
                self.rate = (self.total_units - total_then) as f64 / secs.as_secs_f64();
                self.rate_from = Some((now, self.total_units));
            }
        }
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

    #[test]
    fn a_reset_is_not_a_wrap() {
        let t0 = Instant::now();
        // 1000 units/s at most; counter at 500_000 drops to 0: as a wrap that would be
        // 2^32 - 500_000 units in one second.
        let mut c = WrappingCounter::new(M, 1000.0);
        c.advance(499_000, t0);
        assert_eq!(
            c.advance(499_500, at(t0, 1.0)),
            Advance::Counted { units: 500 }
        );
        match c.advance(0, at(t0, 2.0)) {
            Advance::Glitch {
                estimated_units, ..
            } => assert_eq!(estimated_units, 500),
            other => panic!("reset taken for {other:?}"),
        }
        // counting resumes from the new value
        assert_eq!(c.advance(300, at(t0, 2.5)), Advance::Counted { units: 300 });
        assert_eq!(c.total_units(), 500 + 500 + 300);
    }

    #[test]
    fn a_restart_counts_the_gap_from_the_last_power_even_when_the_value_rose() {
        let t0 = Instant::now();
        let mut c = WrappingCounter::new(M, 1e6);
        c.advance(1000, t0);
        c.advance(1500, at(t0, 1.0)); // 500 units/s
        // restarted from zero and already past the old value: not counted as a rise
        assert_eq!(
            c.restarted(2000, at(t0, 2.0)),
            Advance::Glitch {
                raw_delta: 500,
                estimated_units: 500
            }
        );
        assert_eq!(
            c.advance(2100, at(t0, 2.2)),
            Advance::Counted { units: 100 }
        );
        assert_eq!(c.total_units(), 1100);
    }

    #[test]
    fn a_value_beyond_the_modulus_is_a_glitch() {
        let t0 = Instant::now();
        let mut c = WrappingCounter::new(1000, 1e6);
        c.advance(10, t0);
        assert!(matches!(
            c.advance(5000, at(t0, 1.0)),
            Advance::Glitch { .. }
        ));
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
