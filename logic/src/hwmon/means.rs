//! When a meter's mean was taken. An ACPI power meter publishes `power1_average`, the mean
//! over each averaging interval, at the interval's end, and says nothing of when: a read
//! sees the latest mean, published at some moment since the read before. The means are
//! counted as the power from their publication to the next one's: each mean over exactly
//! one interval's length, so the energy is the meter's own sum of its intervals, a window
//! late (a job's figure is exact where its power is the same a window before its start and
//! its end as at them). What is not known is when each mean was published: dated by the
//! read that saw it, each change of power would be counted up to a read early or late. The
//! intervals tile the time, one every `window`: once a change has been seen, its date
//! (half-way between the read before it and the read that saw it) fixes the phase, and
//! every later change is dated at the end of the interval it closes. A change seen where
//! the phase puts no interval's end (the meter's clock drifted, the interval was changed)
//! is dated half-way again.

use std::time::{Duration, Instant};

use crate::source::Sample;

/// A change of power is a step: the old power up to its date, the new one from just after.
const STEP: Duration = Duration::from_micros(1);

/// The means read from one meter, and the phase of its intervals.
#[derive(Debug, Default)]
pub(super) struct Means {
    /// The last mean (µW) and when it was published, as far as known.
    shown: Option<(u64, Instant)>,
    last_read: Option<Instant>,
    /// The phase is known (a change was dated).
    locked: bool,
    /// A read failed since the last good one: the power between is not known.
    lost: bool,
}

fn sample(uw: u64, at: Instant) -> Sample {
    Sample {
        watts: uw as f64 / 1e6,
        at,
        energy_j: None,
    }
}

impl Means {
    /// A read failed: what the meter showed until the next good read is not known.
    pub(super) fn lost(&mut self) {
        self.lost = true;
    }

    /// The samples (powers at instants, to be integrated) a read of `uw` at `now` makes, of
    /// a meter whose intervals last `window`.
    pub(super) fn read(&mut self, uw: u64, now: Instant, window: Duration) -> Vec<Sample> {
        let last_read = self.last_read.replace(now);
        let lost = std::mem::take(&mut self.lost);
        let Some((shown, shown_at)) = self.shown else {
            self.shown = Some((uw, now));
            return vec![sample(uw, now)];
        };
        if uw == shown {
            return vec![sample(uw, now)];
        }
        // a new mean, published since the last read: at the interval's end the phase puts
        // there, else half-way
        let read_before = last_read.unwrap_or(shown_at).max(shown_at);
        let since = now.saturating_duration_since(shown_at).as_secs_f64();
        let ended = (since / window.as_secs_f64()).floor() as u32;
        let lattice = (ended >= 1)
            .then(|| shown_at + window * ended)
            .filter(|at| self.locked && *at > read_before);
        let at =
            lattice.unwrap_or_else(|| read_before + now.saturating_duration_since(read_before) / 2);
        self.locked = true;
        self.shown = Some((uw, at));
        // across reads that failed, or intervals no read saw (a stalled poller), the power
        // between is not known: the new mean at its date, the gap bridged from the last
        // reading as every gap of the family is (the trapezoid), not held at the old mean
        let new = (at + STEP).min(now).max(at);
        if lost || new == at || now.saturating_duration_since(read_before) > window {
            return vec![sample(uw, at)];
        }
        vec![sample(shown, at), sample(uw, new)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A meter of 1 s intervals ending at 0.35 s past each second, read every 0.1 s: the
    /// first change dated half-way between its reads, every later one at its interval's
    /// end; each mean is the power until the next.
    #[test]
    fn changes_are_dated_at_their_intervals_ends_once_one_is_seen() {
        let t0 = Instant::now();
        let ms = |ms: u64| t0 + Duration::from_millis(ms);
        let w = Duration::from_secs(1);
        // 300 W until the interval ending at 2.35 s, 450 W for the next, 500 W after
        let mean = |t: u64| match t {
            ..2350 => 300_000_000,
            2350..3350 => 450_000_000,
            _ => 500_000_000,
        };
        let mut m = Means::default();
        let mut changes = Vec::new();
        for t in (0..5000).step_by(100) {
            let s = m.read(mean(t), ms(t), w);
            if s.len() == 2 {
                changes.extend(
                    s.iter()
                        .map(|s| (s.at.duration_since(t0).as_micros(), s.watts)),
                );
            }
        }
        assert_eq!(
            changes,
            [
                (2_350_000, 300.0),
                (2_350_001, 450.0),
                (3_350_000, 450.0),
                (3_350_001, 500.0)
            ]
        );
    }

    /// A change where the phase puts no interval's end is dated half-way again; a read that
    /// sees the same mean is the power at that read.
    #[test]
    fn a_drifted_interval_is_dated_again() {
        let t0 = Instant::now();
        let ms = |ms: u64| t0 + Duration::from_millis(ms);
        let w = Duration::from_secs(1);
        let mut m = Means::default();
        let at = |s: Vec<Sample>| -> Vec<u128> {
            s.iter()
                .map(|s| s.at.duration_since(t0).as_millis())
                .collect()
        };
        assert_eq!(at(m.read(100, ms(0), w)), [0]);
        assert_eq!(at(m.read(200, ms(500), w)), [250, 250]);
        assert_eq!(at(m.read(200, ms(600), w)), [600]);
        // the phase puts an interval's end at 1.25 s; the same mean read at 1.3 s, and the
        // change seen at 1.6 s: the meter drifted, dated half-way
        assert_eq!(at(m.read(200, ms(1300), w)), [1300]);
        assert_eq!(at(m.read(300, ms(1600), w)), [1450, 1450]);
        // then on the new phase
        assert_eq!(at(m.read(300, ms(2400), w)), [2400]);
        assert_eq!(at(m.read(400, ms(2500), w)), [2450, 2450]);
        // reads failed, then a new mean: at its interval's end, bridged from the last
        // reading (no step at the old mean)
        m.lost();
        assert_eq!(at(m.read(500, ms(4500), w)), [4450]);
        // a stalled poller: the same
        assert_eq!(at(m.read(600, ms(6500), w)), [6450]);
    }
}
