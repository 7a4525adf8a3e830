//! The poller and the reader over fake libraries: per-process GPU selection, a hung
//! library, a lost GPU, no library.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

/// A GPU whose counter rises at `watts` in real time, with switches the test flips.
#[derive(Default)]
struct FakeGpu {
    milliwatts: AtomicU64,
    hang: AtomicBool,
    lost: AtomicBool,
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
}

/// Device files `(major, minor)` a process may open; `None`: all.
type Allowed = Option<Vec<(u32, u32)>>;

/// What the fake process may open, changed by the test.
#[derive(Clone, Default)]
struct FakeAccess(Arc<Mutex<Allowed>>);

impl Access for FakeAccess {
    fn constraints(&self) -> Option<String> {
        Some(format!("{:?}", self.0.lock().expect("lock")))
    }
    fn allows(&self, file: Option<(u32, u32)>) -> bool {
        match (&*self.0.lock().expect("lock"), file) {
            (None, _) => true,
            (Some(files), Some(file)) => files.contains(&file),
            (Some(_), None) => false,
        }
    }
}

struct Node {
    gpus: Vec<Arc<FakeGpu>>,
    access: FakeAccess,
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
        Self {
            gpus,
            access: FakeAccess::default(),
        }
    }

    /// Puts the process into a devices cgroup allowing only `files`.
    fn constrain(&self, files: &[(u32, u32)]) {
        *self.access.0.lock().expect("lock") = Some(files.to_vec());
    }

    fn reader(&self) -> GpuReader {
        let gpus = self.gpus.clone();
        let started = Instant::now();
        let opener: Opener = Box::new(move || {
            Ok(Box::new(FakeLib {
                gpus: gpus.clone(),
                started,
            }) as Box<dyn GpuLibrary>)
        });
        GpuReader::start(
            vec![opener],
            Box::new(self.access.clone()),
            Duration::from_millis(50),
        )
        .expect("start")
    }
}

fn first_complete(reader: &mut GpuReader) -> Reading {
    let t0 = Instant::now();
    loop {
        let r = reader.read(Instant::now());
        if r.complete || t0.elapsed() > Duration::from_secs(5) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn joules_over(reader: &mut GpuReader, secs: f64) -> f64 {
    let start = first_complete(reader).energy_uj;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let end = reader.read(Instant::now());
    assert!(end.complete, "{end:?}");
    (end.energy_uj - start) as f64 / 1e6
}

#[test]
fn an_unconstrained_process_counts_every_gpu_a_constrained_one_only_its_own() {
    let node = Node::new(&[100, 300]);
    let mut all = node.reader();
    let j = joules_over(&mut all, 0.5);
    assert!(
        (j - 200.0).abs() < 200.0 * 0.05,
        "{j} J for 400 W over 0.5 s"
    );
    // GPU 1 is /dev/nvidia9 (minor 10 - 1)
    node.constrain(&[(1, 3), (NVIDIA_MAJOR, 9)]);
    // the process moves into its step's cgroup after it started reading
    std::thread::sleep(Duration::from_millis(200));
    let j = joules_over(&mut all, 0.5);
    assert!(
        (j - 150.0).abs() < 150.0 * 0.05,
        "{j} J for 300 W over 0.5 s"
    );
    let w = all.read(Instant::now()).watts.expect("watts");
    assert!((w - 300.0).abs() < 15.0, "{w} W");
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
    let mut slowest = Duration::ZERO;
    let t0 = Instant::now();
    let mut last = Reading::default();
    while t0.elapsed() < Duration::from_secs(3) {
        let call = Instant::now();
        last = reader.read(Instant::now());
        slowest = slowest.max(call.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    // the poller is joined when the reader is dropped: unhang before asserting
    node.gpus[0].hang.store(false, Ordering::SeqCst);
    assert!(
        slowest < Duration::from_millis(1),
        "a read took {slowest:?}"
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
    let mut reader = GpuReader::start(
        vec![opener],
        Box::new(FakeAccess::default()),
        Duration::from_millis(50),
    )
    .expect("start");
    std::thread::sleep(Duration::from_millis(100));
    let r = reader.read(Instant::now());
    assert!(!r.complete && r.energy_uj == 0, "{r:?}");
    assert!(
        reader
            .poller
            .latest()
            .failure()
            .is_some_and(|w| w.contains("not found"))
    );
}
