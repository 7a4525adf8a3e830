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

    /// Whether `units` over `window` (plus the hardware's update delay) are more than the
    /// measured power explains.
    fn is_burst(&self, units: u64, window: Duration) -> bool {
        self.rate_measured && units > self.ordinary(window)
    }

    /// Whether `units` over `window` are a burst no ordinary rise in power explains: held.
    fn is_far(&self, units: u64, window: Duration) -> bool {
        self.rate_measured && units > self.held_publishable(window)
    }

    /// The most a held burst shows readers over `window`: what a rise would have been
    /// counted at once. A real rise beyond shows the rest when confirmed (the power is
    /// measured across, not up to, a held read: no peak), a bad value no more than a rise
    /// would have.
    fn held_publishable(&self, window: Duration) -> u64 {
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
    fn confirms(&self, anchor: Seen, held: Held, raw: u64, units: u64) -> Option<u64> {
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

    fn fall_behind(&mut self, anchor: Seen, by: u64, now: Instant) -> Advance {
        // if this read is true, the counter passes the anchor later than it: the wraps a
        // long gap hid are judged from this read on (not what is plausible: it may be bad)
        self.anchor = Some(Seen { at: now, ..anchor });
        self.doubted = true;
        Advance::Behind { by }
    }

    /// Whether `units` counted from `a` (since it was first read: a value read unchanged
    /// did not move) imply a power nearer the measured one than those from `b`.
    fn nearer_the_power(&self, a: (Seen, u64), b: (Seen, u64), now: Instant) -> bool {
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
    fn behind(&self, anchor: Seen, raw: u64) -> Option<u64> {
        let increment = self.delta(self.before_anchor, anchor.value)?;
        let into = self.delta(self.before_anchor, raw)?;
        let by = increment.checked_sub(into).filter(|&by| by > 0)?;
        (by <= self.anchor_excess).then_some(by)
    }

    /// The units from `from` to `raw`, if the domain can have produced them by `now`.
    fn plausible_from(&self, from: Seen, raw: u64, now: Instant) -> Option<u64> {
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
    fn delta(&self, from: u64, raw: u64) -> Option<u64> {
        (raw < self.modulus && from < self.modulus)
            .then(|| raw.wrapping_sub(from).wrapping_add(self.modulus) % self.modulus)
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

    /// After a gap long enough for several wraps, pick the wrap count whose energy is
    /// closest to the `expected` units.
    fn with_likely_wraps(&self, delta: u64, expected: f64, wraps_possible: u64) -> u64 {
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
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const M: u64 = 1 << 32;

    proptest! {
        /// A counter read every second at up to 300 of its 1000 units/s, across wraps,
        /// with runs of a bogus constant (behind the count, as a torn read) between true
        /// reads: once two last true reads come, the total is exactly the true energy.
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
            // the counter goes on (a burst held on a counter that then stops is held until it
            // moves)
            let units = reads[last].0.max(50);
            // every read after the run is exact, but one held as a burst (a rise in power):
            // that is published up to what is ordinary, between the read before and itself
            for k in 1..=2 {
                let secs = (reads.len() + k) as u64;
                let step = c.advance((truth + k as u64 * units) % M, t0 + Duration::from_secs(secs));
                let exact = energy + k as u64 * units;
                if step == Advance::Burst {
                    prop_assert!((exact - units..=exact).contains(&c.total_units()));
                } else {
                    prop_assert_eq!(c.total_units(), exact);
                }
            }
        }
    }
}

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
        /// A bound far above the power simulated (GPUs', nodes').
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

    /// Seeds `0..count`, or the one `COUNTER_SEED` names (to rerun a failing case).
    fn seeds(count: u64) -> std::ops::Range<u64> {
        std::env::var("COUNTER_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(0..count, |s: u64| s..s + 1)
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

    /// A node at no power that starts drawing 100-600 W, read about every second by a
    /// loaded reader (up to 1.3 s late) and now and then at once (a step's ring): the rise
    /// is a burst held for a read, and the power figure ([`PowerWindow`], as slurmd's and
    /// the ledger's) never shows more than the power drawn. Measured from the held read, it
    /// showed both intervals' energy over one: up to 2.79 times the power in these runs.
    #[test]
    fn a_steep_rise_held_then_confirmed_shows_no_peak_in_the_power() {
        use crate::accounting::PowerWindow;
        let kind = &KINDS[0];
        let mut worst = (0.0_f64, String::new());
        for seed in seeds(2000) {
            let mut rng = Rng(5 << 40 | seed);
            let rise_at = rng.range(3.0, 6.0);
            let watts = rng.range(100.0, 600.0);
            let joules_at = |t: f64| watts * (t - rise_at).max(0.0);
            let start = rng.next() % kind.modulus;
            let t0 = Instant::now();
            let mut c = WrappingCounter::new(kind.modulus, kind.max_watts / kind.joules_per_unit);
            let mut power = PowerWindow::default();
            let (mut t, mut peak) = (0.0, 0.0_f64);
            while t < rise_at + 6.0 {
                t += match rng.below(4) {
                    0 => rng.range(0.001, 0.05),
                    _ => 1.0 + rng.range(0.0, 1.3),
                };
                let units = (joules_at(t) / kind.joules_per_unit).floor() as u64;
                c.advance(
                    (start + units) % kind.modulus,
                    t0 + Duration::from_secs_f64(t),
                );
                let joules = c.total_units() as f64 * kind.joules_per_unit;
                if let Some(w) = power.update(t, joules, c.settled()) {
                    peak = peak.max(w);
                }
            }
            let case = format!("seed {seed}: {watts:.0} W from {rise_at:.2} s, peak {peak:.0} W");
            assert!(peak <= watts * 1.001, "{case}");
            if peak / watts > worst.0 {
                worst = (peak / watts, case);
            }
        }
        println!("highest peak: {:.4} of the power ({})", worst.0, worst.1);
    }

    #[test]
    fn a_bogus_value_at_any_phase_held_for_up_to_three_reads_costs_at_most_a_thousandth() {
        let mut worst = (0.0_f64, String::new());
        for seed in seeds(4000) {
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
        for seed in seeds(4000) {
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

    /// A counter read on a loaded machine: irregular reads, a wrong constant at any phase.
    mod loaded {
        use super::*;

        /// AMD's package counters over MSRs: 32 bits of 2^-20 J, a 4096 J range.
        const MODULUS: u64 = 1 << 32;
        const JOULES_PER_UNIT: f64 = 1.0 / 1_048_576.0;
        const MAX_WATTS: f64 = 1000.0;
        const JOB_SECS: f64 = 40.0;

        /// A 40 s job's reads on a loaded machine: (seconds, true joules so far). A sampler
        /// every ~1 s whose waits stretch, reads 0.001-3 s apart, stalls of 2-4 s, and reads
        /// microseconds to milliseconds after another (a poll right after a sample).
        fn job(rng: &mut Rng, watts: f64) -> Vec<(f64, f64)> {
            let mut reads = vec![(0.0, 0.0)];
            let (mut t, mut joules) = (0.0, 0.0);
            while t < JOB_SECS {
                let dt = match rng.below(100) {
                    0..8 => rng.range(2.0, 4.0),
                    8..22 => rng.range(1e-6, 0.01),
                    22..45 => rng.range(0.001, 3.0),
                    _ => rng.range(0.5, 1.3),
                };
                t += dt;
                joules += watts * rng.range(0.97, 1.03) * dt;
                reads.push((t, joules));
            }
            reads
        }

        /// The true joules at `secs` (power constant between reads).
        fn joules_at(reads: &[(f64, f64)], secs: f64) -> f64 {
            let k = reads
                .iter()
                .position(|&(t, _)| t >= secs)
                .unwrap_or(reads.len() - 1)
                .max(1);
            let ((t0, j0), (t1, j1)) = (reads[k - 1], reads[k]);
            j0 + (j1 - j0) * ((secs - t0) / (t1 - t0)).clamp(0.0, 1.0)
        }

        fn units(joules: f64) -> u64 {
            (joules / JOULES_PER_UNIT).floor() as u64
        }

        struct Case {
            reads: Vec<(f64, f64)>,
            raws: Vec<u64>,
            /// The reads that saw the bogus value.
            seen: Vec<usize>,
            what: String,
        }

        /// A job whose counter shows a constant `ahead` joules ahead of the truth for `hold`
        /// seconds from `at`: at the moment of a wrap (as raplsim's `wrapspike`) or anywhere.
        fn case(seed: u64) -> Case {
            let mut rng = Rng(seed);
            let watts = match rng.below(3) {
                0 => 230.0,
                1 => 210.0,
                _ => rng.range(50.0, 330.0),
            };
            let reads = job(&mut rng, watts);
            let at = rng.range(2.0, 25.0);
            let at_wrap = rng.below(3) != 0;
            let start = if at_wrap {
                (MODULUS - units(joules_at(&reads, at)) % MODULUS) % MODULUS
            } else {
                rng.below(MODULUS)
            };
            let ahead = if rng.below(4) == 0 {
                rng.range(50.0, 2000.0)
            } else {
                600.0
            };
            let hold = 1.5;
            let raw_at = |j: f64| (start + units(j)) % MODULUS;
            let bogus = (raw_at(joules_at(&reads, at)) + units(ahead)) % MODULUS;
            let mut raws: Vec<u64> = reads.iter().map(|&(_, j)| raw_at(j)).collect();
            let mut seen = Vec::new();
            for (k, &(t, _)) in reads.iter().enumerate() {
                if (at..at + hold).contains(&t) {
                    raws[k] = bogus;
                    seen.push(k);
                }
            }
            let what = format!(
                "seed {seed}: {watts:.0} W, {ahead:.0} J ahead from {at:.3} s{} for {hold} s, \
                 seen by {} read(s)",
                if at_wrap { " (a wrap)" } else { "" },
                seen.len()
            );
            Case {
                reads,
                raws,
                seen,
                what,
            }
        }

        fn run(case: &Case, trace: bool) -> f64 {
            let t0 = Instant::now();
            let mut c = WrappingCounter::new(MODULUS, MAX_WATTS / JOULES_PER_UNIT);
            for (k, (&(t, j), &raw)) in case.reads.iter().zip(&case.raws).enumerate() {
                let step = c.advance(raw, t0 + Duration::from_secs_f64(t));
                if trace {
                    println!(
                        "{k:3} {t:8.4} s raw {raw:10} ({:7.1} J) truth {j:8.1} J{} -> {step:?}, \
                         total {:8.1} J",
                        raw as f64 * JOULES_PER_UNIT,
                        if case.seen.contains(&k) { " BOGUS" } else { "" },
                        c.total_units() as f64 * JOULES_PER_UNIT
                    );
                }
            }
            c.total_units() as f64 * JOULES_PER_UNIT
        }

        /// The cluster's failure under load (raplsim's `wrapspike`: 600 J ahead from the wrap
        /// for 1.5 s), at any phase and other amounts: the value read once or more, after
        /// intervals from microseconds to seconds, the truth behind it for seconds after.
        #[test]
        fn a_wrong_constant_at_any_phase_under_irregular_reads_costs_at_most_a_thousandth() {
            let mut worst = (0.0_f64, String::new());
            let mut failures = Vec::new();
            for seed in 0..20_000u64 {
                let case = case(seed);
                let truth = case.reads[case.reads.len() - 1].1;
                let counted = run(&case, false);
                let error = (counted - truth) / truth;
                let what = format!("{}: {counted:.1} J for {truth:.1} J", case.what);
                if error.abs() > 0.001 {
                    failures.push((seed, what.clone()));
                    println!("{:+.1} J: {what}", counted - truth);
                }
                if error.abs() > worst.0.abs() {
                    worst = (error, what);
                }
            }
            // each failure's reads, one by one
            for (seed, _) in failures.iter().take(3) {
                println!("{}", case(*seed).what);
                run(&case(*seed), true);
            }
            println!("worst: {:+.5}% ({})", worst.0 * 100.0, worst.1);
            assert!(failures.is_empty(), "{} failures", failures.len());
        }
    }

    /// A fast-wrapping counter (AMD's layout with a 2^-24 J unit: 256 J, a quarter second at
    /// the maximum power) on a loaded machine: the simulated register stalls for 0.05-0.6 s
    /// and catches up at once (across a wrap or not), the reader every 0.06 s with gaps of
    /// its own, power changing. Nothing is bad here: every read is true, and the count is.
    mod stalled {
        use super::*;

        const MODULUS: u64 = 1 << 32;
        const JOULES_PER_UNIT: f64 = 1.0 / 16_777_216.0;
        const MAX_WATTS: f64 = 1000.0;

        /// (seconds, register value, joules it shows) of each read over 30 s.
        fn reads(rng: &mut Rng, stalls: bool) -> Vec<(f64, u64, f64)> {
            let start = rng.below(MODULUS);
            let mut watts = rng.range(50.0, 330.0);
            let (mut t, mut joules) = (0.0, 0.0);
            // the register shows the true count, except while stalled: the count when the
            // stall began
            let mut stalled: Option<(f64, f64)> = None;
            let mut reads = Vec::new();
            while t < 30.0 {
                let dt = match rng.below(100) {
                    // a loaded reader's gaps, with the stalls (without them, a gap as the
                    // power falls to nothing is a wrap or none, and the power before says
                    // a wrap: the sampler reads this counter every 0.06 s for that)
                    0..5 if stalls => rng.range(0.1, 0.5),
                    _ => rng.range(0.055, 0.065),
                };
                let steps = (dt / 0.01).ceil() as usize;
                for _ in 0..steps {
                    t += dt / steps as f64;
                    joules += watts * dt / steps as f64;
                    if rng.below(1000) == 0 {
                        // without stalls, one change in three is to no power at all (a
                        // simulator's `all=0`): the register then reads unchanged, idle
                        watts = if !stalls && rng.below(3) == 0 {
                            0.0
                        } else {
                            rng.range(50.0, 330.0)
                        };
                    }
                    match stalled {
                        Some((until, _)) if t >= until => stalled = None,
                        None if stalls && rng.below(400) == 0 => {
                            stalled = Some((t + rng.range(0.05, 0.6), joules))
                        }
                        _ => {}
                    }
                }
                let shown = stalled.map_or(joules, |(_, j)| j);
                let raw = (start + (shown / JOULES_PER_UNIT) as u64) % MODULUS;
                reads.push((t, raw, shown));
            }
            reads
        }

        /// The same counter read every 0.06 s with no stalls, its power falling to nothing and
        /// rising again: every run exact.
        #[test]
        fn a_counter_idle_then_powered_again_is_counted_exactly() {
            for seed in 0..2000u64 {
                let reads = reads(&mut Rng(3 << 40 | seed), false);
                let t0 = Instant::now();
                let mut c = WrappingCounter::new(MODULUS, MAX_WATTS / JOULES_PER_UNIT);
                let mut counted_to = 0;
                for (k, &(t, raw, _)) in reads.iter().enumerate() {
                    let step = c.advance(raw, t0 + Duration::from_secs_f64(t));
                    if matches!(step, Advance::Counted { .. }) {
                        counted_to = k;
                    }
                }
                let shown = |k: usize| reads[k].2 - reads[0].2;
                let counted = c.total_units() as f64 * JOULES_PER_UNIT;
                assert!(
                    counted >= shown(counted_to) - 0.001 * shown(counted_to)
                        && counted <= shown(reads.len() - 1) * 1.001,
                    "seed {seed}: {counted:.1} J for {:.1} J",
                    shown(reads.len() - 1)
                );
            }
        }

        /// A value read unchanged is idle or stalled, and one read cannot tell which: a
        /// step the maximum power allows since the last read is taken as idle (the case of a
        /// node at no power, exact below), a larger one as a stall catching up. On this
        /// counter, whose whole range the maximum power covers in a quarter second, a stall's
        /// catch-up may land on a value taken as idle: 2 runs in 100 may still be a wrap off
        /// (37 in 2000; the counter before these rules: 55).
        #[test]
        fn a_stalled_register_catching_up_across_wraps_is_counted_exactly() {
            let mut worst = (0.0_f64, 0);
            let mut off = Vec::new();
            for seed in seeds(2000) {
                let mut rng = Rng(2 << 40 | seed);
                let reads = reads(&mut rng, true);
                let t0 = Instant::now();
                let mut c = WrappingCounter::new(MODULUS, MAX_WATTS / JOULES_PER_UNIT);
                // a read held as a burst shows readers only part of it: the total is exact up
                // to the last read not held, and no more than the last read
                let mut counted_to = 0;
                for (k, &(t, raw, _)) in reads.iter().enumerate() {
                    let step = c.advance(raw, t0 + Duration::from_secs_f64(t));
                    if step != Advance::Burst {
                        counted_to = k;
                    }
                }
                let shown = |k: usize| reads[k].2 - reads[0].2;
                let (least, most) = (shown(counted_to), shown(reads.len() - 1));
                let counted = c.total_units() as f64 * JOULES_PER_UNIT;
                let shown = counted.clamp(least, most);
                let error = (counted - shown) / shown;
                if error.abs() > 0.001 {
                    off.push(format!("seed {seed}: {counted:.1} J for {shown:.1} J"));
                }
                if error.abs() > worst.0.abs() {
                    worst = (error, seed);
                }
            }
            println!("worst: {:+.5}% (seed {})", worst.0 * 100.0, worst.1);
            println!("{} runs of 2000 off by more than 0.1%: {off:#?}", off.len());
            assert!(off.len() <= 40, "{off:#?}");
        }
    }
}
