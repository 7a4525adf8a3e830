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
//! Counting goes from the last good value. One read cannot tell a bogus value (torn,
//! corrupted, a wrong constant held for a while) from a true one, so each read is judged
//! against it, and reads that do not fit wait for the reads after them:
//! - **plausible and ordinary** (reachable under the maximum power, and not a burst, below):
//!   counted at once. This is the normal path, exact across wraps, gaps and stalls.
//! - **plausible but a burst**: it implies, over its window, more than `BURST_FACTOR`
//!   times the measured power *and* more than `BURST_SHARE_OF_MAX` of the maximum. A
//!   bogus value just past a wrap, at the power bound or anywhere else the counter could
//!   have reached looks like this; so does a real jump in power. It is *tentative*: only
//!   what the measured power predicts since the good value was read is counted now (so a
//!   step whose last read this is keeps that, and misses only the power above it), and the
//!   good value stays the anchor. The next read that differs decides: one past the
//!   tentative value (from the good value, or beyond what the good value allows but on
//!   from the tentative one) confirms it and the rest is counted (a real burst, exact); one
//!   that continues the good value short of it is counted from the good value: the
//!   tentative value was bogus and costs nothing. What was counted ahead is paid back by
//!   the next counts, never counted twice.
//! - **behind the good value, but not behind the value read before it** (preferred to a
//!   wrap nearly the whole range on, unless that wrap is ordinary): one of the two is bogus,
//!   a counter never goes back. Nothing is counted and the good value stays the anchor;
//!   counting resumes when the counter passes it. If the good value was a bogus one a
//!   little ahead of the truth (not a burst, so counted), the truth catches up with it and
//!   the total is exact from then on: the excess was only counted early.
//! - **not reachable** (further than the maximum power allows: a reset or a bogus read): a
//!   suspect, nothing counted. A later read that continues the good value at an ordinary
//!   power is counted from it (the suspect was bogus and is forgotten); one that advances
//!   plausibly from the suspect, and from the good value not at all, or only as a burst or
//!   further from the measured power (a wrap the growing window now allows), confirms a
//!   reset: counting goes on from the suspect, and the gap between the good value (since it
//!   was first read: a value read unchanged counted nothing since) and the suspect is
//!   estimated from the power measured from the suspect on (the power before may be
//!   meaningless: a stuck counter's, or nothing at all after a bogus first read).
//!
//! A read that repeats the pending (tentative, behind or suspect) value decides nothing (a
//! bogus constant, or a reset counter that has not moved yet), however long it stays; any
//! other read is judged afresh and replaces it.
//!
//! Limits:
//! - a reset just after a read near the top of the range reads as a wrap, and is counted as
//!   the wrap (and burst) it looks like: at most what the maximum power allows over the
//!   read's window; one just after the count wrapped, landing between the last two values,
//!   reads as behind, and the energy up to the good value (since the wrap) is not counted;
//! - the first read (a process's baseline) cannot be checked: if it is bogus, the reads
//!   after it are suspects that confirm each other, and the gap is estimated;
//! - with no power measured yet (the first `RATE_WINDOW`, or a counter that has not
//!   moved) nothing is a burst;
//! - a bogus value ahead of the truth but not a burst is counted until the truth catches up
//!   with it (a few reads where the maximum is a real one, like RAPL's; many where it is a
//!   loose bound far above the power, like a node's or a GPU's): a job that ends before
//!   then keeps that excess.

use std::time::{Duration, Instant};

/// How long the hardware may have held the first value read before it was read (it
/// updates about every millisecond; generous).
const FIRST_VALUE_AGE: Duration = Duration::from_millis(100);
/// The measured power (for the wraps in a long gap, a reset's gap, or what is a burst) is
/// taken over at least this long, so steps between close reads do not make it jump.
const RATE_WINDOW: Duration = Duration::from_millis(500);
/// A read is a burst above this many times the measured power over its window. The window
/// runs from the read before the good value was first read, so it spans about two read
/// intervals and steady power fills about half of it: only a rise to more than three
/// times the measured power within one interval is held, while a bogus value at the power
/// bound is held as long as the measured power is below two thirds of the maximum.
const BURST_FACTOR: f64 = 1.5;
/// ... and above this share of the maximum power over its window. Power that rises fast but
/// stays below it, even sustained over the whole window, is counted at once, so the last
/// read of a step is exact for ordinary workloads; a bogus value closer than this to the
/// truth is only counted early, then caught up with.
const BURST_SHARE_OF_MAX: f64 = 1.0 / 3.0;

/// How one read advanced the counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Advance {
    /// First read: a baseline, no energy yet.
    Started,
    /// `units` of energy counted (wraps included) from the last good read, or from the
    /// tentative read this one confirms.
    Counted { units: u64 },
    /// The read is plausible but a burst: `units` (what the measured power predicts) are
    /// counted now, the rest once the next read goes on from it.
    Tentative { units: u64 },
    /// The read is `by` units behind the last good value but not behind the one before it:
    /// one of them is bogus; nothing is counted until the counter passes the good value.
    Behind { by: u64 },
    /// The read is further from the last good value than the maximum power allows
    /// (`raw_delta` units on; `None`: outside the counter's range): a reset or a bogus
    /// read. Nothing is counted until a later read tells which.
    Suspect { raw_delta: Option<u64> },
    /// The read repeats the pending one: still undecided, nothing counted.
    Held,
    /// The read continues the last good value: the pending reads before it were bogus (or
    /// the good value was, and the counter has passed it again) and are forgotten; `units`
    /// counted from the good value.
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
    /// The value read before `value` (`value` itself for a first read): the true count
    /// has passed it, so a read between it and `value` is no reset.
    before: u64,
    /// The first read that saw `value`.
    first_at: Instant,
    /// The latest read that saw `value`.
    at: Instant,
    /// The energy in the next increment accrued after this instant: the last read that saw
    /// the value before `value`.
    since: Instant,
}

impl Seen {
    /// The first read of a value; nothing known before it.
    fn first(value: u64, now: Instant, since: Instant) -> Seen {
        Seen {
            value,
            before: value,
            first_at: now,
            at: now,
            since,
        }
    }

    /// `value` read at `now`, after `self` (the read before it at `since`).
    fn next(self, value: u64, now: Instant, since: Instant) -> Seen {
        Seen {
            value,
            before: self.value,
            first_at: now,
            at: now,
            since,
        }
    }

    /// `value` read at `now`, one read after `self`.
    fn then(self, value: u64, now: Instant) -> Seen {
        if value == self.value {
            // unchanged: the increment still to come keeps accruing since `self.since`
            Seen { at: now, ..self }
        } else {
            self.next(value, now, self.at)
        }
    }
}

/// A read not counted (in full) yet, waiting for the reads after it.
#[derive(Debug, Clone, Copy)]
enum Pending {
    /// Plausible from the good value but a burst, `units` on from it.
    Tentative { seen: Seen, units: u64 },
    /// Behind the good value, not behind the value before it.
    Behind(Seen),
    /// Not reachable from the good value.
    Suspect(Seen),
}

impl Pending {
    fn seen(&mut self) -> &mut Seen {
        match self {
            Pending::Tentative { seen, .. } | Pending::Behind(seen) | Pending::Suspect(seen) => {
                seen
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
    /// A read after it, not decided yet.
    pending: Option<Pending>,
    /// Units counted beyond the good value (a tentative read's predicted share): the next
    /// counts pay them back first, so nothing is counted twice.
    counted_ahead: u64,
    /// Units per second, measured over at least `RATE_WINDOW`.
    rate: f64,
    /// Where the current rate measurement started: (when, total units then).
    rate_from: Option<(Instant, u64)>,
    /// A reset's gap, waiting for the power measured after it.
    unestimated_gap: Duration,
    /// Units of that gap already counted (a tentative read's share, counted ahead of the
    /// good value before the reset was known), taken off its estimate.
    gap_counted: u64,
    total_units: u64,
}

impl WrappingCounter {
    pub fn new(modulus: u64, max_units_per_sec: f64) -> Self {
        Self {
            modulus,
            max_units_per_sec,
            good: None,
            pending: None,
            counted_ahead: 0,
            rate: 0.0,
            rate_from: None,
            unestimated_gap: Duration::ZERO,
            gap_counted: 0,
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
            let since = now.checked_sub(FIRST_VALUE_AGE).unwrap_or(now);
            self.good = Some(Seen::first(raw % self.modulus, now, since));
            return Advance::Started;
        };
        // the same pending value read again, even once the good value could have reached
        // it, is no more credible than the first time
        if let Some(pending) = &mut self.pending
            && raw == pending.seen().value
        {
            pending.seen().at = now;
            return Advance::Held;
        }
        let previous = self.pending.as_mut().map_or(good.at, |p| p.seen().at);
        let from_good = self.plausible_from(good, raw, now);
        // on from the suspect, and from the good value only as a burst or further from the
        // measured power (a wrap, once the window is long enough to allow one): a reset
        if let Some(Pending::Suspect(suspect)) = self.pending
            && let Some(units) = self.plausible_from(suspect, raw, now)
            && from_good.is_none_or(|to_raw| {
                self.is_burst(good, to_raw, now)
                    || self.nearer_measured((suspect, units), (good, to_raw), now)
            })
        {
            return self.confirm_reset(good, suspect, raw, units, now);
        }
        // a little behind the good value, or nearly a whole range on from it: the step back
        // is the likely one unless the read could only be a wrap
        if let Some(by) = self.behind(good, raw)
            && from_good.is_none_or(|to_raw| by < to_raw && self.is_fast(good, to_raw, now))
        {
            self.pending = Some(Pending::Behind(good.next(raw, now, previous)));
            return Advance::Behind { by };
        }
        if let Some(units) = from_good {
            // a read past the tentative value, from the good one, confirms it: together
            // they may well be a burst
            let confirms = match self.pending {
                Some(Pending::Tentative { seen, units: to_it }) => {
                    to_it <= units && self.plausible_from(seen, raw, now).is_some()
                }
                _ => false,
            };
            if !confirms && self.is_burst(good, units, now) {
                return self.hold_tentative(good, raw, units, previous, now);
            }
            self.good = Some(good.then(raw, now));
            let counted = self.count(units, now);
            return match self.pending.take() {
                Some(_) if !confirms => Advance::Recovered { units: counted },
                _ => Advance::Counted { units: counted },
            };
        }
        // beyond what the good value allows, but on from the tentative one: power near the
        // maximum, sustained
        if let Some(Pending::Tentative { seen, units }) = self.pending
            && let Some(more) = self.plausible_from(seen, raw, now)
        {
            return self.confirm_tentative(seen, units, raw, more, now);
        }
        self.pending = Some(Pending::Suspect(good.next(raw, now, previous)));
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
        self.good = Some(Seen::first(raw % self.modulus, now, now));
        self.pending = None;
        self.unestimated_gap += gap;
        self.gap_counted += std::mem::take(&mut self.counted_ahead);
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

    /// Whether `units` on from `from` by `now` are a burst (see the module's doc). With no
    /// power measured there is nothing to compare with (a counter that has not moved yet, or
    /// stalled): never.
    fn is_burst(&self, from: Seen, units: u64, now: Instant) -> bool {
        let window = now.saturating_duration_since(from.since).as_secs_f64();
        self.rate > 0.0
            && units as f64 > BURST_FACTOR * self.rate * window
            && self.is_fast(from, units, now)
    }

    /// Whether `units` on from `from` by `now` are above `BURST_SHARE_OF_MAX` of the
    /// maximum power.
    fn is_fast(&self, from: Seen, units: u64, now: Instant) -> bool {
        let window = now.saturating_duration_since(from.since).as_secs_f64();
        units as f64 > BURST_SHARE_OF_MAX * self.max_units_per_sec * window
    }

    /// Whether the power `a` implies (units on from a value, since it was last read) is
    /// nearer the measured power than the power `b` implies.
    fn nearer_measured(&self, a: (Seen, u64), b: (Seen, u64), now: Instant) -> bool {
        let off = |(from, units): (Seen, u64)| {
            let secs = now.saturating_duration_since(from.at).as_secs_f64();
            (units as f64 / secs - self.rate).abs()
        };
        self.rate > 0.0 && off(a) < off(b)
    }

    /// How far `raw` is behind the good value, if it is not behind the value before it.
    fn behind(&self, good: Seen, raw: u64) -> Option<u64> {
        let past_before = self.delta(good.before, raw)?;
        let good_past_before = self.delta(good.before, good.value)?;
        (past_before < good_past_before).then(|| good_past_before - past_before)
    }

    /// `raw - from` modulo the counter's range; `None` for a value out of range (never
    /// plausible).
    fn delta(&self, from: u64, raw: u64) -> Option<u64> {
        (raw < self.modulus)
            .then(|| raw.wrapping_sub(from).wrapping_add(self.modulus) % self.modulus)
    }

    /// Holds `raw`, `units` on from the good value and a burst, until a later read decides.
    fn hold_tentative(
        &mut self,
        good: Seen,
        raw: u64,
        units: u64,
        previous: Instant,
        now: Instant,
    ) -> Advance {
        // what the measured power predicts since the good value was last read: counted now,
        // so that a step whose final read this is keeps it (a bogus value then costs only
        // the error of that prediction, and that only until the next read)
        let expected = self.rate * now.saturating_duration_since(good.at).as_secs_f64();
        let credit = units.min(expected.round() as u64);
        let counted = credit.saturating_sub(self.counted_ahead);
        self.counted_ahead = self.counted_ahead.max(credit);
        self.add(counted, now);
        self.pending = Some(Pending::Tentative {
            seen: good.next(raw, now, previous),
            units,
        });
        Advance::Tentative { units: counted }
    }

    /// `raw` goes on from the tentative read `tentative` (`to_it` units on from the good
    /// value) by `more` units: it was true.
    fn confirm_tentative(
        &mut self,
        tentative: Seen,
        to_it: u64,
        raw: u64,
        more: u64,
        now: Instant,
    ) -> Advance {
        self.pending = None;
        self.good = Some(tentative.then(raw, now));
        let counted = self.count(to_it.saturating_add(more), now);
        Advance::Counted { units: counted }
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
        self.pending = None;
        self.unestimated_gap += gap;
        // what was counted ahead of the good value lies in the gap: taken off its estimate,
        // so the power measured from the suspect on is not lowered by paying it back
        self.gap_counted += std::mem::take(&mut self.counted_ahead);
        self.rate_from = Some((suspect.first_at, self.total_units));
        self.add(units, now);
        Advance::Reset { gap, units }
    }

    /// Counts `units` on from the good value, less what was counted ahead of it.
    fn count(&mut self, units: u64, now: Instant) -> u64 {
        let counted = units.saturating_sub(self.counted_ahead);
        self.counted_ahead = self.counted_ahead.saturating_sub(units);
        self.add(counted, now);
        counted
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
            let uncounted = estimate.saturating_sub(std::mem::take(&mut self.gap_counted));
            self.total_units = self.total_units.saturating_add(uncounted);
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

/// Simulated counters with glitches at random phases, from fixed seeds (reproducible; each
/// failure names its seed).
#[cfg(test)]
mod simulated {
    use super::*;

    /// SplitMix64.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform in `lo..hi`.
        fn range(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A counter kind: its range, its unit and the maximum power its user gives it.
    struct Kind {
        name: &'static str,
        /// A bound far above the power simulated (GPUs', nodes'): a bogus value ahead of
        /// the truth by less than `BURST_SHARE_OF_MAX` of it is no burst, and is only paid
        /// back as the truth catches up with it, too slowly for a 40 s job.
        loose: bool,
        modulus: u64,
        joules_per_unit: f64,
        max_watts: f64,
    }

    const KINDS: [Kind; 5] = [
        Kind {
            name: "RAPL 32-bit, 2^-14 J",
            loose: false,
            modulus: 1 << 32,
            joules_per_unit: 1.0 / 16384.0,
            max_watts: 1000.0,
        },
        Kind {
            name: "RAPL 32-bit, 2^-20 J",
            loose: false,
            modulus: 1 << 32,
            joules_per_unit: 1.0 / 1048576.0,
            max_watts: 1000.0,
        },
        Kind {
            name: "64-bit, uJ, 1000 W bound",
            loose: false,
            modulus: 1 << 63,
            joules_per_unit: 1e-6,
            max_watts: 1000.0,
        },
        Kind {
            name: "GPU 64-bit, uJ",
            loose: true,
            modulus: 1 << 63,
            joules_per_unit: 1e-6,
            max_watts: 5000.0,
        },
        Kind {
            name: "pm_counters 64-bit, J",
            loose: true,
            modulus: 1 << 63,
            joules_per_unit: 1.0,
            max_watts: 50_000.0,
        },
    ];

    const JOB_SECS: f64 = 40.0;

    /// A 40 s job's reads: (seconds, true joules so far), 50-600 W (±10% per interval),
    /// every 0.1-1 s (±20%).
    fn job(rng: &mut Rng) -> Vec<(f64, f64)> {
        let watts = rng.range(50.0, 600.0);
        let period = rng.range(0.1, 1.0);
        let mut reads = vec![(0.0, 0.0)];
        let (mut t, mut joules) = (0.0, 0.0);
        while t < JOB_SECS {
            let dt = period * rng.range(0.8, 1.2);
            t += dt;
            joules += watts * rng.range(0.9, 1.1) * dt;
            reads.push((t, joules));
        }
        reads
    }

    /// The first read at or after `secs`.
    fn read_at(reads: &[(f64, f64)], secs: f64) -> usize {
        reads
            .iter()
            .position(|&(t, _)| t >= secs)
            .unwrap_or(reads.len() - 1)
    }

    /// The counter's total, in joules, after reading `raws` at `reads`' times.
    fn count(kind: &Kind, reads: &[(f64, f64)], raws: &[u64]) -> f64 {
        let t0 = Instant::now();
        let mut c = WrappingCounter::new(kind.modulus, kind.max_watts / kind.joules_per_unit);
        for (&(t, _), &raw) in reads.iter().zip(raws) {
            c.advance(raw, t0 + Duration::from_secs_f64(t));
        }
        c.total_units() as f64 * kind.joules_per_unit
    }

    /// The raw values of a counter starting at `start` units.
    fn raws(kind: &Kind, reads: &[(f64, f64)], start: u64) -> Vec<u64> {
        reads
            .iter()
            .map(|&(_, j)| {
                let units = (j / kind.joules_per_unit).floor() as u64;
                ((u128::from(start) + u128::from(units)) % u128::from(kind.modulus)) as u64
            })
            .collect()
    }

    /// A start that makes the true count wrap at `secs`.
    fn wrapping_at(kind: &Kind, reads: &[(f64, f64)], secs: f64) -> u64 {
        let joules = reads[read_at(reads, secs)].1;
        let units = (joules / kind.joules_per_unit).floor() as u64 % kind.modulus;
        // a little before the read that first sees the wrap
        (kind.modulus - units + 1) % kind.modulus
    }

    #[test]
    fn a_bogus_value_at_any_phase_held_for_up_to_three_reads_costs_at_most_a_thousandth() {
        let mut worst = (0.0_f64, String::new());
        for seed in 0..4000u64 {
            let mut rng = Rng(seed);
            let kind = &KINDS[(seed % 5) as usize];
            let reads = job(&mut rng);
            // most glitches fall on the first read after a wrap, the rest anywhere
            let at = rng.range(2.0, 28.0);
            let start = if rng.below(4) == 0 {
                rng.next() % kind.modulus
            } else {
                wrapping_at(kind, &reads, at)
            };
            let mut raw = raws(kind, &reads, start);
            let i = read_at(&reads, at).max(2);
            // what the counter could have reached from the last good read (its window
            // starts at the read before it)
            let good = raw[i - 1];
            let reach = (kind.max_watts * (reads[i].0 - reads[i - 2].0) / kind.joules_per_unit)
                .floor() as u64
                - 1;
            let m = kind.modulus;
            let family = match rng.below(6) {
                // at the power bound instead, for a loose bound
                0 | 2 if kind.loose => 1,
                f => f,
            };
            let bogus = match family {
                // anywhere it could have reached
                0 => (good + 1 + rng.below(reach)) % m,
                // at the power bound
                1 => (good + reach) % m,
                // just past a wrap, reachable if the good value is close enough to the top
                2 => rng.below((good + reach).saturating_sub(m).max(1)),
                3 => 0,
                4 => m - 1,
                // behind the truth
                _ => (raw[i] + m - 1 - rng.below(reach)) % m,
            };
            let held = 1 + rng.below(3) as usize;
            for r in &mut raw[i..i + held] {
                *r = bogus;
            }
            let truth = reads[reads.len() - 1].1;
            let counted = count(kind, &reads, &raw);
            let error = (counted - truth) / truth;
            let case = format!(
                "seed {seed}: {}, family {family}, {held} read(s) from {:.2} s, {:.0} W \
                 every {:.2} s: {counted:.1} J for {truth:.1} J",
                kind.name,
                reads[i].0,
                truth / reads[reads.len() - 1].0,
                reads[1].0
            );
            assert!(error.abs() <= 0.001, "{case}");
            if error.abs() > worst.0.abs() {
                worst = (error, case);
            }
        }
        println!("worst: {:+.5}% ({})", worst.0 * 100.0, worst.1);
    }

    #[test]
    fn a_real_reset_is_counted_from_its_new_value() {
        let mut worst = [
            (0.0_f64, String::new()),
            (0.0, String::new()),
            (0.0, String::new()),
        ];
        for seed in 0..4000u64 {
            let mut rng = Rng(1 << 40 | seed);
            let kind = &KINDS[(seed % 5) as usize];
            let reads = job(&mut rng);
            let at = rng.range(3.0, 28.0);
            // half of the resets come just after a read near the top of the range, where
            // the new value reads as a wrap
            let near_top = rng.below(2) == 0;
            let start = if near_top {
                wrapping_at(kind, &reads, at + rng.range(0.0, 1.0))
            } else {
                rng.next() % kind.modulus
            };
            let mut raw = raws(kind, &reads, start);
            // the counter restarts from zero somewhere in the interval before read `i`
            let i = read_at(&reads, at).max(2);
            let reset_joules = reads[i - 1].1 + rng.range(0.0, 1.0) * (reads[i].1 - reads[i - 1].1);
            for (r, &(_, j)) in raw[i..].iter_mut().zip(&reads[i..]) {
                *r = ((j - reset_joules) / kind.joules_per_unit).floor() as u64 % kind.modulus;
            }
            let truth = reads[reads.len() - 1].1;
            let counted = count(kind, &reads, &raw);
            // the one interval whose energy the reset hides, estimated; or, where the new
            // value reads as a wrap, what the maximum power allows over the window of the
            // read (counted as the wrap and burst it looks like)
            let gap = reads[i].1 - reads[i - 1].1;
            let reach = kind.max_watts * (reads[i].0 - reads[i - 2].0);
            let m = u128::from(kind.modulus);
            let jump = (u128::from(raw[i]) + m - u128::from(raw[i - 1])) % m;
            let wrap_like = jump as f64 * kind.joules_per_unit <= reach;
            // or, where it lands between the two reads before (the count had just wrapped
            // too), it reads as a bad read: counting waits until it passes the good value
            let behind = !wrap_like
                && (u128::from(raw[i]) + m - u128::from(raw[i - 2])) % m
                    < (u128::from(raw[i - 1]) + m - u128::from(raw[i - 2])) % m;
            let bound = match (wrap_like, behind) {
                (true, _) => gap.max(reach),
                (_, true) => gap + raw[i - 1] as f64 * kind.joules_per_unit,
                _ => gap,
            };
            let error = (counted - truth) / bound;
            let case = format!(
                "seed {seed}: {}, reset before {:.2} s{}, {:.0} W every {:.2} s: \
                 {counted:.1} J for {truth:.1} J (bound {bound:.1} J)",
                kind.name,
                reads[i].0,
                match (wrap_like, behind) {
                    (true, _) => " reading as a wrap",
                    (_, true) => " reading as behind",
                    _ => "",
                },
                truth / reads[reads.len() - 1].0,
                reads[1].0
            );
            assert!(error.abs() <= 1.0, "{case}");
            let worst = &mut worst[usize::from(wrap_like) * 2 + usize::from(behind)];
            if error.abs() > worst.0.abs() {
                *worst = (error, case);
            }
        }
        for (what, (error, case)) in ["", " reading as behind", " reading as a wrap"]
            .iter()
            .zip(&worst)
        {
            println!("worst{what}: {error:+.3} of its bound ({case})");
        }
    }
}
