//! Outside input never crashes or poisons (issue 28): whatever utilization NVML reports
//! for a process (a percent, or `0xFFFFFFFF`, NVML's "not available", or anything), and
//! however its clock moves, a process's use of the GPU grows by at most all of the GPU over
//! the time it stands for, and never wraps.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn sm_util() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0u32..=100, 1 => Just(u32::MAX), 1 => any::<u32>()]
}

/// A read: how long after the previous one (back, where the clock stepped back), and the
/// processes it reported, each once.
fn read() -> impl Strategy<Value = (i64, BTreeMap<u32, u32>)> {
    (
        prop_oneof![8 => 0i64..3_000_000, 1 => -5_000_000i64..0, 1 => 0i64..100_000_000],
        prop::collection::btree_map(0u32..6, sm_util(), 0..5),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn a_processs_use_is_at_most_the_whole_gpu(reads in prop::collection::vec(read(), 1..40)) {
        let mut state = ProcessUse::default();
        let mut now: u64 = 1_795_650_621_000_000;
        for (step, samples) in reads {
            now = now.saturating_add_signed(step);
            let before: HashMap<u32, u64> = state.busy.iter().map(|(p, b)| (*p, b.0)).collect();
            let samples: Vec<_> = samples
                .into_iter()
                .map(|(pid, sm_util)| NvmlProcessUtilizationSample { pid, sm_util, ..Default::default() })
                .collect();
            state.add(now, &samples);
            for (pid, (busy, _)) in &state.busy {
                let was = before.get(pid).copied().unwrap_or(0);
                prop_assert!(*busy >= was, "pid {pid}: {busy} after {was}");
                // percent-milliseconds: 100% over the longest span a read stands for
                prop_assert!(busy - was <= 100 * MAX_READ_SPAN_US / 1000, "pid {pid}: +{}", busy - was);
            }
        }
    }
}
