//! `senergy mail`: Slurm's `MailProg`. slurmctld runs it as `MailProg -s SUBJECT USER`
//! (agent.c `_mail_proc`, every release 22.05-26.05), the body on stdin (empty: /dev/null),
//! and the job's facts in the environment (`SLURM_JOB_MAIL_TYPE`, `SLURM_JOB_ID`, ...). An
//! end-of-job mail (`Ended`, `Failed`) gets the job's summary ([`crate::summary`]) after
//! its body; every other mail goes on unchanged. Either way the real mailer (the site
//! file's `mailer`, else /usr/bin/mail) gets the same arguments: the summary can fail
//! (accounting down, a bad site file, a libslurm that exits), the mail never does for it,
//! it says why in one line.
//!
//! The job is the one the subject names, in the words slurmctld writes before the job's
//! name (`Slurm Job_id=123 Name=`, `Slurm Array Task Job_id=123_4 (130) Name=`, `Slurm
//! Array Summary Job_id=123_* (123) Name=`): the name after it is the owner's text, and
//! the summary runs as SlurmUser, who sees every job, so nothing the owner wrote may
//! choose which job is summarised.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The mailer when the site file names none: where `mail` (mailx, s-nail) is installed.
pub const DEFAULT_MAILER: &str = "/usr/bin/mail";

/// How long the summary may take, within slurmctld's `MAIL_PROG_TIMEOUT` (120 s, after
/// which it kills MailProg and the mail is lost): its `--wait` for slurmdbd, then its
/// own run.
const SUMMARY_WAIT_S: u64 = 60;
const SUMMARY_LIMIT: Duration = Duration::from_secs(90);

/// How long before a job's run began a run of the same id may have ended and still be taken
/// for it: the mail of a run goes out after its end, late where slurmctld's mail queue is
/// long; ids come round again after MaxJobId (67 million by default) jobs.
const MAIL_QUEUE_SLACK_S: i64 = 86_400;

/// The mail types of a job's end (agent.c `_mail_type_str`).
const END_OF_JOB: [&str; 2] = ["Ended", "Failed"];

/// What slurmctld asked for, and the job to summarise if it is an end-of-job mail.
#[derive(Debug, PartialEq)]
pub struct Request {
    /// The arguments as given, for the real mailer.
    pub args: Vec<String>,
    /// `123`, `123_4` (an array element), `123` for an array's summary; `None`: not an
    /// end-of-job mail, or its subject names no job.
    pub job: Option<String>,
    pub end_of_job: bool,
}

impl Request {
    /// From MailProg's arguments and `SLURM_JOB_MAIL_TYPE`.
    pub fn new(args: Vec<String>, mail_type: Option<&str>) -> Request {
        let end_of_job = mail_type.is_some_and(|t| END_OF_JOB.contains(&t));
        let job = end_of_job
            .then(|| subject(&args).and_then(job_of_subject))
            .flatten();
        Request {
            args,
            job,
            end_of_job,
        }
    }
}

/// The subject: the argument after `-s`.
fn subject(args: &[String]) -> Option<&str> {
    let at = args.iter().position(|a| a == "-s")?;
    args.get(at + 1).map(String::as_str)
}

/// A recipient the mailer would take for an option: slurmctld passes the job's
/// `--mail-user`, the owner's text, as MailProg's last arguments (after `-s SUBJECT`), and
/// `-S...` is an s-nail setting, `--exec=...` a mailutils command. A `--` before it is no
/// cure: s-nail passes what follows `--` to sendmail as options.
pub fn option_like_recipient(args: &[String]) -> Option<&str> {
    let recipients = match args.iter().position(|a| a == "-s") {
        Some(at) => args.get(at + 2..).unwrap_or_default(),
        None => args,
    };
    recipients
        .iter()
        .map(String::as_str)
        .find(|r| r.starts_with('-'))
}

/// The job id slurmctld wrote before the job's name: digits, `digits_digits`, or an
/// array's `digits_*` (its whole array).
pub fn job_of_subject(subject: &str) -> Option<String> {
    let rest = subject.strip_prefix("Slurm ")?;
    let rest = rest
        .strip_prefix("Array Task ")
        .or_else(|| rest.strip_prefix("Array Summary "))
        .unwrap_or(rest);
    let id = rest.strip_prefix("Job_id=")?.split(' ').next()?;
    let id = id.strip_suffix("_*").unwrap_or(id);
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    let valid = match id.split_once('_') {
        Some((job, task)) => digits(job) && digits(task),
        None => digits(id),
    };
    valid.then(|| id.to_string())
}

/// A job's run time as slurmctld gives MailProg (`SLURM_JOB_RUN_TIME`, agent.c's
/// `secs2time_str`): `[days-]hours:minutes:seconds`, in seconds.
pub fn run_time_s(text: &str) -> Option<i64> {
    let (days, clock) = match text.trim().split_once('-') {
        Some((days, clock)) => (days.parse::<i64>().ok()?, clock),
        None => (0, text.trim()),
    };
    let parts: Vec<i64> = clock
        .split(':')
        .map(|p| p.parse::<i64>().ok().filter(|v| *v >= 0))
        .collect::<Option<_>>()?;
    let [h, m, sec] = parts[..] else {
        return None;
    };
    (days >= 0 && m < 60 && sec < 60).then_some(((days * 24 + h) * 60 + m) * 60 + sec)
}

/// The body the real mailer gets: the original, then the summary or why there is none.
pub fn compose(body: &str, summary: Option<Result<String, String>>) -> String {
    let mut out = body.to_string();
    let Some(summary) = summary else {
        return out;
    };
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !out.is_empty() {
        out.push('\n');
    }
    match summary {
        Ok(text) => {
            out.push_str("Energy and emissions (senergy):\n");
            out.push_str(&text);
        }
        Err(why) => out.push_str(&format!("senergy: no energy summary: {why}\n")),
    }
    out
}

/// The site file (SENERGY_CONF, else /etc/slurm/senergy.conf), if it reads and parses.
fn site_file() -> Option<crate::site::SiteFile> {
    let path = std::env::var_os("SENERGY_CONF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(crate::cli::DEFAULT_CONF));
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| crate::site::SiteFile::parse(&path, &text).ok())
}

/// The real mailer, the site file's `mailer`, else /usr/bin/mail; and how many summaries
/// may wait at once, its `mail_summaries`, else [`crate::slots::DEFAULT_SLOTS`]. A site
/// file that cannot be read still sends the mail, by the defaults; at a job's end the
/// summary, which reads the same file, then says what is wrong.
fn settings() -> (PathBuf, u32) {
    let site = site_file();
    let slots = site.as_ref().and_then(|s| s.mail_summaries);
    (
        site.and_then(|s| s.mailer)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MAILER)),
        slots.unwrap_or(crate::slots::DEFAULT_SLOTS),
    )
}

/// `senergy job JOB --summary --wait ... --mail-slots N` as a child process: a libslurm
/// that exits or hangs takes the child, not the mail. The child waits only for a job whose
/// figures may still come ([`crate::settle`]), and only in one of `slots` slots
/// ([`crate::slots`]): with none free it ends at once, and says why.
fn summary_of(job: &str, slots: u32, ended_after: Option<i64>) -> Result<String, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find senergy: {e}"))?;
    let wait = SUMMARY_WAIT_S.to_string();
    let slots = slots.to_string();
    let mut child = Command::new(me);
    child.args([
        "job",
        job,
        "--summary",
        "--wait",
        &wait,
        "--mail-slots",
        &slots,
    ]);
    if let Some(t) = ended_after {
        child.arg(format!("--ended-after={t}"));
    }
    let mut child = child
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run senergy: {e}"))?;
    let deadline = Instant::now() + SUMMARY_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer in {} s", SUMMARY_LIMIT.as_secs()));
            }
        }
    };
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    };
    let out = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
    let err = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
    if status.success() && !out.is_empty() {
        return Ok(out);
    }
    let first = err.lines().next().unwrap_or("").trim();
    let first = first.strip_prefix("senergy: ").unwrap_or(first);
    Err(if first.is_empty() {
        format!("senergy exited with {status}")
    } else {
        first.chars().take(300).collect()
    })
}

/// MailProg: the original mail, with the summary at a job's end, to the real mailer.
/// Exits as the mailer does (slurmctld logs a failure).
pub fn run(args: Vec<String>) -> u8 {
    let mail_type = std::env::var("SLURM_JOB_MAIL_TYPE").ok();
    if let Some(recipient) = option_like_recipient(&args) {
        eprintln!(
            "senergy mail: recipient {recipient:?} refused: it begins with '-', which a \
             mailer takes for an option (s-nail's -S, mailutils' --exec); no mail sent"
        );
        return 1;
    }
    let request = Request::new(args, mail_type.as_deref());
    let mut body = Vec::new();
    // a closed stdin is an empty body
    let _ = std::io::stdin().read_to_end(&mut body);
    let body = String::from_utf8_lossy(&body);
    let (mailer, slots) = settings();
    // a run of the job id that ended a day before this one began is another job's (the id
    // come round again); the day is the mail queue's slack, where one run is mailed about
    // (an array's summary is of many, its elements' runs apart)
    let ended_after = subject(&request.args)
        .filter(|s| !s.starts_with("Slurm Array Summary "))
        .and_then(|_| run_time_s(&std::env::var("SLURM_JOB_RUN_TIME").ok()?))
        .map(|run| chrono::Utc::now().timestamp() - run - MAIL_QUEUE_SLACK_S);
    let summary = request.end_of_job.then(|| match &request.job {
        Some(job) => summary_of(job, slots, ended_after),
        None => Err("the subject names no job".into()),
    });
    send(&mailer, &request.args, &compose(&body, summary))
}

fn send(mailer: &Path, args: &[String], body: &str) -> u8 {
    let child = Command::new(mailer)
        .args(args)
        .stdin(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("senergy mail: cannot run {}: {e}", mailer.display());
            return 1;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body.as_bytes());
    }
    match child.wait() {
        Ok(s) if s.success() => 0,
        Ok(s) => s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1),
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests;
