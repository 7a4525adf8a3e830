//! The tally's arithmetic from answers as values: no file, no /proc, no slurmd.

use super::*;
use crate::ledger::{Account, Part};

/// The unix time of these tests' calls.
const NOW: f64 = 1_800_000_000.0;
/// The ledger's epoch: begun 100 s before.
const EPOCH: u64 = ((NOW - 100.0) * 1e6) as u64;

fn account(joules: f64, watts: f64, since: f64) -> Account {
    Account {
        joules,
        watts,
        since,
    }
}

/// slurmd's answer sampled at `sampled_at`: the node at `node_j` and 100 W, the step's
/// share `step` where the ledger has one, split by `shares`.
fn answer(sampled_at: f64, node_j: f64, step: Option<Account>, shares: Option<bool>) -> Answer {
    Answer {
        epoch: EPOCH,
        sampled_at,
        shares,
        node: account(node_j, 100.0, NOW - 100.0),
        parts: vec![Part {
            label: "package-0".into(),
            joules: node_j / 2.0,
            watts: Some(50.0),
        }],
        step,
    }
}

fn joules(tally: &Tally) -> f64 {
    tally.total_uj() as f64 / 1e6
}

/// In node mode a step's figure is the node's energy since its first read, brought
/// forward to the call at the node's power (at most a ledger's period), never falling
/// below a figure the ledger published; its parts are the node's.
#[test]
fn node_mode_counts_the_node_since_the_first_read_brought_forward() {
    let mut tally = Tally::new(false);
    assert!(!tally.counted());
    assert_eq!(
        tally.count(&answer(NOW, 5_000.0, None, None), NOW),
        Ok(100.0)
    );
    assert_eq!(
        joules(&tally),
        0.0,
        "the node's energy at its first read is its start"
    );
    // 10 s later, 1 000 J more, read half a second after the sample
    let later = answer(NOW + 10.0, 6_000.0, None, None);
    assert_eq!(tally.count(&later, NOW + 10.5), Ok(100.0));
    assert!(
        (joules(&tally) - 1_050.0).abs() < 1e-3,
        "{}",
        joules(&tally)
    );
    // read 5 s after the same sample: brought forward one period at most
    tally.count(&later, NOW + 15.0).expect("counted");
    assert!((joules(&tally) - (1_000.0 + 100.0 * LEDGER_PERIOD.as_secs_f64())).abs() < 1e-3);
    assert_eq!(tally.parts().len(), 1);
    assert_eq!(tally.parts()[0].energy_uj, Some(3_000_000_000));
    // stacked: the ledger's figure as it is
    let mut stacked = Tally::new(false);
    stacked.stacked();
    stacked
        .count(&answer(NOW, 5_000.0, None, None), NOW)
        .expect("counted");
    stacked.count(&later, NOW + 10.5).expect("counted");
    assert_eq!(joules(&stacked), 1_000.0);
}

/// A requeued job's new slurmstepd finds its step's name in the ledger from the run before
/// (begun well before this process): it counts none of it; once the ledger holds this
/// run's step, it counts that.
#[test]
fn a_step_counts_only_its_own_run_of_its_name() {
    let mut tally = Tally::new(true);
    tally.started(Some(NOW - 5.0));
    let before = answer(
        NOW,
        5_000.0,
        Some(account(3_000.0, 100.0, NOW - 35.0)),
        None,
    );
    assert_eq!(tally.count(&before, NOW), Ok(0.0));
    assert_eq!(joules(&tally), 0.0, "nothing of the run before");
    let this_run = answer(
        NOW + 1.0,
        5_100.0,
        Some(account(30.0, 60.0, NOW - 4.0)),
        None,
    );
    assert_eq!(tally.count(&this_run, NOW + 1.0), Ok(60.0));
    assert_eq!(joules(&tally), 30.0);
}

/// slurmd gone (its ledger older than its samples ever leave it): the step keeps what the
/// ledger last published, not brought forward, and says how old the ledger is.
#[test]
fn a_stale_ledger_keeps_the_last_published_figure() {
    let mut tally = Tally::new(true);
    let on_time = answer(NOW, 5_000.0, Some(account(200.0, 100.0, NOW - 2.0)), None);
    tally.count(&on_time, NOW + 0.5).expect("counted");
    assert!(
        (joules(&tally) - 250.0).abs() < 1e-3,
        "brought forward half a second"
    );
    let last = answer(
        NOW + 1.0,
        5_100.0,
        Some(account(300.0, 100.0, NOW - 2.0)),
        None,
    );
    let stale_at = NOW + 1.0 + stale_after(LEDGER_PERIOD).as_secs_f64() + 1.0;
    let Err(Stale { age }) = tally.count(&last, stale_at) else {
        panic!("a stale ledger is no figure");
    };
    assert!((age - (stale_at - NOW - 1.0)).abs() < 1e-6);
    assert_eq!(joules(&tally), 300.0, "its last sample, as it is");
}

/// slurmd began a new ledger (its epoch changed): the step keeps what it counted, adds the
/// time between at its last power (at most [`MAX_GAP`]), and goes on from the new
/// ledger's start.
#[test]
fn a_new_ledger_carries_the_figure_and_the_time_between() {
    let mut tally = Tally::new(true);
    tally
        .count(
            &answer(NOW, 5_000.0, Some(account(200.0, 100.0, NOW - 2.0)), None),
            NOW,
        )
        .expect("counted");
    let begun = NOW + 10.0;
    let anew = Answer {
        epoch: (begun * 1e6) as u64,
        ..answer(begun + 1.0, 100.0, Some(account(50.0, 100.0, begun)), None)
    };
    tally.count(&anew, begun + 1.0).expect("counted");
    assert!(
        (joules(&tally) - (200.0 + 1_000.0 + 50.0)).abs() < 1e-3,
        "{}",
        joules(&tally)
    );
}

/// The step reads its figure as slurmd splits: a step configured for the node's energy
/// whose slurmd gives shares takes its share, continued from the figure it gave.
#[test]
fn a_step_follows_slurmds_split() {
    let mut tally = Tally::new(false);
    let node_mode = answer(
        NOW,
        5_000.0,
        Some(account(100.0, 40.0, NOW - 2.0)),
        Some(false),
    );
    tally.count(&node_mode, NOW).expect("counted");
    let node_later = answer(
        NOW + 1.0,
        5_100.0,
        Some(account(140.0, 40.0, NOW - 2.0)),
        Some(false),
    );
    tally.count(&node_later, NOW + 1.0).expect("counted");
    assert_eq!(joules(&tally), 100.0, "the node's 100 J since it began");
    assert!(!tally.shared());
    let shares = answer(
        NOW + 2.0,
        5_200.0,
        Some(account(180.0, 40.0, NOW - 2.0)),
        Some(true),
    );
    assert_eq!(tally.count(&shares, NOW + 2.0), Ok(40.0));
    assert!(tally.shared());
    assert_eq!(joules(&tally), 180.0, "its own account from the switch on");
    let more = answer(
        NOW + 3.0,
        5_300.0,
        Some(account(220.0, 40.0, NOW - 2.0)),
        Some(true),
    );
    tally.count(&more, NOW + 3.0).expect("counted");
    assert_eq!(joules(&tally), 220.0);
}

/// A node-mode answer of the ledger begun at `epoch` (unix time), sampled at `sampled_at`:
/// the node at `joules` and `watts`.
fn node_answer(epoch: f64, sampled_at: f64, joules: f64, watts: f64) -> Answer {
    Answer {
        epoch: (epoch * 1e6) as u64,
        sampled_at,
        shares: None,
        node: account(joules, watts, epoch),
        parts: Vec::new(),
        step: None,
    }
}

/// A step's figure is brought up to the call at the last power the ledger published,
/// unless energy plugins are stacked: Slurm then adds up each plugin's answers, and what
/// was brought forward at a power that fell would stay counted.
#[test]
fn a_stacked_step_takes_the_ledgers_figure_as_it_is() {
    let t = 1_000_000.0;
    let mut alone = Tally::new(false);
    let mut stacked = Tally::new(false);
    stacked.stacked();
    for tally in [&mut alone, &mut stacked] {
        assert_eq!(
            tally.count(&node_answer(t - 100.0, t, 1000.0, 0.0), t),
            Ok(0.0)
        );
    }
    // sampled at 200 W, read half a second later
    let sampled = node_answer(t - 100.0, t + 1.0, 1200.0, 200.0);
    assert_eq!(alone.count(&sampled, t + 1.5), Ok(200.0));
    assert_eq!(stacked.count(&sampled, t + 1.5), Ok(200.0));
    assert_eq!(alone.total_uj(), 300_000_000);
    assert_eq!(stacked.total_uj(), 200_000_000);
}

/// A step that ends after slurmd died takes slurmd's last sample as it is (not brought
/// forward at the last power) when that came after the step's last read, and keeps its
/// figure when it did not.
#[test]
fn a_step_ending_after_slurmd_died_takes_its_last_sample() {
    let t = 1_000_000.0;
    let mut tally = Tally::new(false);
    let at = |sampled_at, joules| node_answer(t - 100.0, sampled_at, joules, 300.0);
    assert_eq!(tally.count(&at(t, 1000.0), t), Ok(300.0));
    assert_eq!(tally.count(&at(t + 0.5, 1150.0), t + 0.5), Ok(300.0));
    assert_eq!(tally.total_uj(), 150_000_000);
    // slurmd's last sample, 0.4 s after the step's last read; slurmd died then
    assert!(
        tally.count(&at(t + 0.9, 1270.0), t + 20.0).is_err(),
        "stale"
    );
    assert_eq!(
        tally.total_uj(),
        270_000_000,
        "its last sample, not 19 s more at 300 W"
    );
    // an older sample (a ledger restored from elsewhere) changes nothing
    assert!(
        tally.count(&at(t + 0.2, 5000.0), t + 30.0).is_err(),
        "stale"
    );
    assert_eq!(tally.total_uj(), 270_000_000);
}
