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
//! this read: that window bounds what is *plausible*. What is *ordinary* is judged over the
//! time since the anchor was first read (a stalled counter's catch-up is spread over its
//! stall), plus the hardware's update delay.
//!
//! Counting goes from the **anchor**, the last value trusted. A true counter only moves
//! forward, so a bad value (torn, corrupted, a wrong constant held for a few reads) shows
//! as a read off the path the reads around it agree on. Each read is judged against the
//! anchor:
//! - **ordinary**: reachable under the maximum power, at no more than `BURST_FACTOR` times
//!   the measured power (plus a small floor): counted at once. The normal path, exact
//!   across wraps, gaps and stalls.
//! - **a burst** a rise in power explains (up to `HOLD_FACTOR` times the measured power):
//!   counted at once, for rises are common and a reader then (a step's edge, a power
//!   figure) should see them, but doubted by all of it (below, *behind*). The first burst
//!   is no measure of the power: that is measured again from it.
//! - **a burst** beyond that. A bad value the counter *could* have reached (just past a
//!   wrap, at the power bound) looks exactly like this, and so does a steep jump in power.
//!   It is held: the anchor stays, and the next read decides. If it continues the anchor
//!   ordinarily and the burst value is not on its way, the burst was a bad read and costs
//!   nothing. If the burst value lies on the way from the anchor to it, two reads agree,
//!   and the count goes from the anchor to the later read (exact whatever the held read
//!   was). While held, readers see it up to what a rise counted at once would be, never
//!   going back. A held burst read unchanged for `IDLE_AFTER` is a counter at rest after a
//!   rise, and counted, doubted.
//! - **behind**: within the anchor's own last increment (between the value before it and
//!   the anchor), by no more than a bad anchor can have been ahead of the truth and still
//!   passed (half the measured power over its window, plus the floor, if it was ordinary;
//!   its whole increment if it was a burst, or before the power is measured), and while no
//!   burst is held (that says the counter went past the anchor). A counter never goes back: either this read
//!   is bad, or the anchor was a bad value a little ahead of the truth. Nothing is counted
//!   and the anchor stays; counting goes on when the counter passes it. Either way the total
//!   is exact from then on; an anchor ahead was only counted early. While a read has been
//!   behind, a read within that increment is the truth climbing back, not a near-whole wrap,
//!   and the wraps a long gap hid are judged from the last read behind.
//! - **not reachable** (a reset or a bad read): a suspect, nothing counted. A later read that
//!   continues the anchor is counted from it; one that advances plausibly from the suspect,
//!   and from the anchor not at all or at a power further from the latest known (a held
//!   burst's, or the measured one), confirms a reset: counting goes on from the suspect, and the gap between the anchor
//!   (since it was first read: a value read unchanged counted nothing since) and the suspect
//!   is estimated from the power measured from the suspect on.
//!
//! A read that repeats the held value (a burst or a suspect) decides nothing (a bad constant,
//! or a reset counter that has not moved yet), however long it stays (a held burst: until it
//! is a counter at rest). What a held burst shows readers is published ahead of the count;
//! the total published never goes back, and the count catches up with it, never counting
//! it twice.
//!
//! Limits: a bad value a rise in power could explain, or any before the power is first
//! measured (`RATE_WINDOW` after the first read), is counted until the truth passes it; a
//! job that ends before then keeps the excess. The first read (a process's baseline) cannot be checked: if it is bad, the reads
//! after it are suspects that confirm each other, and the gap is estimated. A reset just
//! after a read near the top of the range reads as a wrap, and is counted as one; a reset
//! that lands within the anchor's last increment reads as behind, and the energy up to the
//! anchor is not counted.

use std::time::{Duration, Instant};

mod distance;

/// How long the hardware may have held the first value read before it was read (it
/// updates about every millisecond; generous).
const FIRST_VALUE_AGE: Duration = Duration::from_millis(100);
/// How late the hardware's update before a read may have been, for what is ordinary.
const STEP_AGE: Duration = Duration::from_millis(100);
/// The measured power (for the wraps in a long gap, a reset's gap, or what is a burst) is
/// taken over at least this long, so steps between close reads do not make it jump.
const RATE_WINDOW: Duration = Duration::from_millis(500);
/// A held burst read unchanged this many more times, over this long, is the counter at rest
/// and counted: a bad constant held for up to three reads, a second or two, is not.
const IDLE_AFTER_REPEATS: u32 = 3;
const IDLE_AFTER: Duration = Duration::from_secs(5);
/// A burst implying more than this many times the measured power is held until the next
/// read; a smaller one is counted at once (a rise in power, most likely), but doubted.
const HOLD_FACTOR: f64 = 3.0;
/// A read implying more than this many times the measured power is a burst.
const BURST_FACTOR: f64 = 1.5;
/// ... plus this share of the maximum power, so a counter at (nearly) no power does not make
/// every step a burst.
const BURST_FLOOR_SHARE: f64 = 0.001;

/// How one read advanced the counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Advance {
    /// First read: a baseline, no energy yet.
    Started,
    /// `units` of energy counted (wraps included) from the anchor.
    Counted { units: u64 },
    /// The read is reachable but a burst: held until the next read tells a jump in power
    /// from a bad read.
    Burst,
    /// The read is `by` units behind the anchor, within its last increment: one of the two
    /// is bad; nothing is counted until the counter passes the anchor.
    Behind { by: u64 },
    /// The read is further from the anchor than the maximum power allows (`raw_delta` units
    /// on; `None`: outside the counter's range): a reset or a bad read. Nothing is counted
    /// until a later read tells which.
    Suspect { raw_delta: Option<u64> },
    /// The read repeats the held one: still undecided, nothing counted.
    Held,
    /// The read continues the anchor: the held read(s) before it were bad and are
    /// forgotten; `units` counted from the anchor.
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
    fn new(value: u64, now: Instant, since: Instant) -> Seen {
        Seen {
            value,
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
            Seen::new(value, now, self.at)
        }
    }
}

/// A read not counted yet, waiting for the reads after it.
#[derive(Debug, Clone, Copy)]
struct Held {
    seen: Seen,
    /// The units from the anchor to it, when it is reachable (a burst); `None` for a suspect.
    units: Option<u64>,
    /// What of them is published while it is held: no more than a rise counted at once, so
    /// a bad value is published ahead of the truth by no more than such a rise.
    published: u64,
    /// The reads since that repeated it.
    repeats: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct WrappingCounter {
    /// Values lie in `0..modulus`.
    modulus: u64,
    /// Units per second the domain can never exceed.
    max_units_per_sec: f64,
    /// The last value counted from.
    anchor: Option<Seen>,
    /// The value the anchor's last increment started from (what is behind it).
    before_anchor: u64,
    /// How far the anchor can be ahead of the truth, if it was a bad value: what is behind
    /// it is within this of it.
    anchor_excess: u64,
    /// The anchor was counted as a burst.
    after_burst: bool,
    /// The power a burst held since the anchor implied.
    recent_power: Option<f64>,
    /// A read fell behind the anchor since it was counted: one of the two is bad, and a read
    /// within the anchor's last increment is the truth climbing back, not a near-whole wrap.
    doubted: bool,
    /// A read not counted yet.
    held: Option<Held>,
    /// Units per second, measured over at least `RATE_WINDOW`.
    rate: f64,
    /// Whether `rate` was measured yet: before, nothing is a burst.
    rate_measured: bool,
    /// Where the current rate measurement started: (when, total units then).
    rate_from: Option<(Instant, u64)>,
    /// A reset's gap, waiting for the power measured after it.
    unestimated_gap: Duration,
    /// Units counted.
    counted: u64,
    /// Units published: the count, or a held burst's; never going back.
    published: u64,
}

impl WrappingCounter {
    pub(crate) fn new(modulus: u64, max_units_per_sec: f64) -> Self {
        Self {
            modulus,
            max_units_per_sec,
            anchor: None,
            before_anchor: 0,
            anchor_excess: 0,
            after_burst: false,
            recent_power: None,
            doubted: false,
            held: None,
            rate: 0.0,
            rate_measured: false,
            rate_from: None,
            unestimated_gap: Duration::ZERO,
            counted: 0,
            published: 0,
        }
    }

    /// Units accumulated since the first read: the count, or a held burst's, if more than
    /// any before. Never less than before.
    pub(crate) fn total_units(&self) -> u64 {
        self.published
    }

    /// No read is held undecided, and no reset's gap waits for its estimate: nothing
    /// counted later belongs before the last read.
    pub(crate) fn settled(&self) -> bool {
        self.held.is_none() && self.unestimated_gap.is_zero()
    }

    /// The hardware value the published total stands at, when no read is held undecided:
    /// the anchor, moved on by what was published ahead of the count (a held burst shown
    /// to readers before it was dropped), so that energy counted on from this value is
    /// never counted twice.
    pub(crate) fn published_value(&self) -> Option<u64> {
        let anchor = self.anchor.filter(|_| self.settled())?;
        let ahead = self.published.saturating_sub(self.counted) % self.modulus;
        Some((anchor.value + ahead) % self.modulus)
    }

    pub(crate) fn advance(&mut self, raw: u64, now: Instant) -> Advance {
        let advance = self.judge(raw, now);
        let held = self.held.map_or(0, |h| h.published);
        self.published = self.published.max(self.counted.saturating_add(held));
        advance
    }

    fn judge(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(anchor) = self.anchor else {
            self.rate_from = Some((now, 0));
            let since = now.checked_sub(FIRST_VALUE_AGE).unwrap_or(now);
            self.anchor = Some(Seen::new(raw % self.modulus, now, since));
            self.before_anchor = raw % self.modulus;
            return Advance::Started;
        };
        // the same held value read again, even once the anchor could have reached it, is no
        // more credible than the first time
        if let Some(held) = &mut self.held
            && raw == held.seen.value
        {
            held.seen.at = now;
            held.repeats += 1;
            // ... until it has stayed longer than a bad constant is held: a burst read
            // unchanged that long is a counter at rest after a rise (a node at no power). It
            // is counted, as doubtful as a value counted before the power is measured: a
            // truth behind it is waited for, not taken for a reset
            let at_rest = held.repeats >= IDLE_AFTER_REPEATS
                && now.saturating_duration_since(held.seen.first_at) >= IDLE_AFTER;
            if let (Some(units), true) = (held.units, at_rest) {
                let held = *held;
                self.held = None;
                // counted as a burst: doubted by all of it
                self.count_to(anchor, raw, units, true, now);
                self.anchor = Some(held.seen);
                self.doubted = true;
                return Advance::Counted { units };
            }
            return Advance::Held;
        }
        let held = self.held.take();
        if self.doubted
            && let Some(by) = self.behind(anchor, raw)
        {
            return self.fall_behind(anchor, by, now);
        }
        let reachable = self.plausible_from(anchor, raw, now);
        if let Some(units) = reachable {
            if let Some(held) = held
                && let Some(on) = self.confirms(anchor, held, raw, units)
            {
                self.count_to(anchor, raw, units, false, now);
                // the power rose: measured from the held value on when that is long enough,
                // so the reads after it are not bursts against the power before
                let secs = now.saturating_duration_since(held.seen.first_at);
                if secs >= RATE_WINDOW {
                    self.rate = on as f64 / secs.as_secs_f64();
                    self.rate_from = Some((now, self.counted));
                }
                return Advance::Counted { units };
            }
            if let Some(suspect) = held.filter(|h| h.units.is_none())
                && let Some(since_suspect) = self.plausible_from(suspect.seen, raw, now)
                && self.nearer_the_power((suspect.seen, since_suspect), (anchor, units), now)
            {
                // on from the suspect at about the measured power, and from the anchor far
                // from it: a counter reset to below the anchor that has already passed it
                return self.confirm_reset(anchor, suspect.seen, raw, since_suspect, now);
            }
            let window = now.saturating_duration_since(anchor.first_at);
            if !self.is_far(units, window) {
                // ordinary, or a burst a rise in power explains: counted at once, a burst as
                // doubtful as all of it; but a burst that is also a little behind is behind
                // (no near-whole wrap on a counter whose range the power covers in a read)
                let burst = self.is_burst(units, window);
                if let (true, Some(by)) = (burst, self.behind(anchor, raw)) {
                    return self.fall_behind(anchor, by, now);
                }
                self.count_to(anchor, raw, units, burst, now);
                return match held {
                    Some(_) => Advance::Recovered { units },
                    None => Advance::Counted { units },
                };
            }
        }
        // a read on from a suspect confirms a reset, even where it would be a burst from the
        // anchor (a wrap the growing window now allows) or behind it (a reset to a value
        // within the anchor's last increment)
        if let Some(suspect) = held.filter(|h| h.units.is_none())
            && let Some(units) = self.plausible_from(suspect.seen, raw, now)
        {
            return self.confirm_reset(anchor, suspect.seen, raw, units, now);
        }
        // before a burst: a read a little behind is no near-whole wrap on a counter whose
        // range the maximum power can cover in one interval; unless a burst is held, a read
        // saying the counter went past the anchor (it then is a reset, or bad)
        let burst_held = held.is_some_and(|h| h.units.is_some());
        if !burst_held && let Some(by) = self.behind(anchor, raw) {
            return self.fall_behind(anchor, by, now);
        }
        if let Some(units) = reachable {
            let previous = held.map_or(anchor.at, |h| h.seen.at);
            let window = now.saturating_duration_since(anchor.first_at);
            // the latest sign of the power now, for telling a reset from a bad read next
            let secs = (now.saturating_duration_since(anchor.at) + STEP_AGE).as_secs_f64();
            self.recent_power = Some(units as f64 / secs);
            self.held = Some(Held {
                seen: Seen::new(raw, now, previous),
                units: Some(units),
                published: units.min(self.held_publishable(window)),
                repeats: 0,
            });
            return Advance::Burst;
        }
        // the previous read: the held one's if there is one
        let previous = held.map_or(anchor.at, |h| h.seen.at);
        self.held = Some(Held {
            seen: Seen::new(raw, now, previous),
            units: None,
            published: 0,
            repeats: 0,
        });
        Advance::Suspect {
            raw_delta: self.delta(anchor.value, raw),
        }
    }

    /// The hardware says its counter started again (a node controller's restart, told by
    /// its `startup` file) at an unknown moment since the anchor was read: counting goes on
    /// from `raw`, and the gap since that read is estimated as a reset's is, from the power
    /// measured from now on.
    pub(crate) fn restarted(&mut self, raw: u64, now: Instant) -> Advance {
        let Some(anchor) = self.anchor else {
            return self.advance(raw, now);
        };
        let gap = now.saturating_duration_since(anchor.at);
        self.anchor = Some(Seen::new(raw % self.modulus, now, now));
        self.before_anchor = raw % self.modulus;
        self.anchor_excess = 0;
        self.doubted = false;
        self.held = None;
        self.unestimated_gap += gap;
        self.rate_from = Some((now, self.counted));
        Advance::Reset { gap, units: 0 }
    }

    fn fall_behind(&mut self, anchor: Seen, by: u64, now: Instant) -> Advance {
        // if this read is true, the counter passes the anchor later than it: the wraps a
        // long gap hid are judged from this read on (not what is plausible: it may be bad)
        self.anchor = Some(Seen { at: now, ..anchor });
        self.doubted = true;
        Advance::Behind { by }
    }

    /// Counts `units` from the anchor to `raw`, which becomes the anchor.
    fn count_to(&mut self, anchor: Seen, raw: u64, units: u64, burst: bool, now: Instant) {
        self.anchor = Some(anchor.then(raw, now));
        self.recent_power = None;
        if raw == anchor.value {
            self.add(units, now);
            return;
        }
        self.before_anchor = anchor.value;
        self.doubted = false;
        // a bad value counted as ordinary is ahead of the truth by no more than what made it
        // ordinary; a burst, or any value before the power is measured, by all of it
        let secs = (now.saturating_duration_since(anchor.first_at) + STEP_AGE).as_secs_f64();
        let room =
            ((BURST_FACTOR - 1.0) * self.rate + BURST_FLOOR_SHARE * self.max_units_per_sec) * secs;
        self.anchor_excess = if self.rate_measured && !burst {
            units.min(room as u64)
        } else {
            units
        };
        if burst && !self.after_burst {
            // the first burst is no measure of the power (a bad value would make the power,
            // and what is a burst next, whatever it says): the power is measured again from
            // it, over the reads after it, a rise included
            self.counted = self.counted.saturating_add(units);
            self.rate_from = Some((now, self.counted));
        } else {
            self.add(units, now);
        }
        self.after_burst = burst;
    }

    fn confirm_reset(
        &mut self,
        anchor: Seen,
        suspect: Seen,
        raw: u64,
        units: u64,
        now: Instant,
    ) -> Advance {
        let gap = suspect.first_at.saturating_duration_since(anchor.first_at);
        self.before_anchor = suspect.value;
        self.recent_power = None;
        self.anchor_excess = 0;
        self.doubted = false;
        self.anchor = Some(suspect.then(raw, now));
        self.unestimated_gap += gap;
        self.rate_from = Some((suspect.first_at, self.counted));
        self.add(units, now);
        Advance::Reset { gap, units }
    }

    fn add(&mut self, units: u64, now: Instant) {
        self.counted = self.counted.saturating_add(units);
        let Some((from, counted_then)) = self.rate_from else {
            return;
        };
        let secs = now.saturating_duration_since(from);
        // measured at reads that see the counter move: one read unchanged (stalled, or a
        // step not taken yet) holds energy it shows later, over the whole time
        if secs < RATE_WINDOW || units == 0 {
            return;
        }
        self.rate = self.counted.saturating_sub(counted_then) as f64 / secs.as_secs_f64();
        self.rate_measured = true;
        if !self.unestimated_gap.is_zero() {
            let estimate = (self.rate * self.unestimated_gap.as_secs_f64()).round() as u64;
            self.counted = self.counted.saturating_add(estimate);
            self.unestimated_gap = Duration::ZERO;
        }
        self.rate_from = Some((now, self.counted));
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;

#[cfg(test)]
mod simulated;
