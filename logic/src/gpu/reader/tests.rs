//! The poller and the reader over fake libraries: every GPU with its device file and its
//! processes' use, a hung library, a lost GPU, no library.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::gpu::library::{Device, GpuError, NVIDIA_MAJOR};
use crate::source::Source;

/// A GPU whose counter rises at `watts` in real time, with switches the test flips.
#[derive(Default)]
struct FakeGpu {
    milliwatts: AtomicU64,
    hang: AtomicBool,
    lost: AtomicBool,
    used: AtomicU64,
}

struct FakeLib {
    gpus: Vec<Arc<FakeGpu>>,
    started: Instant,
}

impl GpuLibrary for FakeLib {
    fn vendor(&self) -> &'static str {
        "fake"
    }
    fn devices(&mut self) -> Result<Vec<Device>, GpuError> {
        Ok((0u32..)
            .zip(&self.gpus)
            .map(|(index, _)| Device {
                index,
                // minors in reverse of enumeration order, as on real nodes they may be
                file: Some((NVIDIA_MAJOR, 10 - index)),
                name: format!("GPU-{index}"),
            })
            .collect())
    }
    fn energy_uj(&mut self, index: u32) -> Result<u64, GpuError> {
        let gpu = &self.gpus[index as usize];
        while gpu.hang.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if gpu.lost.load(Ordering::SeqCst) {
            return Err(GpuError::Lost);
        }
        let watts = gpu.milliwatts.load(Ordering::SeqCst) as f64 / 1000.0;
        Ok((watts * self.started.elapsed().as_secs_f64() * 1e6) as u64)
    }
    fn power_w(&mut self, _: u32) -> Result<f64, GpuError> {
        Err(GpuError::NotSupported)
    }
    /// One process per GPU, pid 1000 + index, using it at its milliwatts per call.
    fn process_use(&mut self, index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        let gpu = &self.gpus[index as usize];
        let used = gpu
            .used
            .fetch_add(gpu.milliwatts.load(Ordering::SeqCst), Ordering::SeqCst);
        Ok(vec![(1000 + index, used)])
    }
}

struct Node {
    gpus: Vec<Arc<FakeGpu>>,
}

impl Node {
    fn new(watts: &[u64]) -> Self {
        let gpus = watts
            .iter()
            .map(|w| {
                let gpu = FakeGpu::default();
                gpu.milliwatts.store(w * 1000, Ordering::SeqCst);
                Arc::new(gpu)
            })
            .collect();
        Self { gpus }
    }

    fn reader(&self) -> Polled<GpuPolling> {
        let gpus = self.gpus.clone();
        let started = Instant::now();
        let opener: Opener = Box::new(move || {
            Ok(Box::new(FakeLib {
                gpus: gpus.clone(),
                started,
            }) as Box<dyn GpuLibrary>)
        });
        GpuPolling::polled(vec![opener], &settings()).expect("start")
    }
}

/// A poller at 50 ms, as the GPUs' but faster, and a bound of 5 kW a GPU.
fn settings() -> Settings {
    Settings {
        period: Duration::from_millis(50),
        max_backoff: MAX_BACKOFF,
        max_watts_key: KEY_MAX_WATTS,
        max_watts: None,
        default_max_watts: 5_000,
    }
}

fn first_complete(reader: &mut Polled<GpuPolling>) -> Reading {
    let t0 = Instant::now();
    loop {
        let r = reader.poll(Instant::now());
        if r.complete || t0.elapsed() > Duration::from_secs(5) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn joules_over(reader: &mut Polled<GpuPolling>, secs: f64) -> f64 {
    let start = first_complete(reader).energy_uj;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let end = reader.poll(Instant::now());
    assert!(end.complete, "{end:?}");
    (end.energy_uj - start) as f64 / 1e6
}

/// Every GPU is counted, and each is told with its place, its device file, its own
/// energy and its processes' use, for the ledger to charge the jobs holding it.
#[test]
fn every_gpu_is_read_with_its_device_file_and_its_processes_use() {
    let node = Node::new(&[100, 300]);
    let mut all = node.reader();
    let j = joules_over(&mut all, 0.5);
    assert!(
        (j - 200.0).abs() < 200.0 * 0.05,
        "{j} J for 400 W over 0.5 s"
    );
    let r = all.poll(Instant::now());
    let devices: Vec<(u32, Option<(u32, u32)>)> =
        r.devices.iter().map(|d| (d.position, d.file)).collect();
    // GPU 1 is /dev/nvidia9 (minor 10 - 1)
    assert_eq!(
        devices,
        vec![(0, Some((NVIDIA_MAJOR, 10))), (1, Some((NVIDIA_MAJOR, 9)))]
    );
    let share = r.devices[1].energy_uj as f64 / r.energy_uj as f64;
    assert!((share - 0.75).abs() < 0.02, "GPU 1's share {share}");
    assert_eq!(r.devices[1].busy.len(), 1);
    let (pid, used) = r.devices[1].busy[0];
    assert_eq!(pid, 1001);
    assert!(used > 0 && used % 300_000 == 0, "{used}");
}

#[test]
fn a_hung_library_never_slows_a_read_and_its_gpus_become_unavailable() {
    let node = Node::new(&[200]);
    let mut reader = node.reader();
    assert!(first_complete(&mut reader).complete);
    node.gpus[0].hang.store(true, Ordering::SeqCst);
    // the first read of a hang may wait FRESH_WAIT for the round it is stuck in (once a
    // round is that old, nobody waits for it): measure from the next period on
    std::thread::sleep(Duration::from_millis(150));
    let mut took = Vec::new();
    let t0 = Instant::now();
    let mut last = Reading::default();
    while t0.elapsed() < Duration::from_secs(3) {
        let call = Instant::now();
        last = reader.poll(Instant::now());
        took.push(call.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    // the poller is joined when the reader is dropped: unhang before asserting
    node.gpus[0].hang.store(false, Ordering::SeqCst);
    took.sort();
    // no read waits for the hung call (3 s), nor for a fresh round while the poller is
    // stuck: reads take microseconds, so most stay far below FRESH_WAIT however loaded the
    // machine (its speed is BENCHMARKS.md's, not this test's)
    let (typical, slowest) = (took[took.len() / 2], took[took.len() - 1]);
    assert!(
        typical < FRESH_WAIT / 2 && slowest < Duration::from_secs(1),
        "reads took {typical:?} typically, {slowest:?} at most"
    );
    assert!(!last.complete, "{last:?}");
    assert!(last.problems[0].contains("has not been read"), "{last:?}");
    assert!(first_complete(&mut reader).complete);
}

#[test]
fn a_lost_gpu_stops_counting_while_the_others_go_on() {
    let node = Node::new(&[100, 300]);
    let mut reader = node.reader();
    first_complete(&mut reader);
    node.gpus[1].lost.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    let j = joules_over(&mut reader, 0.5);
    assert!((j - 50.0).abs() < 50.0 * 0.05, "{j} J for 100 W over 0.5 s");
}

#[test]
fn without_a_library_the_reading_is_unavailable() {
    let opener: Opener = Box::new(|| Err("cannot load libnvidia-ml.so.1: not found".into()));
    let mut reader = GpuPolling::polled(vec![opener], &settings()).expect("start");
    std::thread::sleep(Duration::from_millis(100));
    let r = reader.poll(Instant::now());
    assert!(!r.complete && r.energy_uj == 0, "{r:?}");
    assert!(reader.failure().is_some_and(|w| w.contains("not found")));
}
