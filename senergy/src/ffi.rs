//! senergy's only unsafe code, every block with its `// SAFETY:`: libslurm's slurm.conf
//! (`slurm_init`, `slurm_conf`) to [`SlurmSettings`], and its slurmdb API
//! (`slurmdb_connection_get`, `slurmdb_jobs_get`) to the safe rows of [`crate::record`],
//! and back (`slurmdb_job_modify`: a job's SystemComment, for [`crate::kept`]),
//! with libslurm's stderr held meanwhile (descriptor calls of libc); and the kernel's perf
//! counters ([`perf_event`]); syslog ([`syslog()`]). Nothing here decides.

pub mod perf_event;
mod syslog;
pub use syslog::syslog;

use std::ffi::{CStr, CString, c_char, c_void};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::FromRawFd;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

use slurm_sys::{
    JOB_STATE_BASE, NO_VAL, slurm_conf_t, slurm_init, slurm_list_append, slurm_list_create,
    slurm_list_destroy, slurm_list_iterator_create, slurm_list_iterator_destroy, slurm_list_next,
    slurm_selected_step_t, slurm_step_id_t, slurm_strerror, slurmdb_connection_close,
    slurmdb_connection_commit, slurmdb_connection_get, slurmdb_job_cond_t, slurmdb_job_modify,
    slurmdb_job_rec_t, slurmdb_jobs_get, slurmdb_step_rec_t, xlist,
};
use thiserror::Error;

use crate::record::{JobRow, StepRow, StepUsage, user_name};

/// `JOBCOND_FLAG_NO_TRUNC` (`slurmdb.h`, `SLURM_BIT(2)`): report jobs' real start and end,
/// not clipped to the query's window.
const JOBCOND_FLAG_NO_TRUNC: u32 = 1 << 2;
/// `JOBCOND_FLAG_NO_DEFAULT_USAGE` (`slurmdb.h`, `SLURM_BIT(7)`): the job named, whenever
/// it ran (not only today's, the default window).
const JOBCOND_FLAG_NO_DEFAULT_USAGE: u32 = 1 << 7;
/// `JOBCOND_FLAG_NO_STEP` (`slurmdb.h`, `SLURM_BIT(1)`, 22.05 to 26.11): the jobs' own rows
/// without their steps, as `sacct -X` asks (over a year of jobs, 1.4 s against 25.9 s).
const JOBCOND_FLAG_NO_STEP: u32 = 1 << 1;
/// `SLURMDB_JOB_FLAG_NOTSET` (`slurmdb.h`, `SLURM_BIT(0)`): no filter on the jobs'
/// scheduling flags (0 would select only jobs with none of them: none).
const SLURMDB_JOB_FLAG_NOTSET: u32 = 1;

unsafe extern "C" {
    /// libslurm's configuration (`src/common/read_config.h`), loaded by `slurm_init`.
    static slurm_conf: slurm_conf_t;
}

#[derive(Debug, Error)]
pub enum AccountingError {
    /// slurmdbd's `host:port` (AccountingStorageHost/Port), the slurm.conf, the reason.
    #[error("cannot connect to slurmdbd at {0} (slurm.conf {1}): {2}")]
    Connect(String, String, String),
    #[error("slurmdbd at {0} answered no job list: {1}")]
    Query(String, String),
    #[error("job {0}: slurmdbd at {1} did not change its SystemComment: {2}")]
    Modify(u32, String, String),
}

/// Where slurm.conf sends accounting: `host:port`, and the slurm.conf loaded.
fn slurmdbd() -> (String, String) {
    // SAFETY: slurm_init loaded slurm_conf; its strings are NULL or NUL-terminated.
    unsafe {
        let conf = &*ptr::addr_of!(slurm_conf);
        let host = text(conf.accounting_storage_host);
        (
            format!(
                "{}:{}",
                if host.is_empty() {
                    "(no AccountingStorageHost)"
                } else {
                    &host
                },
                conf.accounting_storage_port
            ),
            text(conf.slurm_conf),
        )
    }
}

/// Which jobs to ask slurmdbd for; slurmdbd applies PrivateData to the caller's uid.
#[derive(Debug, Default)]
pub struct JobQuery {
    /// `(job id, array task id)`; a bare array job id selects all its elements.
    pub jobs: Vec<(u32, Option<u32>)>,
    pub accounts: Vec<String>,
    pub uids: Vec<u32>,
    /// Jobs that ran in `[start, end)`, unix seconds.
    pub window: Option<(i64, i64)>,
    /// The clusters asked (sacct's `-M`): none, this one (slurm.conf's ClusterName);
    /// `["all"]`, every cluster slurmdbd keeps.
    pub clusters: Vec<String>,
    /// The jobs' own rows only, without their steps (sacct's `-X`): where only when and
    /// where jobs ran is wanted.
    pub jobs_only: bool,
}

pub struct Accounting {
    conn: *mut c_void,
}

/// Slurm's message for `errno` (where libslurm leaves its error codes; slurm_get_errno
/// is gone from 24.11).
fn last_error() -> String {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if errno == 0 {
        // libslurm failed without saying why ("No error" is no reason)
        return "libslurm gave no reason (is slurmdbd running, and AccountingStorageType \
                accounting_storage/slurmdbd?)"
            .into();
    }
    // SAFETY: slurm_strerror returns a static string for any error number.
    unsafe { text(slurm_strerror(errno)) }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: per the contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A Slurm list that only borrows its items (no destructor): they stay owned by Rust.
struct BorrowedList(*mut xlist);

impl BorrowedList {
    /// A list of `items` (for a list of `char *`, the string pointers themselves).
    fn new(items: Vec<*mut c_void>) -> Option<BorrowedList> {
        if items.is_empty() {
            return None;
        }
        // SAFETY: a list without destructor; what the items point to outlives it (see
        // `jobs`).
        unsafe {
            let list = slurm_list_create(None);
            for item in items {
                slurm_list_append(list, item);
            }
            Some(BorrowedList(list))
        }
    }
}

impl Drop for BorrowedList {
    fn drop(&mut self) {
        // SAFETY: created by slurm_list_create; destroying it frees no item.
        unsafe { slurm_list_destroy(self.0) }
    }
}

fn list_ptr(list: &Option<BorrowedList>) -> *mut xlist {
    list.as_ref().map_or(ptr::null_mut(), |l| l.0)
}

/// Calls `f` on each item of a Slurm list.
///
/// # Safety
/// `list` is NULL or a Slurm list of `T`s.
unsafe fn each<T, R>(list: *mut xlist, mut f: impl FnMut(&T) -> R) -> Vec<R> {
    let mut out = Vec::new();
    if list.is_null() {
        return out;
    }
    // SAFETY: per the contract.
    unsafe {
        let it = slurm_list_iterator_create(list);
        loop {
            let item = slurm_list_next(it).cast::<T>();
            if item.is_null() {
                break;
            }
            out.push(f(&*item));
        }
        slurm_list_iterator_destroy(it);
    }
    out
}

/// libslurm's own messages while it runs (it logs to stderr), held back so that a failure
/// is told once, by senergy, with libslurm's reason in it. Its `fatal()` (no slurm.conf, a
/// bad one) exits the process with status 1, outside senergy's documented statuses: an
/// exit handler, armed while the messages are held, tells it the same way and exits with
/// [`crate::exit::ACCOUNTING`] instead.
struct Held {
    saved: i32,
    file: i32,
}

/// The file libslurm's stderr goes to while held, and the real stderr, for the handler.
static HELD_FILE: AtomicI32 = AtomicI32::new(-1);
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);

impl Held {
    /// Sends stderr to an anonymous file; `None` (nothing held) if that cannot be done.
    fn begin() -> Option<Held> {
        static HANDLER: Once = Once::new();
        // SAFETY: registering a plain extern "C" function.
        HANDLER.call_once(|| unsafe {
            libc::atexit(exit_while_held);
        });
        // SAFETY: descriptor calls on descriptors this function owns, and stderr.
        unsafe {
            let file = libc::memfd_create(c"senergy-libslurm".as_ptr(), libc::MFD_CLOEXEC);
            if file < 0 {
                return None;
            }
            let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
            if saved < 0 || libc::dup2(file, 2) < 0 {
                libc::close(file);
                if saved >= 0 {
                    libc::close(saved);
                }
                return None;
            }
            SAVED_STDERR.store(saved, Ordering::SeqCst);
            HELD_FILE.store(file, Ordering::SeqCst);
            Some(Held { saved, file })
        }
    }

    /// Gives stderr back; returns what libslurm wrote meanwhile.
    fn end(self) -> String {
        HELD_FILE.store(-1, Ordering::SeqCst);
        SAVED_STDERR.store(-1, Ordering::SeqCst);
        // SAFETY: both descriptors are this Held's own.
        unsafe { give_back(self.saved, self.file) }
    }
}

/// Restores stderr from `saved` and reads `file` whole; closes both.
///
/// # Safety
/// `saved` and `file` are open descriptors owned by the caller.
unsafe fn give_back(saved: i32, file: i32) -> String {
    // SAFETY: per the contract.
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
    }
    // SAFETY: `file` is owned and not used elsewhere after this.
    let mut f = unsafe { File::from_raw_fd(file) };
    let mut text = String::new();
    if f.seek(SeekFrom::Start(0)).is_ok() {
        let _ = f.read_to_string(&mut text);
    }
    text
}

/// libslurm's last word in `said` (its lines are `senergy: error: ...`, `fatal: ...`).
fn reason(said: &str) -> String {
    said.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(|l| l.strip_prefix("senergy: ").unwrap_or(l).to_string())
        .unwrap_or_default()
}

/// Runs at exit: if libslurm exits while its messages are held (its `fatal()`), says why
/// once and exits with senergy's status for it.
extern "C" fn exit_while_held() {
    let file = HELD_FILE.swap(-1, Ordering::SeqCst);
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    if file < 0 || saved < 0 {
        return;
    }
    // SAFETY: the descriptors were the Held's, which can no longer use them.
    let said = unsafe { give_back(saved, file) };
    // libslurm's compiled-in path is not exported by libslurm.so: name where packages put it
    let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| {
        "SLURM_CONF is not set: the slurm.conf compiled into libslurm, /etc/slurm/slurm.conf \
         in Debian's, Ubuntu's and SchedMD's packages"
            .into()
    });
    say_unloadable(&conf, &reason(&said));
    // SAFETY: ends the process at once, as the exit in progress would have.
    unsafe { libc::_exit(i32::from(crate::exit::ACCOUNTING)) }
}

/// senergy's one line when slurm.conf at `conf` cannot be loaded, for `why`; its callers
/// then exit with [`crate::exit::ACCOUNTING`].
fn say_unloadable(conf: &str, why: &str) {
    eprintln!("senergy: Slurm's configuration cannot be loaded ({conf}): {why}");
}

/// `message`, with libslurm's reason when it gave one.
fn with_reason(message: String, said: &str) -> String {
    match reason(said) {
        r if r.is_empty() || message.contains(&r) => message,
        r => format!("{message} ({r})"),
    }
}

/// Loads slurm.conf (`SLURM_CONF`, else the compiled-in path) into libslurm, once per
/// process, with libslurm's messages held (its `fatal()` exits); returns the hold, still
/// holding them.
///
/// A `SLURM_CONF` that names no file ends senergy at once: libslurm would wait a minute
/// for it to appear (as a shared file system's might) before giving up.
fn load_slurm_conf() -> Option<Held> {
    if let Some(conf) = std::env::var_os("SLURM_CONF")
        && std::fs::metadata(&conf).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        say_unloadable(&conf.to_string_lossy(), "SLURM_CONF names no file");
        std::process::exit(i32::from(crate::exit::ACCOUNTING));
    }
    let held = Held::begin();
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // libslurm sets SLURM_CONF to the file it loads (read_config.c `slurm_conf_init`):
        // whether it was set before is only known now
        let _ = SLURM_CONF_GIVEN.set(std::env::var_os("SLURM_CONF").is_some());
        // SAFETY: NULL means "the default slurm.conf"; once per process.
        unsafe { slurm_init(ptr::null()) }
    });
    held
}

/// Whether `SLURM_CONF` named senergy's slurm.conf before libslurm loaded it (after, it
/// always does).
static SLURM_CONF_GIVEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// What `senergy check` reads of slurm.conf, as libslurm parsed it.
#[derive(Debug, Clone, Default)]
pub struct SlurmSettings {
    /// The slurm.conf loaded (in configless mode, slurmd's cached copy).
    pub slurm_conf: String,
    pub energy_types: String,
    pub plugin_dir: String,
    pub spool_dir: String,
    pub log_file: String,
    pub proctrack: String,
    pub task_plugin: String,
    /// StateSaveLocation: slurmctld's, SlurmUser's (MailProg's summary slots: [`crate::slots`]).
    pub state_save: String,
    /// Whether `SLURM_CONF` chose the file (else it is the build's default, as a slurmd
    /// started without `-f` or `SLURM_CONF`, by Debian's unit say, reads).
    pub conf_named: bool,
}

/// Loads slurm.conf and returns what `senergy check` reads of it. SlurmUser's directories
/// are trusted from then on as root's (Debian makes SlurmdSpoolDir SlurmUser's), as the
/// plugins trust them in slurmd.
pub fn slurm_settings() -> SlurmSettings {
    let held = load_slurm_conf();
    // SAFETY: slurm_init has filled slurm_conf; its strings are NULL or NUL-terminated
    // and live until exit (nothing here frees or reloads it).
    let settings = unsafe {
        let conf = &*ptr::addr_of!(slurm_conf);
        SlurmSettings {
            slurm_conf: text(conf.slurm_conf),
            energy_types: text(conf.acct_gather_energy_type),
            plugin_dir: text(conf.plugindir),
            spool_dir: text(conf.slurmd_spooldir),
            log_file: text(conf.slurmd_logfile),
            proctrack: text(conf.proctrack_type),
            task_plugin: text(conf.task_plugin),
            state_save: text(conf.state_save_location),
            conf_named: SLURM_CONF_GIVEN.get().copied().unwrap_or(true),
        }
    };
    // SAFETY: as above: slurm_init filled it.
    slurm_energy_logic::trust_slurm_user(unsafe { (*ptr::addr_of!(slurm_conf)).slurm_user_id });
    drop(held.map(Held::end));
    settings
}

/// A whole job, `job_id` or its array element `task`, as a job condition selects it.
fn no_val_step(job_id: u32, task: Option<u32>) -> slurm_selected_step_t {
    // 24.11 added fields (sluid, array_bitmap) that stay zero; 22.05 has none more
    #[allow(clippy::needless_update)]
    slurm_selected_step_t {
        array_task_id: task.unwrap_or(NO_VAL),
        het_job_offset: NO_VAL,
        step_id: slurm_step_id_t {
            job_id,
            step_het_comp: NO_VAL,
            step_id: NO_VAL,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// This cluster's name, where slurm.conf gives one: jobs are this cluster's, as sacct's
/// and sacctmgr's default (slurmdbd may hold several clusters').
fn this_cluster() -> Vec<CString> {
    // SAFETY: slurm_init loaded slurm_conf; cluster_name is NULL or a string.
    let cluster = unsafe { text(slurm_conf.cluster_name) };
    CString::new(cluster)
        .ok()
        .filter(|c| !c.is_empty())
        .into_iter()
        .collect()
}

impl Accounting {
    /// Loads slurm.conf (`SLURM_CONF`, else the compiled-in path) and connects to
    /// slurmdbd as the calling user.
    pub fn open() -> Result<Accounting, AccountingError> {
        let held = load_slurm_conf();
        let mut flags: u16 = 0;
        // SAFETY: flags is a valid out-parameter.
        let conn = unsafe { slurmdb_connection_get(&mut flags) };
        let error = conn.is_null().then(last_error);
        let said = held.map(Held::end).unwrap_or_default();
        match error {
            Some(e) => {
                let (at, conf) = slurmdbd();
                Err(AccountingError::Connect(at, conf, with_reason(e, &said)))
            }
            None => Ok(Accounting { conn }),
        }
    }

    pub fn jobs(&self, query: &JobQuery) -> Result<Vec<JobRow>, AccountingError> {
        let mut steps: Vec<_> = query
            .jobs
            .iter()
            .map(|&(job, task)| no_val_step(job, task))
            .collect();
        let cstrings = |v: &[String]| -> Vec<CString> {
            v.iter()
                .filter_map(|s| CString::new(s.as_str()).ok())
                .collect()
        };
        let accounts = cstrings(&query.accounts);
        let uids = cstrings(&query.uids.iter().map(u32::to_string).collect::<Vec<_>>());
        let clusters = match query.clusters.as_slice() {
            [] => this_cluster(),
            // an empty list: slurmdbd's every cluster
            [all] if all.eq_ignore_ascii_case("all") => Vec::new(),
            named => cstrings(named),
        };
        // the lists hold pointers to the strings' bytes, not to the CStrings
        let ptrs = |v: &[CString]| -> Vec<*mut c_void> {
            v.iter().map(|s| s.as_ptr().cast_mut().cast()).collect()
        };
        let account_list = BorrowedList::new(ptrs(&accounts));
        let uid_list = BorrowedList::new(ptrs(&uids));
        let cluster_list = BorrowedList::new(ptrs(&clusters));
        let step_list =
            BorrowedList::new(steps.iter_mut().map(|s| ptr::from_mut(s).cast()).collect());

        let without_steps = match query.jobs_only {
            true => JOBCOND_FLAG_NO_STEP,
            false => 0,
        };
        let mut cond = slurmdb_job_cond_t {
            flags: JOBCOND_FLAG_NO_TRUNC | without_steps,
            db_flags: SLURMDB_JOB_FLAG_NOTSET,
            acct_list: list_ptr(&account_list),
            userid_list: list_ptr(&uid_list),
            cluster_list: list_ptr(&cluster_list),
            step_list: list_ptr(&step_list),
            ..Default::default()
        };
        if let Some((start, end)) = query.window {
            cond.usage_start = start;
            cond.usage_end = end;
        }
        let held = Held::begin();
        // SAFETY: conn is open; cond and everything its lists point to live until after
        // the call (the lists are destroyed at the end of this function, then the data).
        let result = unsafe { slurmdb_jobs_get(self.conn, &mut cond) };
        let error = result.is_null().then(last_error);
        let said = held.map(Held::end).unwrap_or_default();
        if let Some(e) = error {
            return Err(AccountingError::Query(slurmdbd().0, with_reason(e, &said)));
        }
        // SAFETY: slurmdb_jobs_get returns a list of slurmdb_job_rec_t that we own.
        let rows = unsafe { each(result, job_row) };
        // SAFETY: the list's own destructor frees the records.
        unsafe { slurm_list_destroy(result) };
        Ok(rows)
    }

    /// Sets the SystemComment of the job of `row` to `comment` and commits it, as `sacctmgr
    /// modify job where jobid=J set SystemComment=...` does (but for 22.05's sacctmgr,
    /// which lowercases the text); slurmdbd allows it to its operators and administrators
    /// only (root, SlurmUser). A comment with a NUL is refused here.
    pub fn set_system_comment(&self, row: &JobRow, comment: &str) -> Result<(), AccountingError> {
        let refused = |why: String| AccountingError::Modify(row.job_id, slurmdbd().0, why);
        let comment = CString::new(comment).map_err(|_| refused("a NUL in the text".into()))?;
        // slurmdbd takes a bare job id for the het job and the array it may lead too: an
        // element or a component is named as one, to change its comment alone
        let mut step = match (row.array, row.het) {
            (Some((array, task)), _) => no_val_step(array, Some(task)),
            (None, Some((het, offset))) => slurm_selected_step_t {
                het_job_offset: offset,
                ..no_val_step(het, None)
            },
            (None, None) => no_val_step(row.job_id, None),
        };
        let clusters = this_cluster();
        let cluster_list = BorrowedList::new(
            clusters
                .iter()
                .map(|c| c.as_ptr().cast_mut().cast())
                .collect(),
        );
        let step_list = BorrowedList::new(vec![ptr::from_mut(&mut step).cast()]);
        let mut cond = slurmdb_job_cond_t {
            db_flags: SLURMDB_JOB_FLAG_NOTSET,
            flags: JOBCOND_FLAG_NO_DEFAULT_USAGE,
            cluster_list: list_ptr(&cluster_list),
            step_list: list_ptr(&step_list),
            ..Default::default()
        };
        // every field slurmdbd would set left unset (derived_ec's unset is NO_VAL, as
        // slurmdb_create_job_rec makes it), but the comment: AdminComment is not touched
        let mut record = slurmdb_job_rec_t {
            derived_ec: NO_VAL,
            system_comment: comment.as_ptr().cast_mut(),
            ..Default::default()
        };
        let held = Held::begin();
        // SAFETY: conn is open; cond, its lists and what they point to, the record and its
        // comment live until after the calls; the returned list (of strings) is ours.
        let error = unsafe {
            let modified = slurmdb_job_modify(self.conn, &mut cond, &mut record);
            let error = if modified.is_null() {
                Some(last_error())
            } else {
                let count = each(modified, |_: &c_char| ()).len();
                slurm_list_destroy(modified);
                (count == 0).then(|| "no such job in accounting (yet)".to_string())
            };
            if error.is_none() && slurmdb_connection_commit(self.conn, true) != 0 {
                Some(last_error())
            } else {
                error
            }
        };
        let said = held.map(Held::end).unwrap_or_default();
        match error {
            Some(e) => Err(refused(with_reason(e, &said))),
            None => Ok(()),
        }
    }
}

impl Drop for Accounting {
    fn drop(&mut self) {
        // SAFETY: conn came from slurmdb_connection_get and is closed once.
        unsafe { slurmdb_connection_close(&mut self.conn) };
    }
}

fn job_row(job: &slurmdb_job_rec_t) -> JobRow {
    // SAFETY: the record's strings are NULL or NUL-terminated; steps is a list of
    // slurmdb_step_rec_t (slurmdb.h).
    unsafe {
        JobRow {
            job_id: job.jobid,
            array: (job.array_job_id != 0 && job.array_task_id != NO_VAL)
                .then_some((job.array_job_id, job.array_task_id)),
            het: (job.het_job_id != 0 && job.het_job_offset != NO_VAL)
                .then_some((job.het_job_id, job.het_job_offset)),
            user: user_name(text(job.user), job.uid),
            account: text(job.account),
            name: text(job.jobname),
            state: job.state & JOB_STATE_BASE,
            start: job.start,
            end: job.end,
            elapsed_s: u64::from(job.elapsed),
            alloc_nodes: job.alloc_nodes,
            nodes: text(job.nodes),
            tres_alloc: text(job.tres_alloc_str),
            admin_comment: text(job.admin_comment),
            system_comment: text(job.system_comment),
            steps: each(job.steps, step_row),
        }
    }
}

fn step_row(step: &slurmdb_step_rec_t) -> StepRow {
    let stats = &step.stats;
    // SAFETY: the record's strings are NULL or NUL-terminated.
    unsafe {
        StepRow {
            step_id: step.step_id.step_id,
            het_comp: (step.step_id.step_het_comp != NO_VAL).then_some(step.step_id.step_het_comp),
            name: text(step.stepname),
            nodes: text(step.nodes),
            nnodes: step.nnodes,
            state: step.state & JOB_STATE_BASE,
            start: step.start,
            end: step.end,
            elapsed_s: u64::from(step.elapsed),
            consumed_energy: stats.consumed_energy,
            usage: StepUsage {
                in_max: text(stats.tres_usage_in_max),
                in_max_nodeid: text(stats.tres_usage_in_max_nodeid),
                in_min: text(stats.tres_usage_in_min),
                in_min_nodeid: text(stats.tres_usage_in_min_nodeid),
                in_tot: text(stats.tres_usage_in_tot),
                out_max: text(stats.tres_usage_out_max),
            },
        }
    }
}
