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
