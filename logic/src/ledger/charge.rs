//! How the ledger charges an interval of the node's energy: to the node, and to its jobs
//! and steps as the split says (the node's whole, a model's share, a device's holders),
//! and the time a restarted slurmd was away.

use std::collections::BTreeMap;

use super::parts::{Composition, IdleHeld, device_part};
use super::{
    Job, Ledger, MAX_GAP, Observation, ObservedJob, Piece, RUN_SLACK, Split, floor, keep_recent,
    unix,
};
use crate::attribution::StepId;
use crate::attribution::holders::ObservedDevice;
use crate::attribution::model::{
    DeviceUse, Interval, JobUse, StepUse, split_device, split_interval, split_job, static_shares,
};
use crate::source::{Bridged, Ends, bridge};

impl Ledger {
    /// A job whose step is seen begun later than the step of the same name it holds runs
    /// again (requeued, preempted and requeued, or its id come round again): a step's name
    /// is never reused within one run. The run before is forgotten, so the new run's
    /// figures begin at zero, as a job new to the node's do; the figures of the run before
    /// were taken as its steps ended.
    pub(super) fn forget_earlier_runs(&mut self, obs: &Observation) {
        for o in &obs.jobs {
            let Some(job) = self.jobs.get(&o.job) else {
                continue;
            };
            let again = o.steps.iter().any(|s| {
                let kept = job.steps.get(&s.id).map(|k| k.account.since);
                matches!((s.started.map(unix), kept), (Some(now), Some(before)) if now > before + RUN_SLACK)
            });
            if again {
                log::info!(
                    "job {} runs again on this node: its energy begins anew",
                    o.job
                );
                self.jobs.remove(&o.job);
            }
        }
    }

    /// The first sample after slurmd was away (since the ledger's last sample): the node's
    /// energy over the gap is the meter's own where its counts bridge it (with the number
    /// of wraps the powers before and after the gap make plausible, where a counter could
    /// have wrapped more often than its rise says), charged as any interval; else
    /// estimated at the last power of the node and of each job, and said so.
    pub(super) fn charge_away(&mut self, obs: &Observation, now: f64, split: Split) {
        let secs = now - self.sampled_at;
        let ends = Ends {
            before: Some(self.node.watts),
            after: obs.watts,
        };
        // a device's share needs each device's own counts, which the ledger does not keep
        let bridged = match split {
            Split::Devices { .. } => None,
            Split::Node | Split::Shared { .. } => bridge(&self.counts, &obs.counts, secs, ends),
        };
        match bridged {
            Some(bridged) => {
                let joules = bridged.uj() as f64 / 1e6;
                let how = match bridged {
                    Bridged::Counted { .. } => String::new(),
                    Bridged::Inferred { wraps, watts, .. } => format!(
                        " (at their maximum power the counters could have wrapped more often \
                         than their rise says: {wraps} more wraps is the one number that puts \
                         the gap within {:.0} W to {:.0} W, as the powers before and after it \
                         ({:.1} W, {}) make plausible)",
                        watts.0,
                        watts.1,
                        self.node.watts,
                        obs.watts
                            .map_or_else(|| "unknown".to_string(), |w| format!("{w:.1} W"))
                    ),
                };
                log::info!(
                    "the {secs:.1} s since the energy ledger's last sample are bridged by the \
                     meter's own counts: {joules:.1} J{how}"
                );
                self.charge_interval(secs, joules, obs, split);
            }
            None => {
                let gap = secs.clamp(0.0, MAX_GAP.as_secs_f64());
                log::warn!(
                    "the {secs:.1} s since the energy ledger's last sample are estimated at \
                     the last power ({:.1} W for the node){}: the meter's counts cannot span \
                     them ({})",
                    self.node.watts,
                    if gap < secs {
                        format!(", for {gap:.0} s at most")
                    } else {
                        String::new()
                    },
                    match split {
                        Split::Devices { .. } => "each device's share is not bridged",
                        _ if self.counts.is_empty() || obs.counts.is_empty() => {
                            "the source reports power, or no settled count was kept"
                        }
                        _ => {
                            "a counter may have wrapped a number of times the powers before \
                             and after the gap do not tell, or was reset"
                        }
                    }
                );
                self.charge_gap(obs, gap);
            }
        }
    }

    /// Charges the node and the jobs `joules` of the interval of `secs` that ends with `obs`.
    pub(super) fn charge_interval(
        &mut self,
        secs: f64,
        joules: f64,
        obs: &Observation,
        split: Split,
    ) {
        if secs.is_nan() || secs <= 0.0 {
            return;
        }
        let prior_watts = self.interval_watts.unwrap_or(self.node.watts);
        let (now, began) = (unix(obs.wall), unix(obs.wall) - secs);
        self.node_rate
            .charge(&mut self.node, began, now, joules, obs.settled);
        self.interval_watts = Some(joules / secs);
        if let Some(watts) = self.floor.observe(secs, joules, obs.settled)
            && matches!(split, Split::Shared { idle_watts: None })
        {
            log::info!(
                "the node's static power is learned at {watts:.1} W: the lowest power it held \
                 over {:.0} s (EnergyAttributionIdleWatts sets it)",
                floor::SUSTAIN
            );
        }
        // a job or step charged nothing this interval has left, or is not seen yet (its
        // power window goes on: a job seen again is averaged over the time between)
        for job in self.jobs.values_mut() {
            job.account.watts = 0.0;
            for step in job.steps.values_mut() {
                step.account.watts = 0.0;
            }
        }
        let composition = match split {
            Split::Devices { .. } => Composition::unknown(),
            Split::Node | Split::Shared { .. } => self.composition(obs, joules),
        };
        let idle_watts = match split {
            Split::Node => return self.charge_whole(obs, (began, now), joules, &composition),
            Split::Devices { idle_watts } => {
                return self.charge_devices(obs, (began, now), idle_watts);
            }
            Split::Shared { idle_watts } => idle_watts,
        };
        let interval = Interval {
            joules,
            secs,
            static_watts: idle_watts.or(self.floor.watts()).unwrap_or(0.0),
            prior_watts: Some(prior_watts),
        };
        // the jobs with counters now, and at the interval's start or since their arrival
        let mut present = Vec::new();
        let mut uses = Vec::new();
        for o in &obs.jobs {
            let Some(now) = o.counters else { continue };
            let before = self.jobs.get(&o.job).and_then(|j| j.usage_ns);
            let Some((cpu_secs, arrived)) = since(now.usage_ns, before, o.started(), began, secs)
            else {
                continue;
            };
            present.push(o);
            uses.push(JobUse {
                cpus: now.cpus,
                memory: now.memory,
                cpu_secs,
                arrived,
            });
        }
        // the dynamic part of CPU time no job used is no job's: never waiting for a job
        // found late
        let unowned_secs = obs.unowned_cpu_ns as f64 / 1e9;
        let (mut shares, unowned_j) = split_interval(&interval, &uses, unowned_secs);
        let statics = static_shares(&interval, &uses);
        self.charge_late_arrivals(&uses, &mut shares, began);
        self.unassigned.push_back(Piece {
            from: began,
            to: now,
            joules: (joules - shares.iter().sum::<f64>() - unowned_j).max(0.0),
        });
        keep_recent(&mut self.unassigned, now);
        for (((o, share), static_j), used) in
            present.into_iter().zip(shares).zip(statics).zip(&uses)
        {
            let job = self.jobs.entry(o.job).or_insert_with(|| Job::new(o, now));
            job.rate
                .charge(&mut job.account, began, now, share, obs.settled);
            job.breakdown.charge(share, &composition);
            // its static share over the CPU time it held and did not use
            let held_secs = f64::from(used.cpus) * (secs - used.arrived.clamp(0.0, secs));
            if held_secs > 0.0 {
                let unused = (1.0 - used.cpu_secs / held_secs).clamp(0.0, 1.0);
                IdleHeld::add(&mut job.breakdown.idle_held.cpu, static_j * unused);
            }
            let mut ids = Vec::new();
            let mut steps = Vec::new();
            for s in &o.steps {
                let before = job.steps.get(&s.id).and_then(|step| step.usage_ns);
                let started = s.started.map(unix);
                // the extern step needs no CPU time of its own (26.05's cgroup v1 gives it
                // no cpuacct directory): it gets the job's share
                let cpu_secs = if s.id == StepId::EXTERN {
                    0.0
                } else {
                    match s
                        .usage_ns
                        .and_then(|u| since(u, before, started, began, secs))
                    {
                        Some((cpu_secs, _)) => cpu_secs,
                        None => continue,
                    }
                };
                ids.push(s.id);
                steps.push(StepUse {
                    is_extern: s.id == StepId::EXTERN,
                    cpu_secs,
                });
            }
            for (id, joules) in ids.into_iter().zip(split_job(share, &steps)) {
                job.charge_step(o, id, joules, (began, now), obs.settled)
                    .breakdown
                    .charge(joules, &composition);
            }
        }
    }

    /// [`Split::Node`]: every job and step present gets the node's energy since it began:
    /// the whole interval, or the part since its start within it; one found after its start
    /// also the node's energy between ([`Self::recent`]). One whose start is unknown counts
    /// from its next interval.
    fn charge_whole(
        &mut self,
        obs: &Observation,
        (began, now): (f64, f64),
        joules: f64,
        composition: &Composition,
    ) {
        let secs = now - began;
        let recent = &self.recent;
        let since = |known: bool, started: Option<f64>| match started {
            _ if known => joules,
            Some(s) if s >= began => joules * ((now - s) / secs).clamp(0.0, 1.0),
            Some(s) => joules + recent.iter().map(|p| p.within(s, began)).sum::<f64>(),
            None => 0.0,
        };
        let mut charges = Vec::new();
        for o in &obs.jobs {
            let job = self.jobs.get(&o.job);
            let steps: Vec<(StepId, f64)> = o
                .steps
                .iter()
                .map(|s| {
                    let known = job.is_some_and(|j| j.steps.contains_key(&s.id));
                    (s.id, since(known, s.started.map(unix)))
                })
                .collect();
            charges.push((o, since(job.is_some(), o.started()), steps));
        }
        self.recent.push_back(Piece {
            from: began,
            to: now,
            joules,
        });
        keep_recent(&mut self.recent, now);
        for (o, joules, steps) in charges {
            let job = self.jobs.entry(o.job).or_insert_with(|| Job::new(o, now));
            job.rate
                .charge(&mut job.account, began, now, joules, obs.settled);
            job.breakdown.charge(joules, composition);
            for (id, joules) in steps {
                job.charge_step(o, id, joules, (began, now), obs.settled)
                    .breakdown
                    .charge(joules, composition);
            }
        }
    }

    /// Jobs found after their start (`arrived` < 0: seconds before the interval began) get
    /// the energy nobody got since they began, in proportion to their shares of this
    /// interval; what others got before they were found stays theirs.
    fn charge_late_arrivals(&mut self, uses: &[JobUse], shares: &mut [f64], began: f64) {
        let late: Vec<usize> = (0..uses.len()).filter(|&i| uses[i].arrived < 0.0).collect();
        let Some(first) = late
            .iter()
            .map(|&i| began + uses[i].arrived)
            .min_by(f64::total_cmp)
        else {
            return;
        };
        let mut owed = 0.0;
        for u in &mut self.unassigned {
            let part = u.within(first, began);
            u.joules -= part;
            owed += part;
        }
        let weights: Vec<f64> = late.iter().map(|&i| shares[i].max(0.0)).collect();
        let total: f64 = weights.iter().sum();
        for (&i, w) in late.iter().zip(weights) {
            shares[i] += if total > 0.0 {
                owed * w / total
            } else {
                owed / late.len() as f64
            };
        }
    }

    /// [`Split::Devices`]: each device's interval `(began, now)` among the jobs holding or
    /// using it ([`Self::charge_piece`]), and each step the parts of its job on the devices
    /// it holds; the extern step, the job's container, all of its job's parts (on a device
    /// none of its steps holds too: a task's cgroup, which its user may write, does not
    /// tell which step used it).
    fn charge_devices(
        &mut self,
        obs: &Observation,
        (began, now): (f64, f64),
        idle_watts: Option<f64>,
    ) {
        let secs = now - began;
        // each job's joules on each device (or instance), and whether none of its
        // processes used it
        let mut parts: BTreeMap<(u32, u32), (f64, bool)> = BTreeMap::new();
        // each instance's GPU
        let mut gpu_of: BTreeMap<u32, u32> = BTreeMap::new();
        for d in &obs.devices {
            let state = self.devices.entry(d.position).or_default();
            let Some(last) = state.last_uj else { continue };
            let joules = d.energy_uj.saturating_sub(last) as f64 / 1e6;
            if let Some(watts) = state.floor.observe(secs, joules, obs.settled)
                && idle_watts.is_none()
            {
                log::info!(
                    "the static power of GPU {} is learned at {watts:.1} W: the lowest power \
                     it held over {:.0} s (EnergyGpuIdleWatts sets it)",
                    d.position,
                    floor::SUSTAIN
                );
            }
            let static_watts = idle_watts.or(state.floor.watts()).unwrap_or(0.0);
            // a partitioned GPU's meter is the whole GPU's: its instances get its energy by
            // their size (static) and their activity (the rest)
            let pieces: Vec<(u32, f64, f64)> = if d.instances.is_empty() {
                vec![(d.position, joules, static_watts)]
            } else {
                let uses: Vec<DeviceUse> = d
                    .instances
                    .iter()
                    .map(|i| DeviceUse {
                        shares: Some(f64::from(i.sms)),
                        busy: i.activity * f64::from(i.sms),
                    })
                    .collect();
                let total_sms: f64 = d.instances.iter().map(|i| f64::from(i.sms)).sum();
                d.instances
                    .iter()
                    .zip(split_device(joules, secs, static_watts, &uses))
                    .map(|(i, part)| {
                        let size = if total_sms > 0.0 {
                            f64::from(i.sms) / total_sms
                        } else {
                            0.0
                        };
                        (i.position, part, static_watts * size)
                    })
                    .collect()
            };
            for (position, joules, static_watts) in pieces {
                gpu_of.insert(position, d.position);
                for (job, part, idle) in
                    self.charge_piece(obs, d, position, (began, now), joules, static_watts)
                {
                    parts.insert((job, position), (part, idle));
                }
            }
        }
        for o in &obs.jobs {
            let job = self.jobs.entry(o.job).or_insert_with(|| Job::new(o, now));
            let own: Vec<(u32, f64, bool)> = parts
                .range((o.job, 0)..=(o.job, u32::MAX))
                .map(|(&(_, p), &(j, idle))| (p, j, idle))
                .collect();
            let held: f64 = own.iter().map(|(_, j, _)| j).sum();
            job.rate
                .charge(&mut job.account, began, now, held, obs.settled);
            let gpu = |p: u32| device_part(gpu_of.get(&p).copied().unwrap_or(p));
            charge_devices_parts(&mut job.breakdown, &own, gpu);
            for s in &o.steps {
                job.held.extend(s.holds.iter().map(|(p, _)| *p));
                // the extern step is the job's container (with PrologFlags=Contain its
                // figure is the job's in accounting): all the job's devices
                let mine: Vec<(u32, f64, bool)> = if s.id == StepId::EXTERN {
                    own.clone()
                } else {
                    own.iter()
                        .filter(|(p, _, _)| s.holds.iter().any(|(h, _)| h == p))
                        .copied()
                        .collect()
                };
                let joules = mine.iter().map(|(_, j, _)| j).sum();
                let step = job.charge_step(o, s.id, joules, (began, now), obs.settled);
                charge_devices_parts(&mut step.breakdown, &mine, gpu);
            }
        }
    }

    /// One device (or MIG instance) at `position`, of `joules` over `(began, now)`, among
    /// the jobs holding it and the jobs that used it without holding it: each one's part
    /// (a user of no job present is nobody: its part stays in the node's figure only). A
    /// job holding it anew (its tasks just started) also gets what nobody got of it since
    /// the job began, by shares among those new this interval.
    fn charge_piece(
        &mut self,
        obs: &Observation,
        device: &ObservedDevice,
        position: u32,
        (began, now): (f64, f64),
        joules: f64,
        static_watts: f64,
    ) -> Vec<(u32, f64, bool)> {
        // a process's use is the whole GPU's, not told per MIG instance: an instance's
        // users are its holders
        let whole = position == device.position;
        let used_by = |job: Option<u32>| -> f64 {
            device
                .busy
                .iter()
                .filter(|(j, _)| *j == job)
                .map(|(_, b)| b)
                .sum()
        };
        let mut users: Vec<(Option<&ObservedJob>, DeviceUse)> = Vec::new();
        for o in &obs.jobs {
            let shares = o
                .steps
                .iter()
                .flat_map(|s| &s.holds)
                .filter(|(p, _)| *p == position)
                .map(|(_, shares)| *shares)
                .max_by(f64::total_cmp);
            let busy = used_by(Some(o.job));
            if shares.is_some() || (whole && busy > 0.0) {
                users.push((Some(o), DeviceUse { shares, busy }));
            }
        }
        if whole {
            // processes of no job, or of a job not present: in the split, charged to nobody
            let busy: f64 = device
                .busy
                .iter()
                .filter(|(j, _)| !users.iter().any(|(o, _)| o.map(|o| o.job) == *j))
                .map(|(_, b)| b)
                .sum();
            if busy > 0.0 {
                users.push((None, DeviceUse { shares: None, busy }));
            }
        }
        let uses: Vec<DeviceUse> = users.iter().map(|(_, u)| *u).collect();
        let mut split = split_device(joules, now - began, static_watts, &uses);
        let state = self.devices.entry(position).or_default();
        state
            .unheld_users
            .retain(|job| obs.jobs.iter().any(|o| o.job == *job));
        for (o, u) in &users {
            if let (Some(o), None) = (o, u.shares)
                && state.unheld_users.insert(o.job)
            {
                log::warn!(
                    "job {} uses GPU {position}, which Slurm did not give it (devices are not \
                     constrained, or a process of its owner left its job): it pays for its use \
                     of it",
                    o.job
                );
            }
        }
        // held by nobody, what no use explains (its static part) waits for a holder
        if uses.iter().all(|u| u.shares.is_none()) {
            state.unassigned.push_back(Piece {
                from: began,
                to: now,
                joules: (joules - split.iter().sum::<f64>()).max(0.0),
            });
        }
        keep_recent(&mut state.unassigned, now);
        let new: Vec<usize> = (0..users.len())
            .filter(|&i| {
                let (Some(o), Some(_)) = (users[i].0, users[i].1.shares) else {
                    return false;
                };
                !self
                    .jobs
                    .get(&o.job)
                    .is_some_and(|j| j.held.contains(&position))
            })
            .collect();
        let first = new
            .iter()
            .filter_map(|&i| {
                let o = users[i].0?;
                o.started()
                    .or_else(|| self.jobs.get(&o.job).map(|j| j.account.since))
            })
            .min_by(f64::total_cmp);
        if let (Some(first), Some(state)) = (first, self.devices.get_mut(&position)) {
            let mut owed = 0.0;
            for u in &mut state.unassigned {
                let part = u.within(first, began);
                u.joules -= part;
                owed += part;
            }
            let shares = |i: usize| users[i].1.shares.unwrap_or(0.0);
            let total: f64 = new.iter().map(|&i| shares(i)).sum();
            for &i in &new {
                split[i] += if total > 0.0 {
                    owed * shares(i) / total
                } else {
                    owed / new.len() as f64
                };
            }
        }
        // a whole GPU it holds that none of its processes used: idle-held (a MIG instance's
        // users' use is not told per process)
        users
            .iter()
            .zip(split)
            .filter_map(|((o, u), part)| {
                let idle = whole && u.shares.is_some() && u.busy <= 0.0;
                Some(((*o)?.job, part, idle))
            })
            .collect()
    }

    /// Charges the node and the jobs present their last power over `gap` seconds.
    fn charge_gap(&mut self, obs: &Observation, gap: f64) {
        self.node.joules += self.node.watts * gap;
        for o in &obs.jobs {
            if let Some(job) = self.jobs.get_mut(&o.job) {
                let joules = job.account.watts * gap;
                job.account.joules += joules;
                job.breakdown.charge(joules, &Composition::unknown());
                for step in job.steps.values_mut() {
                    let joules = step.account.watts * gap;
                    step.account.joules += joules;
                    step.breakdown.charge(joules, &Composition::unknown());
                }
            }
        }
    }
}

/// Charges `breakdown` its parts of the devices, `(position, joules, idle)`: each its GPU's
/// part, and the joules of those none of its processes used as idle-held.
fn charge_devices_parts(
    breakdown: &mut super::Breakdown,
    devices: &[(u32, f64, bool)],
    gpu: impl Fn(u32) -> String,
) {
    let mut idle = 0.0;
    for &(position, joules, unused) in devices {
        breakdown.add(gpu(position), joules);
        if unused {
            idle += joules;
        }
    }
    IdleHeld::add(&mut breakdown.idle_held.gpu, idle);
}

/// A job's or step's CPU seconds in the interval that `began` (unix time) `secs` ago, and
/// when in it it arrived: from its counter at the interval's start (`before`), or, first
/// seen now, from its start (its counter began with it). One seen late (it started before
/// the interval: a negative arrival) has its CPU time spread evenly over its life, and
/// what came before the interval from what nobody got; `None` when its start is unknown (it
/// is charged from its next interval).
fn since(
    usage_ns: u64,
    before: Option<u64>,
    started: Option<f64>,
    began: f64,
    secs: f64,
) -> Option<(f64, f64)> {
    if let Some(before) = before {
        return Some((usage_ns.saturating_sub(before) as f64 / 1e9, 0.0));
    }
    let used = usage_ns as f64 / 1e9;
    let started = started?;
    if started >= began {
        return Some((used, (started - began).min(secs)));
    }
    let life = began + secs - started;
    Some((used * secs / life, started - began))
}
