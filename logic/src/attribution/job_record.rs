//! A step's GPUs from slurmctld's record of its job, where Slurm's step record is not read
//! (a release whose layout was never measured, a record that failed its checks, or
//! `EnergyStepRecord=no`): what libslurm's public `slurm_load_job(..., SHOW_DETAIL)` says
//! the job holds on this node, as `scontrol show job -d` prints it (`GRES=gpu:2(IDX:0-1)`).
//!
//! It needs no internal layout, but it cannot tell a step's own GPUs within its job: every
//! step of the job on this node is granted all the job's GPUs here. It costs one RPC to
//! slurmctld per job and node: the answer is kept beside the steps' grants (`<job>.job`,
//! [`Grant::publish_for_job`]) and the job's later steps reuse it.

use std::path::Path;
use std::time::Duration;

use super::StepId;
use super::grant::{Grant, GresHeld};
use crate::config::{ConfigError, KeyValues, config_keys};
use crate::hostlist;

config_keys! {
    /// Whether slurmstepd reads Slurm's step record, from acct_gather.conf.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct StepRecordConfig {
        /// `yes`: each slurmstepd reads Slurm's own record of its step, internal to
        /// slurmstepd, to learn which GPUs the step holds (which rust_gpu charges it), on
        /// the Slurm release series whose record layout this build knows. `no` (a
        /// site-patched Slurm, say): that record is never read, and the GPUs come from
        /// slurmctld's record of the job, one request per job and node; every step of a job
        /// is then charged all the job's GPUs on the node. A release whose layout this
        /// build does not know, or a record that fails a check, is treated as `no`.
        pub read: bool = true, {
            STEP_RECORD_KEY = "EnergyStepRecord": parse(|k, v| {
                match v.to_ascii_lowercase().as_str() {
                    "yes" => Ok(true),
                    "no" => Ok(false),
                    _ => Err(ConfigError::new(k, v, "expected yes or no")),
                }
            }),
            show(|read| if *read { "yes".into() } else { "no".into() });
        }
    }
}

/// The GRES that say which GPUs a job holds.
const GPU_GRES: [&str; 3] = ["gpu", "shard", "mps"];

/// What core copies out of slurmctld's `job_info_t` (`slurm_load_job` with `SHOW_DETAIL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's id.
    pub job: u32,
    /// The job's user.
    pub uid: u32,
    /// The job's nodes, a host list (`node[1-3]`).
    pub nodes: String,
    /// `gres_detail_str`: one per node of `nodes`, in its order (fewer, or none, where the
    /// job holds no GRES there).
    pub gres_detail: Vec<String>,
}

/// How slurmstepd asks slurmctld for its record of a job: an error says why it could not.
pub type LoadJob = fn(u32) -> Result<JobRecord, String>;

/// How many times slurmctld is asked, and the pause after each failed try: about 10 s.
pub(crate) const ATTEMPTS: u32 = 4;
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(3_300);

impl JobRecord {
    /// The grant of `step` of this job on `node`: the job's GPU GRES there, its user the
    /// name `user` gives its uid.
    pub fn grant(&self, node: &str, step: StepId, user: String) -> Result<Grant, String> {
        let nodes = hostlist::expand(&self.nodes).map_err(|e| format!("job {}: {e}", self.job))?;
        let Some(at) = nodes.iter().position(|n| n == node) else {
            return Err(format!(
                "slurmctld's record of job {} names nodes {}, not this node ({node})",
                self.job, self.nodes
            ));
        };
        let gres = match self.gres_detail.get(at) {
            Some(detail) => gres_on_node(detail).map_err(|e| format!("job {}: {e}", self.job))?,
            None => Vec::new(),
        };
        Ok(Grant {
            job: self.job,
            step: step.0,
            uid: self.uid,
            user,
            gres,
            stepd: None,
        })
    }
}

/// The GPU GRES of one node's `gres_detail_str`, as slurmctld writes it in every release
/// since 22.05: items `name[:type]:count(IDX:list)` (`gpu:tesla:2(IDX:0-1,3)`), from 23.11
/// a shared GRES's per GPU `name:count(used/total,...)` (`shard:3(2/4,1/4)`: 2 shards of
/// GPU 0, 1 of GPU 1), or `name(CNT:count)` where no index is allocated (not a GPU's,
/// skipped); items of other GRES are skipped.
pub fn gres_on_node(detail: &str) -> Result<Vec<GresHeld>, String> {
    let bad = |why: &str| format!("GRES detail {detail:?}: {why}");
    let mut held = Vec::new();
    for item in top_level_items(detail).map_err(|()| bad("unbalanced parentheses"))? {
        let Some((head, inside)) = item.split_once('(') else {
            return Err(bad("an item without its allocation in parentheses"));
        };
        let inside = inside
            .strip_suffix(')')
            .ok_or_else(|| bad("an item not closed by ')'"))?;
        let name = head.split(':').next().unwrap_or_default();
        if !GPU_GRES.contains(&name) || inside.starts_with("CNT:") {
            continue;
        }
        let count: u64 = head
            .rsplit_once(':')
            .and_then(|(_, n)| n.parse().ok())
            .ok_or_else(|| bad("an item without its count"))?;
        let indexes = match inside.strip_prefix("IDX:") {
            Some(list) => index_list(list).ok_or_else(|| bad("an index list that is not one"))?,
            None => shared_per_gpu(inside).ok_or_else(|| bad("per-GPU shares that are not"))?,
        };
        held.push(GresHeld {
            name: name.to_string(),
            count,
            indexes,
        });
    }
    Ok(held)
}

/// The items of `text` separated by commas outside parentheses.
fn top_level_items(text: &str) -> Result<Vec<&str>, ()> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or(())?,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(());
    }
    items.push(&text[start..]);
    Ok(items.into_iter().filter(|i| !i.is_empty()).collect())
}

/// A GRES index beyond this is not a node's.
const MAX_INDEX: u32 = 65_535;

/// `bit_fmt`'s list of set bits (`0-1,3`).
fn index_list(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for range in list.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
        if lo > hi || hi > MAX_INDEX {
            return None;
        }
        out.extend(lo..=hi);
    }
    Some(out)
}

/// The GPUs a shared GRES's `used/total,...` (one per GPU, in index order) uses.
fn shared_per_gpu(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for (index, pair) in list.split(',').enumerate() {
        let (used, _total) = pair.split_once('/')?;
        let used: u64 = used.parse().ok()?;
        if used > 0 {
            out.push(u32::try_from(index).ok().filter(|i| *i <= MAX_INDEX)?);
        }
    }
    Some(out)
}

/// The grant of `step` of `job` on `node` from slurmctld's job record: the job's kept on
/// this node by an earlier step ([`Grant::read_for_job`]), else asked of slurmctld with
/// `load`, [`ATTEMPTS`] times at most, `pause` between tries (it waits, and says whether
/// the plugin is closing: then asking stops, so that `fini` waits for no slurmctld longer
/// than one question), and kept for the job's later steps. `user_of` names a uid (`None`:
/// no such user here). Blocks: run it on a thread of its own.
pub(crate) fn job_grant(
    spool: &Path,
    job: u32,
    step: StepId,
    node: &str,
    load: LoadJob,
    user_of: impl Fn(u32) -> Option<String>,
    pause: impl Fn() -> bool,
) -> Result<Grant, String> {
    if let Some(kept) = Grant::read_for_job(spool, job) {
        return Ok(Grant {
            step: step.0,
            ..kept
        });
    }
    let mut failures = Vec::new();
    let began = std::time::Instant::now();
    let record = loop {
        match load(job) {
            Ok(record) if record.job == job => break record,
            Ok(record) => failures.push(format!("it answered for job {}", record.job)),
            Err(why) => failures.push(why),
        }
        if failures.len() >= ATTEMPTS as usize {
            return Err(format!(
                "slurmctld was asked for job {job}'s record {ATTEMPTS} times over {} s and \
                 could not say: {}",
                began.elapsed().as_secs(),
                failures.join("; ")
            ));
        }
        if pause() {
            return Err(format!(
                "the plugin closed before slurmctld said job {job}'s record: {}",
                failures.join("; ")
            ));
        }
    };
    // the user's name as this node's user database gives it; Slurm's own convention
    // (its uid in digits) where it has none
    let user = user_of(record.uid).unwrap_or_else(|| record.uid.to_string());
    let grant = record.grant(node, step, user)?;
    if let Err(e) = grant.publish_for_job(spool) {
        log::warn!("{e}; job {job}'s next steps ask slurmctld again");
    }
    Ok(grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::grant::tests::held;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn the_key_is_yes_or_no_and_yes_by_default() {
        let mut values = KeyValues::new();
        assert_eq!(
            StepRecordConfig::parse(&values),
            Ok(StepRecordConfig { read: true })
        );
        values.set(STEP_RECORD_KEY, "No");
        assert_eq!(
            StepRecordConfig::parse(&values),
            Ok(StepRecordConfig { read: false })
        );
        assert_eq!(
            StepRecordConfig { read: false }.show(),
            vec![("EnergyStepRecord", "no".to_string())]
        );
        values.set(STEP_RECORD_KEY, "maybe");
        let e = StepRecordConfig::parse(&values)
            .expect_err("bad value")
            .to_string();
        assert!(e.contains("EnergyStepRecord=maybe"), "{e}");
    }

    /// The strings slurmctld writes (gres_ctld_job_build_details, 22.05 to 26.11), as
    /// `scontrol show job -d` prints them.
    #[test]
    fn gres_details_of_every_release_give_the_gpus() {
        // 22.05-26.11: whole GPUs, typed or not, with other GRES beside them
        assert_eq!(
            gres_on_node("gpu:2(IDX:0-1)"),
            Ok(vec![held("gpu", 2, &[0, 1])])
        );
        assert_eq!(
            gres_on_node("gpu:tesla:3(IDX:0-1,3),tmpfs(CNT:10)"),
            Ok(vec![held("gpu", 3, &[0, 1, 3])])
        );
        assert_eq!(
            gres_on_node("bandwidth:lustre(CNT:4),gpu:a100:1(IDX:6)"),
            Ok(vec![held("gpu", 1, &[6])])
        );
        // 22.05-23.02's shards and MPS: the GPUs under them by index
        assert_eq!(
            gres_on_node("shard:2(IDX:1)"),
            Ok(vec![held("shard", 2, &[1])])
        );
        assert_eq!(
            gres_on_node("mps:50(IDX:0)"),
            Ok(vec![held("mps", 50, &[0])])
        );
        // 23.11+: a shared GRES's use of each GPU
        assert_eq!(
            gres_on_node("shard:3(2/4,0/4,1/4)"),
            Ok(vec![held("shard", 3, &[0, 2])])
        );
        // no GRES on this node, or none indexed
        assert_eq!(gres_on_node(""), Ok(vec![]));
        assert_eq!(gres_on_node("gpu(CNT:2)"), Ok(vec![]));
        for bad in [
            "gpu:2(IDX:0-1",
            "gpu:2IDX:0-1",
            "gpu:x(IDX:0)",
            "gpu:1(IDX:3-1)",
            "gpu:1(IDX:a)",
            "gpu:1(IDX:99999999)",
            "shard:1(1-4)",
            "gpu:1(IDX:0))",
        ] {
            let e = gres_on_node(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    fn record(nodes: &str, details: &[&str]) -> JobRecord {
        JobRecord {
            job: 9,
            uid: 1000,
            nodes: nodes.into(),
            gres_detail: details.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_job_record_grants_this_nodes_gpus() {
        let job = record("n[1-2],gpu07", &["gpu:1(IDX:0)", "", "gpu:2(IDX:2-3)"]);
        let grant = job
            .grant("gpu07", StepId(0), "alice".into())
            .expect("grant");
        assert_eq!(grant.allocation().gpus, vec![2, 3]);
        assert_eq!((grant.job, grant.step, grant.uid), (9, 0, 1000));
        assert_eq!(
            job.grant("n2", StepId::BATCH, "alice".into())
                .expect("grant")
                .gres,
            vec![]
        );
        let e = job
            .grant("n3", StepId(0), "alice".into())
            .expect_err("not ours");
        assert!(e.contains("not this node (n3)"), "{e}");
        // fewer details than nodes: none on the others
        let short = record("n[1-2]", &["gpu:1(IDX:0)"]);
        let grant = short.grant("n2", StepId(0), "alice".into()).expect("grant");
        assert!(grant.gres.is_empty());
    }

    static CALLS: AtomicU32 = AtomicU32::new(0);

    fn answers(job: u32) -> Result<JobRecord, String> {
        match CALLS.fetch_add(1, Ordering::SeqCst) {
            0 => Err("Socket timed out on send/recv operation".into()),
            _ => Ok(JobRecord {
                job,
                ..record("node1", &["gpu:1(IDX:1)"])
            }),
        }
    }

    fn never(_: u32) -> Result<JobRecord, String> {
        Err("Unable to contact slurm controller".into())
    }

    fn alice(uid: u32) -> Option<String> {
        (uid == 1000).then(|| "alice".into())
    }

    /// slurmctld is asked again after a failure, once per job: the job's later steps
    /// take what its first step was told; a slurmctld that never answers is given up.
    #[test]
    fn slurmctld_is_asked_once_per_job_with_retries() {
        let spool = tempfile::tempdir().expect("tempdir");
        let grant = job_grant(
            spool.path(),
            9,
            StepId::BATCH,
            "node1",
            answers,
            alice,
            || false,
        )
        .expect("second try");
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
        assert_eq!(
            (grant.step_id(), grant.user.as_str()),
            (StepId::BATCH, "alice")
        );
        assert_eq!(grant.allocation().gpus, vec![1]);
        let later =
            job_grant(spool.path(), 9, StepId(0), "node1", never, alice, || false).expect("kept");
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
        assert_eq!(later, Grant { step: 0, ..grant });
        let e = job_grant(spool.path(), 10, StepId(0), "node1", never, alice, || false)
            .expect_err("no answer");
        assert!(e.contains("asked for job 10's record 4 times"), "{e}");
        assert!(e.contains("Unable to contact slurm controller"), "{e}");
        // the plugin closing between two questions: no more are asked
        let e = job_grant(spool.path(), 11, StepId(0), "node1", never, alice, || true)
            .expect_err("closed");
        assert!(
            e.starts_with("the plugin closed before slurmctld said job 11's"),
            "{e}"
        );
    }
}
