//! The screen every power reading passes before it is energy: the [`Bound`] no node's power
//! passes (the admin's key, else the device's stated limit, else the source's default) and
//! the [`Screen`] that drops what is out of it and holds a jump until the next reading
//! tells a step from a spike. Apart from the pollers and the integral so that what counts
//! as a reading, for every source that integrates a power, reads in one place.

use std::collections::VecDeque;
use std::time::Instant;

use crate::config::ConfigError;
use crate::source::Sample;

/// A device's stated limit (a Redfish chassis' `PowerCapacityWatts`, a DCMI power limit) is
/// raised by this much for the bound: a limit is enforced over a correction time, so a
/// reading may pass it briefly, and what the bound must stop is far beyond it (an
/// all-ones 65535 W, 1e12 W).
pub(crate) const STATED_LIMIT_MARGIN: f64 = 1.5;
/// The largest bound a key or a device may state (10 MW): more is a typing error, or a
/// glitch itself.
const MAX_BOUND_WATTS: u32 = 10_000_000;

/// A reading may differ from the last one accepted by this share of it (plus
/// [`JUMP_FLOOR_SHARE`] of the bound) and be counted at once; a larger change is held until
/// the next reading confirms it. A one-reading spike smaller than that is counted: at most
/// this share of the power over one period (40 ms of power a second: 0.1% of a 40 s job
/// sampled every second), the size of ordinary noise.
const JUMP_SHARE: f64 = 0.04;
/// ... plus this share of the bound, so that a node at (nearly) no power does not make
/// every reading a jump.
const JUMP_FLOOR_SHARE: f64 = 0.0005;
/// The levels of this many readings (in bound, accepted or not) are remembered: a jump back
/// to one of them is taken at once. A level that recurs is the node's (a load that swings
/// at about the sampling rate), and holding and dropping each reading of it would
/// under-count it; a glitch that recurs that soon is counted as a step would be.
const RECENT_READINGS: usize = 8;

/// The most power a source's readings may show; a reading above it is no node's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bound {
    pub(crate) watts: f64,
    /// Where the figure comes from, for the log.
    pub(crate) from: String,
}

impl Bound {
    /// The admin's `key` when set (`configured`), else what the device states (raised by
    /// [`STATED_LIMIT_MARGIN`]; a statement of no power, or of more than 10 MW, is
    /// ignored), else the source's `default`.
    pub(crate) fn resolve(
        key: &'static str,
        configured: Option<u32>,
        stated: Option<(f64, String)>,
        default: u32,
    ) -> Bound {
        if let Some(watts) = configured {
            return Bound {
                watts: f64::from(watts),
                from: key.to_string(),
            };
        }
        if let Some((watts, what)) =
            stated.filter(|(w, _)| w.is_finite() && *w > 0.0 && *w <= f64::from(MAX_BOUND_WATTS))
        {
            return Bound {
                watts: watts * STATED_LIMIT_MARGIN,
                from: format!("{what} of {watts} W, times {STATED_LIMIT_MARGIN}"),
            };
        }
        Bound {
            watts: f64::from(default),
            from: format!("the default; {key} sets it"),
        }
    }

    /// The bound `key`'s default alone sets (a source whose devices state no limit).
    pub(crate) fn of(key: &'static str, configured: Option<u32>, default: u32) -> Bound {
        Self::resolve(key, configured, None, default)
    }
}

/// A bound in acct_gather.conf: whole watts, 1 to 10 000 000.
pub(crate) fn parse_max_watts(key: &'static str, v: &str) -> Result<u32, ConfigError> {
    v.parse::<u32>()
        .ok()
        .filter(|w| (1..=MAX_BOUND_WATTS).contains(w))
        .ok_or_else(|| {
            ConfigError::new(
                key,
                v,
                format!("expected whole watts from 1 to {MAX_BOUND_WATTS}"),
            )
        })
}

/// A bound key for `scontrol show config`: the value set, else what applies (`stated`:
/// the source's devices may state a limit).
pub(crate) fn show_max_watts(configured: Option<u32>, default: u32, stated: bool) -> String {
    match (configured, stated) {
        (Some(watts), _) => watts.to_string(),
        (None, true) => {
            format!("(the device's stated limit times {STATED_LIMIT_MARGIN}, else {default})")
        }
        (None, false) => default.to_string(),
    }
}

/// Readings being dropped, logged once when the first is and once (if more followed) when
/// a reading is accepted again.
#[derive(Debug, Clone)]
struct Dropping {
    since: Instant,
    count: u32,
}

/// Judges power readings before they are energy: what a [`Screen::judge`] returns is
/// what to count, in order; what it holds or drops is bridged by the trapezoid between
/// the readings around it, as a gap is.
///
/// - A reading no node can draw (above the [`Bound`], negative, not a number) is dropped.
/// - A reading far from the last accepted (see `JUMP_SHARE`) is held, as
///   `crate::counter` holds a burst, and the next reading decides: one nearer to it than
///   to the last accepted confirms a real step (both are counted, so the step costs
///   nothing but a period's delay); one nearer the last accepted says it was a spike,
///   dropped. A jump back to the level of one of the last few readings is taken at once
///   (see `RECENT_READINGS`).
/// - The first reading has nothing to be judged by: it is counted when in bound.
///
/// So a glitch out of bound costs nothing however long it lasts (at constant power; a
/// change of power under it is bridged as across a gap), and one in bound costs nothing
/// when it lasts one reading; two readings in bound that agree are a step.
#[derive(Debug, Clone)]
pub(crate) struct Screen {
    bound: Bound,
    /// Names what is read, for the log ("power", "NVIDIA GPU 0 (...)").
    what: String,
    last: Option<Sample>,
    held: Option<Sample>,
    /// The power of the last readings in bound, newest first.
    recent: VecDeque<f64>,
    dropping: Option<Dropping>,
}

impl Screen {
    pub(crate) fn new(bound: Bound, what: impl Into<String>) -> Self {
        Self {
            bound,
            what: what.into(),
            last: None,
            held: None,
            recent: VecDeque::with_capacity(RECENT_READINGS + 1),
            dropping: None,
        }
    }

    pub(crate) fn bound(&self) -> &Bound {
        &self.bound
    }

    /// A new bound (a sensor connected again, stating another limit); what was accepted
    /// stays the reference.
    pub(crate) fn set_bound(&mut self, bound: Bound) {
        self.bound = bound;
    }

    /// The last reading accepted.
    #[cfg(test)]
    pub(crate) fn last(&self) -> Option<&Sample> {
        self.last.as_ref()
    }

    /// The reading held until the next one decides.
    pub(crate) fn held(&self) -> Option<&Sample> {
        self.held.as_ref()
    }

    /// The power to show now (CurrentWatts, and what a figure is brought forward at): the
    /// last reading accepted, or the held one where it is lower. Until the next reading it
    /// is unknown which is the node's, and a figure brought forward at the higher stays
    /// counted (what is reported never goes back): a fall at a job's end, or a spike.
    pub(crate) fn power(&self) -> Option<f64> {
        lower(self.last.map(|s| s.watts), self.held.map(|s| s.watts))
    }

    /// The readings to count now, in order (none, the one given, or a held one and it).
    pub(crate) fn judge(&mut self, sample: Sample) -> Vec<Sample> {
        let watts = sample.watts;
        if !(watts.is_finite() && (0.0..=self.bound.watts).contains(&watts)) {
            let why = if watts.is_nan() {
                "not a number".to_string()
            } else if watts < 0.0 {
                "negative".to_string()
            } else {
                format!(
                    "above the {:.0} W no reading may pass ({})",
                    self.bound.watts, self.bound.from
                )
            };
            self.drop_reading(sample.at, &format!("a reading of {watts} W is {why}"));
            return Vec::new();
        }
        let newest = self.held.or(self.last).map(|s| s.at);
        if newest.is_some_and(|at| sample.at <= at) {
            return Vec::new(); // the same reading again, or out of order
        }
        let Some(last) = self.last else {
            self.remember(watts);
            return vec![self.accept(sample)];
        };
        let mut accepted = Vec::new();
        if let Some(held) = self.held.take() {
            if nearer(watts, held.watts, last.watts) {
                accepted.push(self.accept(held));
            } else {
                self.drop_reading(
                    held.at,
                    &format!(
                        "a reading of {} W between {} W and {watts} W is a spike the next \
                         reading does not confirm",
                        held.watts, last.watts
                    ),
                );
            }
        }
        let last = self.last.unwrap_or(last);
        let recurring = self.recent.iter().any(|&level| !self.far(level, watts));
        if self.far(last.watts, watts) && !recurring {
            self.held = Some(sample);
        } else {
            accepted.push(self.accept(sample));
        }
        self.remember(watts);
        accepted
    }

    fn remember(&mut self, watts: f64) {
        self.recent.push_front(watts);
        self.recent.truncate(RECENT_READINGS);
    }

    /// Whether `watts` is too far from `from` to count before the next reading.
    fn far(&self, from: f64, watts: f64) -> bool {
        (watts - from).abs() > JUMP_SHARE * from + JUMP_FLOOR_SHARE * self.bound.watts
    }

    fn accept(&mut self, sample: Sample) -> Sample {
        if let Some(d) = self.dropping.take()
            && d.count > 1
        {
            log::info!(
                "{}: plausible readings again ({:.0} W) after {} dropped over {:.1} s",
                self.what,
                sample.watts,
                d.count,
                sample.at.saturating_duration_since(d.since).as_secs_f64()
            );
        }
        self.last = Some(sample);
        sample
    }

    fn drop_reading(&mut self, at: Instant, why: &str) {
        match &mut self.dropping {
            Some(d) => d.count += 1,
            None => {
                log::warn!(
                    "{}: {why}: not counted; the energy over it is bridged from the readings \
                     around it",
                    self.what
                );
                self.dropping = Some(Dropping {
                    since: at,
                    count: 1,
                });
            }
        }
    }
}

/// `last`, or `held` where it is lower.
pub(super) fn lower(last: Option<f64>, held: Option<f64>) -> Option<f64> {
    last.map(|w| held.map_or(w, |h| h.min(w)))
}

/// Whether `watts` is nearer `a` than `b`.
fn nearer(watts: f64, a: f64, b: f64) -> bool {
    (watts - a).abs() < (watts - b).abs()
}
