//! How far a read is from a value the counter read before, and what that distance says:
//! the units between them (wraps included), whether the maximum power can have made them,
//! and whether the measured power makes them ordinary, a burst, or a read behind the
//! anchor. These only measure; what [`WrappingCounter::advance`] does with a read is in
//! `counter`. Apart from it so that each judgment's arithmetic reads on its own.

use std::time::{Duration, Instant};

use super::{BURST_FACTOR, BURST_FLOOR_SHARE, HOLD_FACTOR, Held, STEP_AGE, Seen, WrappingCounter};

impl WrappingCounter {
    /// Whether `units` over `window` (plus the hardware's update delay) are more than the
    /// measured power explains.
    pub(super) fn is_burst(&self, units: u64, window: Duration) -> bool {
        self.rate_measured && units > self.ordinary(window)
    }

    /// Whether `units` over `window` are a burst no ordinary rise in power explains: held.
    pub(super) fn is_far(&self, units: u64, window: Duration) -> bool {
        self.rate_measured && units > self.held_publishable(window)
    }

    /// The most a held burst shows readers over `window`: what a rise would have been
    /// counted at once. A real rise beyond shows the rest when confirmed (the power is
    /// measured across, not up to, a held read: no peak), a bad value no more than a rise
    /// would have.
    pub(super) fn held_publishable(&self, window: Duration) -> u64 {
        let secs = (window + STEP_AGE).as_secs_f64();
        ((HOLD_FACTOR * self.rate + BURST_FLOOR_SHARE * self.max_units_per_sec) * secs) as u64
    }

    /// The most units the measured power makes ordinary over `window` (plus the hardware's
    /// update delay).
    fn ordinary(&self, window: Duration) -> u64 {
        let secs = (window + STEP_AGE).as_secs_f64();
        ((BURST_FACTOR * self.rate + BURST_FLOOR_SHARE * self.max_units_per_sec) * secs) as u64
    }

    /// The units from the held burst on to `raw` (`units` from the anchor), when `raw`
    /// confirms it: the held value lies on the way from the anchor to it. Two reads agree on
    /// the path, and counting from the anchor to `raw` is exact whatever the held value was.
    /// (A path through the held value with more wraps than the measured power chose is not
    /// taken: a bad value a little ahead of the truth makes exactly that.)
    pub(super) fn confirms(&self, anchor: Seen, held: Held, raw: u64, units: u64) -> Option<u64> {
        held.units?;
        let from_anchor = self.delta(anchor.value, held.seen.value)?;
        let on = self.delta(held.seen.value, raw)?;
        // the two steps add up to the whole, less whole wraps a long gap hid
        let (steps, whole) = (u128::from(from_anchor) + u128::from(on), u128::from(units));
        let on_the_way = from_anchor > 0
            && on > 0
            && steps <= whole
            && (whole - steps) % u128::from(self.modulus) == 0;
        on_the_way.then_some(on)
    }

    /// Whether `units` counted from `a` (since it was first read: a value read unchanged
    /// did not move) imply a power nearer the measured one than those from `b`.
    pub(super) fn nearer_the_power(&self, a: (Seen, u64), b: (Seen, u64), now: Instant) -> bool {
        if !self.rate_measured {
            return false;
        }
        // the power a held burst implied, if one was held since the anchor: the power
        // measured before may be from before a rise
        let power = self.recent_power.unwrap_or(self.rate);
        let off = |(from, units): (Seen, u64)| {
            let secs = (now.saturating_duration_since(from.first_at) + STEP_AGE).as_secs_f64();
            (units as f64 / secs - power).abs()
        };
        off(a) < off(b)
    }

    /// How far `raw` is behind the anchor, when it lies within the anchor's last increment.
    pub(super) fn behind(&self, anchor: Seen, raw: u64) -> Option<u64> {
        let increment = self.delta(self.before_anchor, anchor.value)?;
        let into = self.delta(self.before_anchor, raw)?;
        let by = increment.checked_sub(into).filter(|&by| by > 0)?;
        (by <= self.anchor_excess).then_some(by)
    }

    /// The units from `from` to `raw`, if the domain can have produced them by `now`.
    pub(super) fn plausible_from(&self, from: Seen, raw: u64, now: Instant) -> Option<u64> {
        let delta = self.delta(from.value, raw)?;
        if delta == 0 {
            // the very same value: a counter not moved (stalled, or idle), never one that
            // came round to it
            return Some(0);
        }
        let window = now.saturating_duration_since(from.since).as_secs_f64();
        let max_units = self.max_units_per_sec * window;
        if delta as f64 > max_units {
            return None;
        }
        // A value read unchanged for a while was at rest (no power: the energy came since it
        // was last read, at a power the one before says nothing of) or stalled (the energy
        // since it was first read, shown late). A step the maximum power allows since the
        // last read is taken as rest; a larger one as a stall catching up. After a read
        // behind the anchor: since that read (the counter was below the anchor then, if that
        // read was true), no more wraps than the power allows since.
        let since_last = now.saturating_duration_since(from.at);
        let unchanged = from.at.saturating_duration_since(from.first_at) >= STEP_AGE;
        let rest = unchanged
            && (delta as f64) <= self.max_units_per_sec * (since_last + STEP_AGE).as_secs_f64();
        let (elapsed_from, rate) = match (self.doubted, unchanged, rest) {
            (true, ..) => (from.at, self.rate),
            (_, true, true) => (from.at, 0.0),
            (_, true, false) => (from.first_at, self.rate),
            _ => (from.at, self.rate),
        };
        let elapsed = now.saturating_duration_since(elapsed_from).as_secs_f64();
        let wraps_window = if self.doubted { elapsed } else { window };
        let wraps_possible =
            (self.max_units_per_sec * wraps_window / self.modulus as f64).floor() as u64;
        if wraps_possible == 0 {
            return Some(delta);
        }
        Some(self.with_likely_wraps(delta, rate * elapsed, wraps_possible))
    }

    /// `raw - from` modulo the counter's range; `None` for a value out of range (never
    /// plausible).
    pub(super) fn delta(&self, from: u64, raw: u64) -> Option<u64> {
        (raw < self.modulus && from < self.modulus)
            .then(|| raw.wrapping_sub(from).wrapping_add(self.modulus) % self.modulus)
    }

    /// After a gap long enough for several wraps, pick the wrap count whose energy is
    /// closest to the `expected` units.
    fn with_likely_wraps(&self, delta: u64, expected: f64, wraps_possible: u64) -> u64 {
        let wraps = ((expected - delta as f64) / self.modulus as f64)
            .round()
            .clamp(0.0, wraps_possible as f64) as u64;
        delta.saturating_add(wraps.saturating_mul(self.modulus))
    }
}
