use super::*;

fn count(name: &str, value_uj: u64, wraps_at_uj: Option<u64>) -> HardwareCount {
    HardwareCount {
        name: name.into(),
        value_uj,
        wraps_at_uj,
        max_watts: 500.0,
    }
}

const UNKNOWN: Ends = Ends {
    before: None,
    after: None,
};

/// A gap is bridged by the counters' rise, across a wrap, only where no other number of
/// wraps could explain it (no power known here), and never across a reset or a rise
/// beyond the maximum power.
#[test]
fn a_gap_is_bridged_only_where_the_counts_alone_tell_the_energy() {
    let wrap = Some(65_536_000_000); // 65 536 J: 131 s at 500 W
    let before = [
        count("package0", 65_000_000_000, wrap),
        count("dram0", 10, None),
    ];
    // package0 wrapped: 1 536 J, dram0 rose 2 J, in 8 s
    let after = [
        count("dram0", 2_000_010, None),
        count("package0", 1_000_000_000, wrap),
    ];
    assert_eq!(
        bridge(&before, &after, 8.0, UNKNOWN),
        Some(Bridged::Counted { uj: 1_538_000_000 })
    );
    // 140 s at up to 500 W could hold another wrap, and no power says whether it did
    assert_eq!(bridge(&before, &after, 140.0, UNKNOWN), None);
    // more than 500 W over 2 s: not energy
    assert_eq!(bridge(&before, &after, 2.0, UNKNOWN), None);
    // a count gone back: the counter was reset
    let reset = [
        count("dram0", 5, None),
        count("package0", 1_000_000_000, wrap),
    ];
    assert_eq!(bridge(&before, &reset, 8.0, UNKNOWN), None);
    // another counter, or none: nothing to bridge with
    let other = [
        count("dram1", 2_000_010, None),
        count("package0", 1_000_000_000, wrap),
    ];
    assert_eq!(bridge(&before, &other, 8.0, UNKNOWN), None);
    assert_eq!(bridge(&before, &after[..1], 8.0, UNKNOWN), None);
    assert_eq!(bridge(&[], &[], 8.0, UNKNOWN), None);
    assert_eq!(bridge(&before, &after, 0.0, UNKNOWN), None);
    assert_eq!(bridge(&before, &after, f64::NAN, UNKNOWN), None);
}

/// AMD's counters: 2^32 units of 2^-20 J, a wrap every 4 096 J, at most 1 000 W each: a
/// "window" (a wrap at that power) is 4.096 s.
const AMD_WRAP: u64 = 4_096_000_000;
const WINDOW_SECS: f64 = 4.096;

/// What the ledger does with a gap.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// The counts alone tell it.
    Counted,
    /// The one plausible number of wraps, `wraps` of them.
    Inferred(u64),
    /// Two or more plausible: estimated.
    Estimated,
}

/// A node of `shares` packages drawing `before` W until a gap of `windows` wrap windows,
/// `during` (`(fraction of the gap, W)` in turn) in it and `after` W after: the counters
/// advanced by the true energy, and what [`bridge`] makes of them, against the truth.
fn gap(shares: &[f64], before: f64, during: &[(f64, f64)], after: f64, windows: f64) -> Outcome {
    let secs = windows * WINDOW_SECS;
    let truth_j: f64 = during.iter().map(|(part, w)| part * secs * w).sum();
    // the counters start anywhere in their range
    let starts = [3_000_000_000u64, 100_000_000, 4_095_000_000];
    let mut counts = (Vec::new(), Vec::new());
    let mut truth_uj = 0;
    for (k, share) in shares.iter().enumerate() {
        let uj = (truth_j * share * 1e6).round() as u64;
        truth_uj += uj;
        let name = format!("package{k}");
        let at = |value_uj| HardwareCount {
            name: name.clone(),
            value_uj,
            wraps_at_uj: Some(AMD_WRAP),
            max_watts: 1_000.0,
        };
        counts.0.push(at(starts[k]));
        counts.1.push(at((starts[k] + uj) % AMD_WRAP));
    }
    let ends = Ends {
        before: Some(before),
        after: Some(after),
    };
    match bridge(&counts.0, &counts.1, secs, ends) {
        None => Outcome::Estimated,
        Some(Bridged::Counted { uj }) => {
            assert_eq!(uj, truth_uj, "{windows} windows: counted");
            Outcome::Counted
        }
        Some(Bridged::Inferred { uj, wraps, .. }) => {
            assert_eq!(uj, truth_uj, "{windows} windows: inferred");
            Outcome::Inferred(wraps)
        }
    }
}

/// Issue 53's case: two packages (60% and 40%), 150 W before the gap and 300 W after; in
/// it 150 W for its first 40% and 300 W after (240 W on average). Each further wrap adds
/// 4 096 J, 1 000 W / `windows` on the gap's average; the powers at its ends make 75 W to
/// 450 W plausible. Up to one window no counter can have wrapped more than its rise says;
/// up to 4.5 windows the next candidate lies above 450 W (4.5: 462 W); at 5 windows it is
/// 440 W, plausible too: estimated. Before, every gap of a window or more was estimated at
/// the last power (150 W: −37.5% of the gap).
#[test]
fn a_gap_of_half_a_window_to_five_is_bridged_where_one_number_of_wraps_is_plausible() {
    let doubling = [(0.4, 150.0), (0.6, 300.0)];
    let outcomes: Vec<(f64, Outcome)> = (1..=10)
        .map(|half| {
            let windows = f64::from(half) / 2.0;
            (windows, gap(&[0.6, 0.4], 150.0, &doubling, 300.0, windows))
        })
        .collect();
    let expected: Vec<(f64, Outcome)> = [
        (0.5, Outcome::Counted),
        (1.0, Outcome::Counted),
        (1.5, Outcome::Inferred(0)),
        (2.0, Outcome::Inferred(0)),
        (2.5, Outcome::Inferred(0)),
        (3.0, Outcome::Inferred(0)),
        (3.5, Outcome::Inferred(0)),
        (4.0, Outcome::Inferred(0)),
        (4.5, Outcome::Inferred(0)),
        (5.0, Outcome::Estimated),
    ]
    .to_vec();
    assert_eq!(outcomes, expected);
}

/// One package at 500 W before the gap and 700 W after, 620 W on average in it: its
/// energy is past a whole wrap from two windows on, where the residue alone is a wrap
/// short. Plausible: 250 W to 1 050 W. Up to 1.5 windows the residue is too large for
/// another wrap within 1 000 W; at 2 windows the residue alone is 120 W and one wrap more
/// 620 W (taken); at 2.5, 220 W and 620 W (two more would be 1 020 W, beyond the counter's
/// 1 000 W); at 3, 287 W, 620 W and 953 W: estimated.
#[test]
fn a_gap_holding_whole_wraps_is_bridged_with_them_where_the_powers_tell_how_many() {
    let rising = [(0.4, 500.0), (0.6, 700.0)];
    let outcomes: Vec<(f64, Outcome)> = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
        .into_iter()
        .map(|windows| (windows, gap(&[1.0], 500.0, &rising, 700.0, windows)))
        .collect();
    assert_eq!(
        outcomes,
        [
            (0.5, Outcome::Counted),
            (1.0, Outcome::Counted),
            (1.5, Outcome::Counted),
            (2.0, Outcome::Inferred(1)),
            (2.5, Outcome::Inferred(1)),
            (3.0, Outcome::Estimated),
        ]
    );
}

/// A power at one end only: plausible within half of it either way. None: no number of
/// wraps is taken. A power the counts cannot match (the gap's power left the plausible
/// range): estimated, not the nearest candidate.
#[test]
fn the_powers_known_decide_and_a_gap_they_cannot_explain_is_estimated() {
    let secs = 3.0 * WINDOW_SECS;
    let at = |value_uj| {
        [HardwareCount {
            name: "package0".into(),
            value_uj,
            wraps_at_uj: Some(AMD_WRAP),
            max_watts: 1_000.0,
        }]
    };
    // 200 W over 12.288 s: 2 457.6 J
    let (before, after) = (at(1_000_000_000), at(3_457_600_000));
    let only_before = Ends {
        before: Some(200.0),
        after: None,
    };
    assert_eq!(
        bridge(&before, &after, secs, only_before).map(Bridged::uj),
        Some(2_457_600_000)
    );
    assert_eq!(bridge(&before, &after, secs, UNKNOWN), None);
    // the candidates are 200 W, 533 W and 867 W: 450 W at both ends makes 225 W to 675 W
    // plausible, 600 W 300 W to 900 W
    let busy = |watts| Ends {
        before: Some(watts),
        after: Some(watts),
    };
    assert_eq!(
        bridge(&before, &after, secs, busy(450.0)),
        Some(Bridged::Inferred {
            uj: 2_457_600_000 + AMD_WRAP,
            wraps: 1,
            watts: (225.0, 675.0)
        })
    );
    assert_eq!(bridge(&before, &after, secs, busy(600.0)), None);
    // 40 W at both ends: 20 W to 60 W; no candidate
    let idle = Ends {
        before: Some(40.0),
        after: Some(40.0),
    };
    assert_eq!(bridge(&before, &after, secs, idle), None);
    // a power that is no power
    let bogus = Ends {
        before: Some(f64::NAN),
        after: Some(-5.0),
    };
    assert_eq!(bridge(&before, &after, secs, bogus), None);
}
