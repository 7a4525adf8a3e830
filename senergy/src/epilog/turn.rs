//! When each node of a job writes its record: in turn. Every node's Epilog starts when
//! the job ends, and all merge into one row of slurmdbd's; writes at the same moment undo
//! each other (each read the row before the other's write), and a thousand nodes retrying
//! at random would take minutes and thousands of writes. The job's nodes share a clock
//! (Slurm requires it: its credentials expire) and a node list, so each takes the turn its
//! place in the list gives it, in a cycle of turns that repeats on that clock: one write
//! each, none at the same moment, with no word between the nodes. Pure: no clock, no Slurm.

use std::time::Duration;

/// A node's turn: a read, a merge and a write of the row through slurmdbd, on a
/// connection made before it. Each of slurmdbd's answers waits out a delayed
/// acknowledgement (about 40 ms: a message goes as its length, then its body) while
/// slurmdbd's own work is a few ms: 256 nodes wrote in turns of this length, one write
/// each (BENCHMARKS.md, "A job of many nodes"), with room for clocks some milliseconds
/// apart and a busier slurmdbd.
pub const TURN: Duration = Duration::from_millis(300);

/// The turns a name the job's node list lacks is spread over (`senergy record J --node N`
/// by hand, or as a test stands in for many nodes): strangers to the list take turns their
/// names pick among at least this many, not all the list's one.
const STRANGERS: usize = 64;

/// Node `index` of the job's `count` nodes: its turn in the cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Turn {
    pub index: usize,
    pub count: usize,
}

impl Turn {
    /// Node `node`'s turn among `nodes` (the job's node list, in order); a node not in
    /// the list (a name given by hand) takes a turn its name picks among [`STRANGERS`] at
    /// least.
    pub fn of(node: &str, nodes: &[String]) -> Turn {
        if let Some(index) = nodes.iter().position(|n| n == node) {
            return Turn {
                index,
                count: nodes.len(),
            };
        }
        let count = nodes.len().max(STRANGERS);
        // FNV-1a: the same turn for the same name on every run
        let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Turn {
            index: (hash % count as u64) as usize,
            count,
        }
    }

    /// How long the whole cycle of turns lasts.
    pub fn cycle(&self) -> Duration {
        TURN * self.count.max(1) as u32
    }

    /// How long to wait, at unix time `now` (seconds), for this node's next turn to begin:
    /// zero within the first half of its turn (a write begun then ends within it), and
    /// for a job of one node.
    pub fn wait(&self, now: f64) -> Duration {
        if self.count <= 1 {
            return Duration::ZERO;
        }
        let turn = TURN.as_micros() as u64;
        let cycle = self.cycle().as_micros() as u64;
        let now = (now.max(0.0) * 1e6) as u64;
        let start = now - now % cycle + self.index as u64 * turn;
        let next = match now.checked_sub(start) {
            // this cycle's turn, not yet begun
            None => start,
            Some(into) if into <= turn / 2 => now,
            Some(_) => start + cycle,
        };
        Duration::from_micros(next - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|k| format!("nid{k:06}")).collect()
    }

    #[test]
    fn a_thousand_nodes_take_a_turn_each_within_the_cycle() {
        let nodes = names(1024);
        let turns: Vec<Turn> = nodes.iter().map(|n| Turn::of(n, &nodes)).collect();
        assert_eq!(
            turns[5],
            Turn {
                index: 5,
                count: 1024
            }
        );
        assert_eq!(turns[0].cycle(), TURN * 1024);
        // all Epilogs begin at the same moment: each writes at its own time, a turn apart
        // (the node whose turn it is at once, with at least half its turn left), and every
        // one within a cycle
        let now = 1_800_000_000.123_456;
        let mut begins: Vec<Duration> = turns.iter().map(|t| t.wait(now)).collect();
        assert!(begins.iter().all(|b| *b < turns[0].cycle()));
        begins.sort();
        let gaps: Vec<Duration> = begins.windows(2).map(|p| p[1] - p[0]).collect();
        let tolerance = Duration::from_micros(1);
        assert!(gaps.iter().all(|g| *g + tolerance >= TURN / 2), "{gaps:?}");
        let short = gaps.iter().filter(|g| **g + tolerance < TURN).count();
        assert!(short <= 1, "{short} turns shorter than a turn");
    }

    #[test]
    fn a_node_writes_at_once_early_in_its_turn_else_waits_a_cycle() {
        let nodes = names(4);
        let turn = Turn::of("nid000002", &nodes);
        let cycle = turn.cycle().as_secs_f64();
        let length = TURN.as_secs_f64();
        let begins = 1000.0 * cycle + 2.0 * length;
        assert_eq!(turn.wait(begins), Duration::ZERO);
        assert_eq!(turn.wait(begins + length * 0.4), Duration::ZERO);
        let late = turn.wait(begins + length * 0.6).as_secs_f64();
        assert!((late - (cycle - length * 0.6)).abs() < 1e-5, "{late}");
        let before = turn.wait(begins - 0.25).as_secs_f64();
        assert!((before - 0.25).abs() < 1e-5, "{before}");
    }

    #[test]
    fn one_node_writes_at_once_and_a_stranger_takes_a_turn_among_them() {
        for now in [12.34, 12.2, 0.0] {
            assert_eq!(Turn::of("nid000000", &names(1)).wait(now), Duration::ZERO);
        }
        assert_eq!(Turn::of("nid000000", &names(1)).count, 1);
        // a name the list lacks: a turn among theirs, or STRANGERS, the same each time
        let stranger = Turn::of("login1", &names(100));
        assert!(stranger.index < 100);
        assert_eq!(stranger, Turn::of("login1", &names(100)));
        assert_eq!(Turn::of("s01", &names(1)).count, STRANGERS);
        assert_eq!(Turn::of("s01", &[]).count, STRANGERS);
        // 64 strangers to a one-node list spread over the turns
        let picked: std::collections::BTreeSet<usize> = (0..64)
            .map(|k| Turn::of(&format!("s{k:02}"), &names(1)).index)
            .collect();
        assert!(picked.len() > 32, "{} turns of 64", picked.len());
    }
}
