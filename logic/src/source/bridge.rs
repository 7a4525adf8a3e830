//! The time a slurmd was away, bridged by the hardware's own counts ([`bridge`]).
//!
//! A counter that wraps tells its rise over a gap only modulo its wrap: the exact residue,
//! plus any number of whole wraps. Where the gap is shorter than a wrap at the counter's
//! maximum power, no further wrap was possible and the residue is the rise. Where it is
//! longer (AMD's 32-bit counters of 2^-20 J wrap every 4 096 J: 4.1 s at their 1 000 W
//! bound), each number of wraps is one candidate energy, a wrap's joules apart; the node's
//! power measured before and after the gap tells which of them it drew. Only where exactly
//! one is plausible is it taken; else the gap is estimated (by the ledger, at the last
//! power), as before.

use std::collections::BTreeMap;

use super::HardwareCount;

/// How far the gap's average power may plausibly lie from the powers measured at its two
/// ends, as a fraction of them: from half the lower to one and a half times the higher.
/// Wider, more gaps are left to the estimate (two candidates plausible); narrower, a gap
/// whose power moved further than this between samples would take a wrong candidate, a
/// whole wrap off, where the estimate at the last power is off by as much or more.
const STRAY: f64 = 0.5;
/// The most combinations of wraps weighed (a gap of many wraps of many counters is left to
/// the estimate).
const MOST_CANDIDATES: u64 = 4_096;

/// The node's power measured at a gap's two ends, in watts, where known.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Ends {
    /// The power at the last sample before the gap.
    pub before: Option<f64>,
    /// The power measured just after it.
    pub after: Option<f64>,
}

/// The energy over a gap as the counts tell it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bridged {
    /// No counter could have wrapped more often than its rise says, at its maximum power.
    Counted { uj: u64 },
    /// Counters could have wrapped more often at their maximum power: the counts' residue
    /// with the one number of further wraps (`wraps`, over all counters) whose energy
    /// falls within the powers the gap's ends make plausible (`watts`, the bounds).
    Inferred {
        uj: u64,
        wraps: u64,
        watts: (f64, f64),
    },
}

impl Bridged {
    /// The gap's energy, in microjoules.
    pub(crate) fn uj(self) -> u64 {
        match self {
            Bridged::Counted { uj } | Bridged::Inferred { uj, .. } => uj,
        }
    }
}

/// The energy the counts rose by from `before` to `after`, `secs` apart: the same counters
/// on both sides, none gone back (a reset) or risen beyond its maximum power. Where a
/// counter could have wrapped more often than its rise says, the number of wraps is the
/// one whose energy the powers at the gap's `ends` make plausible. `None` where the counts
/// do not tell it (the ledger then estimates the gap).
pub(crate) fn bridge(
    before: &[HardwareCount],
    after: &[HardwareCount],
    secs: f64,
    ends: Ends,
) -> Option<Bridged> {
    if before.is_empty() || before.len() != after.len() || secs.is_nan() || secs <= 0.0 {
        return None;
    }
    let mut rise_uj = 0u64;
    // for each wrap, how many more wraps its counters could have made in all
    let mut more: BTreeMap<u64, u64> = BTreeMap::new();
    for b in before {
        let a = after.iter().find(|a| a.name == b.name)?;
        let most_uj = b.max_watts * secs * 1e6;
        let rise = match b.wraps_at_uj {
            _ if a.wraps_at_uj != b.wraps_at_uj => return None,
            None => a.value_uj.checked_sub(b.value_uj)?,
            Some(wrap) => {
                if wrap == 0 || a.value_uj >= wrap || b.value_uj >= wrap {
                    return None;
                }
                let rise = (a.value_uj + wrap - b.value_uj) % wrap;
                // whole wraps on top of the residue within the counter's maximum power
                let room = (most_uj - rise as f64) / wrap as f64;
                if room >= 1.0 {
                    let wraps = if room < MOST_CANDIDATES as f64 {
                        room.floor() as u64
                    } else {
                        return None;
                    };
                    *more.entry(wrap).or_default() += wraps;
                }
                rise
            }
        };
        if rise as f64 > most_uj {
            return None;
        }
        rise_uj = rise_uj.checked_add(rise)?;
    }
    if more.is_empty() {
        return Some(Bridged::Counted { uj: rise_uj });
    }
    let watts = plausible(ends)?;
    let (lo, hi) = (watts.0 * secs * 1e6, watts.1 * secs * 1e6);
    let mut found: Option<(u64, u64)> = None;
    for (uj, wraps) in candidates(rise_uj, &more)? {
        if (lo..=hi).contains(&(uj as f64)) {
            match found {
                Some((other, _)) if other != uj => return None,
                _ => found = Some((uj, wraps)),
            }
        }
    }
    let (uj, wraps) = found?;
    Some(Bridged::Inferred { uj, wraps, watts })
}

/// The powers a gap's average may plausibly have been, from the powers at its ends.
fn plausible(ends: Ends) -> Option<(f64, f64)> {
    let known = [ends.before, ends.after]
        .into_iter()
        .flatten()
        .filter(|w| w.is_finite() && *w >= 0.0);
    let (lo, hi) = known.fold(None, |range: Option<(f64, f64)>, w| match range {
        None => Some((w, w)),
        Some((lo, hi)) => Some((lo.min(w), hi.max(w))),
    })?;
    Some((lo * (1.0 - STRAY), hi * (1.0 + STRAY)))
}

/// Every energy the residue `rise_uj` and up to `more[wrap]` further wraps of each wrap can
/// make, with the number of wraps: `None` where they are too many to weigh.
fn candidates(rise_uj: u64, more: &BTreeMap<u64, u64>) -> Option<Vec<(u64, u64)>> {
    let count = more
        .values()
        .try_fold(1u64, |n, m| n.checked_mul(m.checked_add(1)?))?;
    if count > MOST_CANDIDATES {
        return None;
    }
    let mut all = vec![(rise_uj, 0u64)];
    for (&wrap, &most) in more {
        let mut next = Vec::with_capacity(all.len() * (most as usize + 1));
        for &(uj, wraps) in &all {
            for k in 0..=most {
                next.push((uj.checked_add(wrap.checked_mul(k)?)?, wraps + k));
            }
        }
        all = next;
    }
    Some(all)
}

#[cfg(test)]
mod tests;
