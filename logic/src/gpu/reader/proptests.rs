//! Outside input never crashes or poisons (issue 28): whatever the vendor libraries
//! answer (a counter at `u64::MAX` or falling back to 0, a power of NaN, negative, or
//! NVML's "not available" `0xFFFFFFFF` mW, errors, a GPU lost), a GPU's figure is finite,
//! not negative, and its energy never falls. Thousands of scripts of reads.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::library::{Device, GpuError, GpuLibrary, MigInstance};
use super::tracker::Tracked;

/// A library answering from a script, one answer per call; out of answers, it fails.
#[derive(Debug, Clone, Default)]
struct Scripted {
    energy: VecDeque<Result<u64, GpuError>>,
    power: VecDeque<Result<f64, GpuError>>,
    busy: VecDeque<Result<Vec<(u32, u64)>, GpuError>>,
    activity: VecDeque<Result<Vec<(u32, u64)>, GpuError>>,
}

fn next<T>(queue: &mut VecDeque<Result<T, GpuError>>) -> Result<T, GpuError> {
    queue
        .pop_front()
        .unwrap_or_else(|| Err(GpuError::Failed("out of script".into())))
}

impl GpuLibrary for Scripted {
    fn vendor(&self) -> &'static str {
        "scripted"
    }
    fn devices(&mut self) -> Result<Vec<Device>, GpuError> {
        Ok(vec![])
    }
    fn energy_uj(&mut self, _: u32) -> Result<u64, GpuError> {
        next(&mut self.energy)
    }
    fn power_w(&mut self, _: u32) -> Result<f64, GpuError> {
        next(&mut self.power)
    }
    fn process_use(&mut self, _: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        next(&mut self.busy)
    }
    fn mig_activity(&mut self, _: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        next(&mut self.activity)
    }
}

fn error() -> impl Strategy<Value = GpuError> {
    prop_oneof![
        4 => Just(GpuError::Failed("timeout".into())),
        2 => Just(GpuError::NotSupported),
        1 => Just(GpuError::Lost),
    ]
}

/// A counter's reads: rising at up to 1 kW, and now and then a glitch (0, `u64::MAX`,
/// NVML's `u64::MAX` mJ saturated to µJ, anything) or an error.
fn energy_script() -> impl Strategy<Value = Vec<Result<u64, GpuError>>> {
    let step = prop_oneof![
        8 => (0u64..1_000_000_000).prop_map(Some),
        1 => Just(None),
    ];
    (
        any::<u64>().prop_map(|s| s % (1 << 50)),
        prop::collection::vec((step, any::<u64>(), 0u8..20, error()), 1..30),
    )
        .prop_map(|(start, steps)| {
            let mut value = start;
            steps
                .into_iter()
                .map(|(step, raw, pick, e)| match (step, pick) {
                    (_, 0) => Err(e),
                    (_, 1) => Ok(u64::MAX),
                    (_, 2) => Ok(0),
                    (_, 3) => Ok(raw),
                    (Some(rise), _) => {
                        value = value.saturating_add(rise);
                        Ok(value)
                    }
                    (None, _) => Ok(value),
                })
                .collect()
        })
}

fn power_script() -> impl Strategy<Value = Vec<Result<f64, GpuError>>> {
    let watts = prop_oneof![
        6 => 0.0f64..1000.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-5.0),
        1 => Just(f64::from(u32::MAX) / 1000.0),
        1 => any::<f64>(),
    ];
    prop::collection::vec(
        prop_oneof![8 => watts.prop_map(Ok), 1 => error().prop_map(Err)],
        0..30,
    )
}

fn use_script() -> impl Strategy<Value = Vec<Result<Vec<(u32, u64)>, GpuError>>> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::collection::vec((any::<u32>(), any::<u64>()), 0..4).prop_map(Ok),
            1 => error().prop_map(Err),
        ],
        0..30,
    )
}

fn instances() -> impl Strategy<Value = Vec<MigInstance>> {
    prop::collection::vec(
        (any::<u32>(), any::<u32>(), any::<u32>(), ".{0,8}").prop_map(|(g, c, sms, uuid)| {
            MigInstance {
                gpu_instance: g % 8,
                compute_instance: c,
                uuid,
                sms,
            }
        }),
        0..70,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn a_gpus_figure_stays_clean(
        energy in energy_script(),
        power in power_script(),
        busy in use_script(),
        activity in use_script(),
        mig in instances(),
        gaps_ms in prop::collection::vec(0u64..5000, 30),
    ) {
        let mut lib = Scripted {
            energy: energy.into(),
            power: power.into(),
            busy: busy.into(),
            activity: activity.into(),
        };
        let device = Device { index: 0, file: Some((195, 0)), name: "GPU-0".into() };
        let mut gpu = Tracked::new("scripted", device, 3, crate::power::Bound::of("EnergyGpuMaxWatts", None, 5_000));
        gpu.partition(mig);
        prop_assert!(gpu.figure().instances.len() <= 64);
        let mut now = Instant::now();
        let mut last = 0.0;
        for gap in gaps_ms {
            now += Duration::from_millis(gap);
            let _ = gpu.sample(&mut lib, now);
            let f = gpu.figure();
            prop_assert!(f.energy_uj.is_finite() && f.energy_uj >= last, "{} after {last}", f.energy_uj);
            prop_assert!(f.watts.is_none_or(|w| w.is_finite() && w >= 0.0), "{:?}", f.watts);
            last = f.energy_uj;
        }
    }
}
