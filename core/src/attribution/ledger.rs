//! Cumulative joules per job and step on one node, updated at each sample of the node's
//! meter, and the file slurmd publishes them in for the node's slurmstepds.
//!
//! The file is JSON with a version, written to a temporary file renamed over the old one, so
//! a reader sees a whole ledger or the previous one, and a slurmd that restarts (or crashes)
//! continues from the last one written. It is not synced to disk every second: what must
//! survive is slurmd, not the node (a node that goes down takes its jobs with it), and a
//! ledger left torn by a power cut is refused on load and started anew.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::StepId;
use super::cgroup::JobCounters;
use super::model::{JobUse, StepUse, split_job, split_node};

/// The file format; a reader refuses any other.
pub const VERSION: u64 = 1;
/// A job that left the node is kept this long, so its slurmstepds' last reads find it.
const KEEP_GONE: Duration = Duration::from_secs(300);
/// After a slurmd restart, the time it was away is charged at the power each job had,
/// up to this long; a longer absence is not guessed.
const MAX_GAP: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not an energy ledger of version {VERSION}")]
    Format { path: String },
}

/// One job's or one step's account.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Account {
    pub joules: f64,
    /// Its share of the node's power over the last interval.
    pub watts: f64,
    /// Unix time it was first seen.
    pub since: f64,
}

#[derive(Debug, Clone, Default)]
struct Job {
    account: Account,
    steps: BTreeMap<StepId, Step>,
    usage_ns: Option<u64>,
    counters: Option<JobCounters>,
    last_seen: f64,
}

#[derive(Debug, Clone, Default)]
struct Step {
    account: Account,
    usage_ns: Option<u64>,
}

/// What the meter and the cgroups said at one sample.
#[derive(Debug, Clone)]
pub struct Observation {
    pub at: Instant,
    pub wall: SystemTime,
    /// The node's energy since the meter opened.
    pub node_uj: u64,
    /// The jobs on the node, with their counters (`None`: no cgroup found) and their steps'
    /// CPU time.
    pub jobs: Vec<ObservedJob>,
}

#[derive(Debug, Clone)]
pub struct ObservedJob {
    pub job: u32,
    pub counters: Option<JobCounters>,
    pub steps: Vec<(StepId, Option<u64>)>,
}

#[derive(Debug, Clone, Copy)]
struct Sampled {
    at: Instant,
    node_uj: u64,
}

/// The node's ledger.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    jobs: BTreeMap<u32, Job>,
    /// The lowest node power over an interval of at least one sample period.
    learned_idle_watts: Option<f64>,
    /// Unix time of the last sample (kept in the file).
    sampled_at: f64,
    /// The previous sample of this process's meter (not kept: the meter restarts with it).
    last: Option<Sampled>,
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Ledger {
    pub fn learned_idle_watts(&self) -> Option<f64> {
        self.learned_idle_watts
    }

    pub fn job(&self, job: u32) -> Option<Account> {
        self.jobs.get(&job).map(|j| j.account)
    }

    pub fn step(&self, job: u32, step: StepId) -> Option<Account> {
        self.jobs.get(&job)?.steps.get(&step).map(|s| s.account)
    }

    /// Unix time of the last sample.
    pub fn sampled_at(&self) -> f64 {
        self.sampled_at
    }

    /// Adds one sample. `idle_watts` is the configured static power (else the learned one
    /// is used); intervals shorter than `min_interval` do not teach it.
    pub fn update(&mut self, obs: &Observation, idle_watts: Option<f64>, min_interval: Duration) {
        let now = unix(obs.wall);
        match self.last {
            Some(prev) => self.charge_interval(prev, obs, idle_watts, min_interval),
            // the first sample of this process: a ledger loaded from the file charges the
            // time slurmd was away at each job's last power
            None if self.sampled_at > 0.0 => self.charge_gap(obs, now),
            None => {}
        }
        self.observe_counters(obs, now);
        self.jobs
            .retain(|_, j| now - j.last_seen <= KEEP_GONE.as_secs_f64());
        self.sampled_at = now;
        self.last = Some(Sampled {
            at: obs.at,
            node_uj: obs.node_uj,
        });
    }

    fn charge_interval(
        &mut self,
        prev: Sampled,
        obs: &Observation,
        idle_watts: Option<f64>,
        min_interval: Duration,
    ) {
        let dt = obs.at.saturating_duration_since(prev.at);
        let secs = dt.as_secs_f64();
        let joules = obs.node_uj.saturating_sub(prev.node_uj) as f64 / 1e6;
        if secs <= 0.0 {
            return;
        }
        if dt >= min_interval {
            let watts = joules / secs;
            self.learned_idle_watts = Some(self.learned_idle_watts.map_or(watts, |w| w.min(watts)));
        }
        let static_watts = idle_watts.or(self.learned_idle_watts).unwrap_or(0.0);
        for job in self.jobs.values_mut() {
            job.account.watts = 0.0;
            for step in job.steps.values_mut() {
                step.account.watts = 0.0;
            }
        }
        // jobs present at both ends of the interval
        let mut present = Vec::new();
        let mut uses = Vec::new();
        for o in &obs.jobs {
            let (Some(now), Some(job)) = (o.counters, self.jobs.get(&o.job)) else {
                continue;
            };
            let Some(before) = job.usage_ns else { continue };
            present.push(o);
            uses.push(JobUse {
                cpus: now.cpus,
                memory: now.memory,
                cpu_secs: now.usage_ns.saturating_sub(before) as f64 / 1e9,
            });
        }
        let shares = split_node(joules, secs, static_watts, &uses);
        for (o, share) in present.into_iter().zip(shares) {
            let Some(job) = self.jobs.get_mut(&o.job) else {
                continue;
            };
            job.account.joules += share;
            job.account.watts = share / secs;
            let mut ids = Vec::new();
            let mut steps = Vec::new();
            for (id, usage) in &o.steps {
                let Some(seen) = job.steps.get(id) else {
                    continue;
                };
                // the extern step needs no CPU time of its own (26.05's cgroup v1 gives it
                // no cpuacct directory): it gets the job's share
                let cpu_secs = match (*usage, seen.usage_ns) {
                    _ if *id == StepId::EXTERN => 0.0,
                    (Some(now), Some(before)) => now.saturating_sub(before) as f64 / 1e9,
                    _ => continue,
                };
                ids.push(*id);
                steps.push(StepUse {
                    is_extern: *id == StepId::EXTERN,
                    cpu_secs,
                });
            }
            for (id, joules) in ids.into_iter().zip(split_job(share, &steps)) {
                if let Some(step) = job.steps.get_mut(&id) {
                    step.account.joules += joules;
                    step.account.watts = joules / secs;
                }
            }
        }
    }

    fn charge_gap(&mut self, obs: &Observation, now: f64) {
        let gap = (now - self.sampled_at).clamp(0.0, MAX_GAP.as_secs_f64());
        for o in &obs.jobs {
            if let Some(job) = self.jobs.get_mut(&o.job) {
                job.account.joules += job.account.watts * gap;
                for step in job.steps.values_mut() {
                    step.account.joules += step.account.watts * gap;
                }
            }
        }
    }

    fn observe_counters(&mut self, obs: &Observation, now: f64) {
        for o in &obs.jobs {
            let job = self.jobs.entry(o.job).or_insert_with(|| Job {
                account: Account {
                    since: now,
                    ..Account::default()
                },
                ..Job::default()
            });
            job.last_seen = now;
            job.counters = o.counters;
            job.usage_ns = o.counters.map(|c| c.usage_ns);
            for (id, usage) in &o.steps {
                let step = job.steps.entry(*id).or_insert_with(|| Step {
                    account: Account {
                        since: now,
                        ..Account::default()
                    },
                    usage_ns: None,
                });
                step.usage_ns = *usage;
            }
        }
    }

    pub fn to_json(&self) -> Value {
        let account = |a: &Account| json!({"joules": a.joules, "watts": a.watts, "since": a.since});
        let jobs: Vec<Value> = self
            .jobs
            .iter()
            .map(|(id, j)| {
                let steps: Vec<Value> = j
                    .steps
                    .iter()
                    .map(|(s, step)| json!({"step": s.0, "account": account(&step.account)}))
                    .collect();
                json!({"job": id, "account": account(&j.account), "last_seen": j.last_seen, "steps": steps})
            })
            .collect();
        json!({
            "version": VERSION,
            "sampled_at": self.sampled_at,
            "learned_idle_watts": self.learned_idle_watts,
            "jobs": jobs,
        })
    }

    pub fn from_json(value: &Value) -> Option<Self> {
        if value.get("version")?.as_u64()? != VERSION {
            return None;
        }
        let account = |v: &Value| -> Option<Account> {
            Some(Account {
                joules: v.get("joules")?.as_f64()?,
                watts: v.get("watts")?.as_f64()?,
                since: v.get("since")?.as_f64()?,
            })
        };
        let mut jobs = BTreeMap::new();
        for j in value.get("jobs")?.as_array()? {
            let mut steps = BTreeMap::new();
            for s in j.get("steps")?.as_array()? {
                let id = StepId(u32::try_from(s.get("step")?.as_u64()?).ok()?);
                let account = account(s.get("account")?)?;
                steps.insert(
                    id,
                    Step {
                        account,
                        usage_ns: None,
                    },
                );
            }
            let id = u32::try_from(j.get("job")?.as_u64()?).ok()?;
            jobs.insert(
                id,
                Job {
                    account: account(j.get("account")?)?,
                    steps,
                    usage_ns: None,
                    counters: None,
                    last_seen: j.get("last_seen")?.as_f64()?,
                },
            );
        }
        Some(Self {
            jobs,
            learned_idle_watts: value.get("learned_idle_watts")?.as_f64(),
            sampled_at: value.get("sampled_at")?.as_f64()?,
            last: None,
        })
    }

    /// The ledger in `path`, `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<Self>, LedgerError> {
        let text = match fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LedgerError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        serde_json::from_slice(&text)
            .ok()
            .and_then(|v| Self::from_json(&v))
            .map(Some)
            .ok_or_else(|| LedgerError::Format {
                path: path.display().to_string(),
            })
    }

    /// Replaces `path` with this ledger, readable by root only.
    pub fn store(&self, path: &Path) -> Result<(), LedgerError> {
        let error = |source| LedgerError::Write {
            path: path.display().to_string(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(error)?;
        file.write_all(self.to_json().to_string().as_bytes())
            .map_err(error)?;
        fs::rename(&tmp, path).map_err(error)
    }
}

/// A step's figure as its slurmstepd reads it from the file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Published {
    pub account: Account,
    /// Unix time of the sample it is current to.
    pub sampled_at: f64,
}

/// Reads `job`'s `step` from the ledger file; `Ok(None)` when the file or the step is not
/// there yet.
pub fn read_step(path: &Path, job: u32, step: StepId) -> Result<Option<Published>, LedgerError> {
    Ok(Ledger::load(path)?.and_then(|l| {
        l.step(job, step).map(|account| Published {
            account,
            sampled_at: l.sampled_at,
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(1);

    fn counters(cpus: u32, usage_s: f64) -> Option<JobCounters> {
        Some(JobCounters {
            cpus,
            memory: None,
            usage_ns: (usage_s * 1e9) as u64,
        })
    }

    fn observation(
        t0: Instant,
        w0: SystemTime,
        secs: u64,
        joules: u64,
        jobs: Vec<ObservedJob>,
    ) -> Observation {
        Observation {
            at: t0 + Duration::from_secs(secs),
            wall: w0 + Duration::from_secs(secs),
            node_uj: joules * 1_000_000,
            jobs,
        }
    }

    fn job(job: u32, cpus: u32, usage_s: f64, steps: &[(StepId, f64)]) -> ObservedJob {
        ObservedJob {
            job,
            counters: counters(cpus, usage_s),
            steps: steps
                .iter()
                .map(|(id, s)| (*id, Some((s * 1e9) as u64)))
                .collect(),
        }
    }

    #[test]
    fn jobs_are_charged_from_their_second_sample_and_sum_to_the_node() {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut ledger = Ledger::default();
        let ext = StepId::EXTERN;
        // no job: nobody is charged, the idle power is learned (100 W)
        ledger.update(&observation(t0, w0, 0, 0, vec![]), None, PERIOD);
        ledger.update(
            &observation(t0, w0, 1, 100, vec![job(1, 1, 0.0, &[(ext, 0.0)])]),
            None,
            PERIOD,
        );
        assert_eq!(ledger.learned_idle_watts(), Some(100.0));
        assert_eq!(ledger.job(1).map(|a| a.joules), Some(0.0));
        // job 2 arrives; job 1 alone pays the next 300 J
        ledger.update(
            &observation(
                t0,
                w0,
                2,
                400,
                vec![job(1, 1, 1.0, &[(ext, 0.0)]), job(2, 1, 0.0, &[(ext, 0.0)])],
            ),
            None,
            PERIOD,
        );
        assert_eq!(ledger.job(1).map(|a| a.joules), Some(300.0));
        // both: 300 J, 100 W static split 1:1, 200 J dynamic 3:1 by CPU time
        ledger.update(
            &observation(
                t0,
                w0,
                3,
                700,
                vec![
                    job(
                        1,
                        1,
                        1.75,
                        &[(ext, 0.0), (StepId::BATCH, 0.5), (StepId(0), 0.0)],
                    ),
                    job(2, 1, 0.25, &[(ext, 0.0)]),
                ],
            ),
            None,
            PERIOD,
        );
        assert_eq!(ledger.job(1).map(|a| a.joules), Some(300.0 + 50.0 + 150.0));
        assert_eq!(ledger.job(2).map(|a| a.joules), Some(50.0 + 50.0));
        assert_eq!(ledger.step(2, ext).map(|a| a.watts), Some(100.0));
        // the steps of job 1 first seen now start counting at the next sample
        assert_eq!(ledger.step(1, StepId::BATCH).map(|a| a.joules), Some(0.0));
        ledger.update(
            &observation(
                t0,
                w0,
                4,
                900,
                vec![
                    job(
                        1,
                        1,
                        2.75,
                        &[(ext, 0.0), (StepId::BATCH, 0.75), (StepId(0), 1.5)],
                    ),
                    job(2, 1, 2.75, &[(ext, 0.0)]),
                ],
            ),
            None,
            PERIOD,
        );
        // 200 J: static 100 J 1:1, dynamic 100 J by CPU time 1.0:2.5; job 1's steps split
        // its share by their CPU time, 0.25 s (batch) to 1.5 s (step 0)
        let j1 = ledger.job(1).map(|a| a.joules).expect("job 1");
        let j2 = ledger.job(2).map(|a| a.joules).expect("job 2");
        assert!((j1 + j2 - 800.0).abs() < 1e-9, "{j1} + {j2}");
        let batch = ledger
            .step(1, StepId::BATCH)
            .map(|a| a.joules)
            .expect("batch");
        let step0 = ledger.step(1, StepId(0)).map(|a| a.joules).expect("step 0");
        assert!(
            (batch + step0 - (j1 - 500.0)).abs() < 1e-9,
            "{batch} + {step0}"
        );
        assert!((batch * 6.0 - step0).abs() < 1e-9, "by CPU time 0.25:1.5");
        assert_eq!(ledger.step(1, ext).map(|a| a.joules), Some(j1));
    }

    #[test]
    fn an_extern_step_without_cpu_time_of_its_own_gets_the_job() {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let observed = |usage_s: f64| ObservedJob {
            job: 4,
            counters: counters(1, usage_s),
            steps: vec![
                (StepId::EXTERN, None),
                (StepId::BATCH, Some((usage_s * 1e9) as u64)),
            ],
        };
        let mut ledger = Ledger::default();
        ledger.update(
            &observation(t0, w0, 0, 0, vec![observed(0.0)]),
            Some(10.0),
            PERIOD,
        );
        ledger.update(
            &observation(t0, w0, 1, 90, vec![observed(0.5)]),
            Some(10.0),
            PERIOD,
        );
        assert_eq!(ledger.step(4, StepId::EXTERN).map(|a| a.joules), Some(90.0));
        assert_eq!(ledger.step(4, StepId::BATCH).map(|a| a.joules), Some(90.0));
    }

    #[test]
    fn a_stored_ledger_loads_and_charges_the_time_slurmd_was_away() {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let ext = StepId::EXTERN;
        let mut ledger = Ledger::default();
        ledger.update(
            &observation(t0, w0, 0, 0, vec![job(9, 2, 0.0, &[(ext, 0.0)])]),
            Some(50.0),
            PERIOD,
        );
        ledger.update(
            &observation(t0, w0, 2, 400, vec![job(9, 2, 1.0, &[(ext, 0.0)])]),
            Some(50.0),
            PERIOD,
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("ledger.json");
        ledger.store(&path).expect("store");
        let mode = fs::metadata(&path).expect("meta").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let published = read_step(&path, 9, ext).expect("read").expect("step");
        assert_eq!(published.account.joules, 400.0);
        assert_eq!(published.account.watts, 200.0);
        // slurmd restarts 3 s later: its meter starts from zero again
        let mut again = Ledger::load(&path).expect("load").expect("a ledger");
        let t1 = Instant::now();
        again.update(
            &observation(t1, w0, 5, 0, vec![job(9, 2, 9.0, &[(ext, 0.0)])]),
            Some(50.0),
            PERIOD,
        );
        let close = |a: Option<Account>, j: f64| a.is_some_and(|a| (a.joules - j).abs() < 1e-3);
        // (unix seconds as f64 are exact to a microsecond: 200 W x 1 us)
        assert!(
            close(again.job(9), 400.0 + 3.0 * 200.0),
            "{:?}",
            again.job(9)
        );
        again.update(
            &observation(t1, w0, 6, 150, vec![job(9, 2, 9.5, &[(ext, 0.0)])]),
            Some(50.0),
            PERIOD,
        );
        assert!(
            close(again.step(9, ext), 1150.0),
            "{:?}",
            again.step(9, ext)
        );
    }

    #[test]
    fn a_file_of_another_version_or_garbage_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("ledger.json");
        assert!(Ledger::load(&path).expect("absent").is_none());
        fs::write(&path, r#"{"version": 2, "jobs": []}"#).expect("write");
        assert!(matches!(
            Ledger::load(&path),
            Err(LedgerError::Format { .. })
        ));
        fs::write(&path, "{").expect("write");
        assert!(matches!(
            Ledger::load(&path),
            Err(LedgerError::Format { .. })
        ));
    }
}
