//! Exact accumulation of wrapping hardware energy counters.
//!
//! A RAPL counter is an N-bit register that wraps to zero. Between two reads the energy is
//! `(cur - prev) mod modulus` plus any whole wraps the reads missed. The meter reads often
//! enough that at most one wrap can occur; when a read comes after a longer gap (a stopped
//! process), the number of wraps is chosen so the implied power is closest to the last
//! measured power. A delta larger than the maximum power allows is not a wrap but a reset or
//! a bogus read: it is never counted as energy; the gap is estimated from the last power.

use std::time::Instant;

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

#[derive(Debug, Clone)]
pub struct WrappingCounter {
    /// Values lie in `0..modulus`.
    modulus: u64,
    /// Units per second the domain can never exceed.
    max_units_per_sec: f64,
    last: Option<(u64, Instant)>,
    /// Units per second over the last counted interval.
    last_rate: f64,
    total_units: u64,
}

impl WrappingCounter {
    pub fn new(modulus: u64, max_units_per_sec: f64) -> Self {
        Self {
            modulus,
            max_units_per_sec,
            last: None,
            last_rate: 0.0,
            total_units: 0,
        }
    }

    /// Units accumulated since the first read.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    pub fn advance(&mut self, raw: u64, now: Instant) -> Advance {
        let Some((prev, prev_at)) = self.last else {
            self.last = Some((raw % self.modulus, now));
            return Advance::Started;
        };
        let elapsed = now.saturating_duration_since(prev_at).as_secs_f64();
        self.last = Some((raw % self.modulus, now));
        let max_units = self.max_units_per_sec * elapsed;
        let delta = if raw >= self.modulus {
            u64::MAX // out of range: never a valid counter value
        } else {
            raw.wrapping_sub(prev).wrapping_add(self.modulus) % self.modulus
        };

        let counted = if (delta as f64) <= max_units {
            let wraps_possible = (max_units / self.modulus as f64).floor() as u64;
            if wraps_possible == 0 {
                delta
            } else {
                self.with_likely_wraps(delta, elapsed, wraps_possible)
            }
        } else {
            let estimated_units = (self.last_rate * elapsed).round() as u64;
            self.total_units = self.total_units.saturating_add(estimated_units);
            return Advance::Glitch {
                raw_delta: delta,
                estimated_units,
            };
        };
        if elapsed > 0.0 {
            self.last_rate = counted as f64 / elapsed;
        }
        self.total_units = self.total_units.saturating_add(counted);
        Advance::Counted { units: counted }
    }

    /// After a gap long enough for several wraps, pick the wrap count whose energy is
    /// closest to what the last measured power predicts.
    fn with_likely_wraps(&self, delta: u64, elapsed: f64, wraps_possible: u64) -> u64 {
        let expected = self.last_rate * elapsed;
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
        let modulus = 10_000;
        // the domain could do 100_000 units/s: a 1 s gap may hide up to 10 wraps
        let mut c = WrappingCounter::new(modulus, 100_000.0);
        c.advance(0, t0);
        // 0.01 s at 25_000 units/s
        assert_eq!(
            c.advance(250, at(t0, 0.01)),
            Advance::Counted { units: 250 }
        );
        // 1 s later at the same power: 25_000 units = 2 wraps + 5_000
        assert_eq!(
            c.advance(5_250, at(t0, 1.01)),
            Advance::Counted { units: 25_000 }
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
