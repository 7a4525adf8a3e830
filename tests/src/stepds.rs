//! When each slurmstepd of the host lived, watched from /proc: the ground truth of a step's
//! life, against which a figure that must cover it whole is checked.

use std::collections::HashMap;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, sleep};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A slurmstepd's life in Unix seconds: its process's start (10 ms ticks), the last time it
/// was seen with a task (a child: its step's last poll follows the last task's end), and
/// the last time it was seen alive (polled every few milliseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Life {
    pub start: f64,
    pub tasks_seen: f64,
    pub last_seen: f64,
    /// Whether it was ever seen with a task (26.05's extern slurmstepd runs none).
    pub had_tasks: bool,
}

impl Life {
    /// From the slurmstepd's start to its tasks' end, when its step's figure is final; for
    /// one that runs no task, to its exit (a moment after its last poll).
    pub fn secs(&self) -> f64 {
        let end = if self.had_tasks {
            self.tasks_seen
        } else {
            self.last_seen
        };
        end - self.start
    }
}

/// Whether process `pid` has a child (in any of its threads).
fn has_children(pid: &str) -> bool {
    fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|t| fs::read_to_string(t.path().join("children")).is_ok_and(|c| !c.trim().is_empty()))
}

/// Watches /proc until stopped; lives are keyed by the step's name (`J.extern`, `J.batch`,
/// `J.0`) as slurmstepd titles itself.
pub struct StepdWatch {
    stop: Arc<AtomicBool>,
    lives: Arc<Mutex<HashMap<String, Life>>>,
    thread: Option<JoinHandle<()>>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Seconds since boot (`/proc/uptime`).
fn uptime() -> Option<f64> {
    fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The step a slurmstepd's title names, and when the process started: its age (the time
/// since boot less its start in ticks after boot) before now. Not from btime, which is
/// whole seconds and moves when the wall clock is set.
fn stepd(pid: &str) -> Option<(String, f64)> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let title = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let step = title
        .split_once("slurmstepd: [")?
        .1
        .split([']', ' '])
        .next()?
        .to_string();
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks: f64 = stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let (now, up) = (now(), uptime()?);
    Some((step, now - (up - ticks / 100.0)))
}

impl StepdWatch {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let lives: Arc<Mutex<HashMap<String, Life>>> = Arc::default();
        let (s, l) = (Arc::clone(&stop), Arc::clone(&lives));
        let thread = std::thread::spawn(move || {
            // pid -> step, so that a known process costs one stat per pass
            let mut known: HashMap<String, String> = HashMap::new();
            while !s.load(Ordering::SeqCst) {
                let seen_at = now();
                let mut alive = HashMap::new();
                for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let pid = entry.file_name().to_string_lossy().into_owned();
                    if !pid.bytes().all(|b| b.is_ascii_digit()) {
                        continue;
                    }
                    if let Some(step) = known.get(&pid) {
                        if entry.path().join("stat").exists() {
                            alive.insert(pid, step.clone());
                        }
                        continue;
                    }
                    if let Some((step, start)) = stepd(&pid) {
                        l.lock()
                            .expect("lives")
                            .entry(step.clone())
                            .or_insert(Life {
                                start,
                                tasks_seen: start,
                                last_seen: seen_at,
                                had_tasks: false,
                            });
                        alive.insert(pid, step);
                    }
                }
                let mut lives = l.lock().expect("lives");
                for (pid, step) in &alive {
                    if let Some(life) = lives.get_mut(step) {
                        life.last_seen = seen_at;
                        if has_children(pid) {
                            life.tasks_seen = seen_at;
                            life.had_tasks = true;
                        }
                    }
                }
                drop(lives);
                known = alive;
                sleep(Duration::from_millis(3));
            }
        });
        Self {
            stop,
            lives,
            thread: Some(thread),
        }
    }

    /// The life of step `name` seen so far.
    pub fn life(&self, name: &str) -> Life {
        *self
            .lives
            .lock()
            .expect("lives")
            .get(name)
            .unwrap_or_else(|| panic!("no slurmstepd of {name} was seen"))
    }
}

impl Drop for StepdWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
