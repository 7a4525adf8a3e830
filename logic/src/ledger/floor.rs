//! The static power a shared node's (or a device's) split learns where the admin gave none
//! (`EnergyAttributionIdleWatts`): the lowest power the meter held for a while.
//!
//! Not the lowest power of any one interval: an interval's energy and its time do not
//! always agree. A counter advances in steps (RAPL every millisecond or so, pm_counters at
//! 10 Hz, a simulator every 10 to 20 ms), and a late read or sample is dated when it was
//! read: any one short interval can show far less than the node drew, and the lowest of
//! thousands of intervals is then that error, not the node (55.7 W learned for a node
//! drawing a steady 200 W). So a power is taken over [`SUSTAIN`] at least, between settled
//! samples (energy counted through a held read is in it whole): the counter's steps are then
//! at most two steps of error over the span (2% at pm_counters' 10 Hz). One late sample at
//! a span's end still makes that span low, and the next span, which ends after it, high: a
//! span's power counts only as the larger of it and the span before, so one bad sample
//! never teaches the floor. The static power is the lowest of those.

use std::collections::VecDeque;

/// How long a power must be held to be the node's floor: long enough that the counter's
/// steps and a sample's dating are a small part of it, short enough that a node idle
/// between jobs for a few seconds teaches it.
pub const SUSTAIN: f64 = 10.0;

/// The lowest power held over [`SUSTAIN`], as it is learned.
#[derive(Debug, Clone, Default)]
pub(super) struct Floor {
    /// The recent samples: time (s) and energy (J) since the first, and whether settled.
    recent: VecDeque<(f64, f64, bool)>,
    /// The power of the span that ended at the last settled sample.
    last_span: Option<f64>,
    watts: Option<f64>,
    /// The floor last said (logged): it is said again once it fell [`SAY_AGAIN`] below.
    said: Option<f64>,
}

/// A floor is said again once it fell this much (relative) below the one said before.
const SAY_AGAIN: f64 = 0.02;

impl Floor {
    /// Continues from a floor learned before (a restarted slurmd's ledger).
    pub(super) fn from_learned(watts: Option<f64>) -> Self {
        Self {
            watts: watts.filter(|w| w.is_finite() && *w >= 0.0),
            ..Self::default()
        }
    }

    /// The static power learned so far.
    pub(super) fn watts(&self) -> Option<f64> {
        self.watts
    }

    /// The next interval, of `secs` and `joules`, ending at a sample that is `settled` or
    /// not (a counter holds a read undecided: its energy may be counted later). Returns the
    /// floor when it is first learned, or fell [`SAY_AGAIN`] below the last one returned:
    /// worth saying in slurmd's log.
    pub(super) fn observe(&mut self, secs: f64, joules: f64, settled: bool) -> Option<f64> {
        if !secs.is_finite() || secs <= 0.0 || !joules.is_finite() || joules < 0.0 {
            // no time, or no energy to trust: spans start again after it
            self.recent.clear();
            self.last_span = None;
            return None;
        }
        if self.recent.is_empty() {
            // the first interval's start: the sample before it
            self.recent.push_back((0.0, 0.0, true));
        }
        let (t, e) = self.recent.back().map_or((0.0, 0.0), |&(t, e, _)| (t, e));
        let (now, energy) = (t + secs, e + joules);
        self.recent.push_back((now, energy, settled));
        // the span's start: the latest settled sample at least SUSTAIN before; older ones
        // are no longer needed
        while self
            .recent
            .iter()
            .skip(1)
            .any(|&(t, _, s)| s && now - t >= SUSTAIN)
        {
            self.recent.pop_front();
        }
        if !settled {
            return None;
        }
        let span = self
            .recent
            .front()
            .filter(|&&(t, _, s)| s && now - t >= SUSTAIN)
            .map(|&(t, e, _)| (energy - e) / (now - t));
        let last = std::mem::replace(&mut self.last_span, span);
        let held = span?.max(last?);
        if self.watts.is_some_and(|w| held >= w) {
            return None;
        }
        self.watts = Some(held);
        let news = self.said.is_none_or(|said| held < said * (1.0 - SAY_AGAIN));
        news.then(|| {
            self.said = Some(held);
            held
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A steady node one of whose samples is late: what one interval loses, the next
    /// gains; and a read held undecided, whose energy comes with the next sample.
    #[test]
    fn one_late_or_held_sample_teaches_nothing() {
        let mut floor = Floor::default();
        for _ in 0..12 {
            floor.observe(1.0, 200.0, true);
        }
        assert_eq!(floor.watts(), Some(200.0));
        // a late sample: 1 J in one interval, the rest in the next
        floor.observe(1.0, 1.0, true);
        floor.observe(1.0, 399.0, true);
        // a held read (unsettled), counted in the next
        floor.observe(1.0, 0.0, false);
        floor.observe(1.0, 400.0, true);
        for _ in 0..12 {
            floor.observe(1.0, 200.0, true);
        }
        assert_eq!(floor.watts(), Some(200.0));
    }

    #[test]
    fn a_power_held_for_long_enough_lowers_it_a_dip_does_not() {
        let mut floor = Floor::default();
        for _ in 0..4 {
            floor.observe(1.0, 300.0, true);
        }
        assert_eq!(floor.watts(), None, "not yet held for SUSTAIN");
        for _ in 0..8 {
            floor.observe(1.0, 300.0, true);
        }
        assert_eq!(floor.watts(), Some(300.0));
        // a low second is no floor: its span (280 W) counts as the one before it
        floor.observe(1.0, 100.0, true);
        assert_eq!(floor.watts(), Some(300.0));
        // held for ten seconds, it is
        for _ in 0..11 {
            floor.observe(1.0, 120.0, true);
        }
        assert_eq!(floor.watts(), Some(120.0));
        // it never rises again
        for _ in 0..20 {
            floor.observe(1.0, 400.0, true);
        }
        assert_eq!(floor.watts(), Some(120.0));
    }

    proptest! {
        /// A node drawing a constant power, read at jittered times by a counter that
        /// advances in steps (every 1 to 100 ms), with now and then a held read whose
        /// energy is counted in the next interval: the floor learned is that power within
        /// 3%.
        #[test]
        fn a_constant_node_is_learned_whatever_the_read_jitter(
            watts in 50.0f64..1000.0,
            step_ms in 1u32..=100,
            reads in proptest::collection::vec((0.5f64..1.5, 0u8..10), 40..120),
        ) {
            let step = f64::from(step_ms) / 1000.0;
            // the counter's value at time t: the energy up to its last step
            let counter = |t: f64| (t / step).floor() * step * watts;
            let mut floor = Floor::default();
            let (mut t, mut last_counted) = (0.0f64, 0.0f64);
            let mut held = false;
            for (secs, roll) in &reads {
                let now = t + secs;
                // one read in ten is late: its interval sees no rise, the next gets it
                let hold = *roll == 0 && !held;
                let value = if hold { last_counted } else { counter(now) };
                floor.observe(now - t, value - last_counted, true);
                last_counted = value;
                held = hold;
                t = now;
            }
            let learned = floor.watts().expect("learned over 40 s and more");
            prop_assert!((learned - watts).abs() <= 0.03 * watts, "{learned} W for {watts} W");
        }
    }
}
