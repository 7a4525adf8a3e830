use super::*;

fn args(subject: &str) -> Vec<String> {
    vec!["-s".into(), subject.into(), "alice".into()]
}

/// The subjects slurmctld writes (agent.c `mail_job_info`): the job is the id before
/// `Name=`, an array element's `A_T`, an array's summary its array id.
#[test]
fn the_job_is_the_one_slurmctld_names_before_the_owners_text() {
    for (subject, job) in [
        (
            "Slurm Job_id=123 Name=sim Ended, Run time 00:00:05, COMPLETED, ExitCode 0",
            "123",
        ),
        (
            "Slurm Array Task Job_id=120_4 (124) Name=sim Ended, Run time 00:00:05",
            "120_4",
        ),
        (
            "Slurm Array Summary Job_id=120_* (120) Name=sim Ended, COMPLETED",
            "120",
        ),
        // the owner's name cannot choose the job
        ("Slurm Job_id=7 Name=Slurm Job_id=999 Ended", "7"),
    ] {
        assert_eq!(job_of_subject(subject).as_deref(), Some(job), "{subject}");
    }
    for subject in [
        "",
        "Job_id=123 Name=x",
        "Slurm Job_id= Name=x",
        "Slurm Job_id=12a Name=x",
        "Slurm Job_id=99999999999 Name=x",
        "Slurm Job_id=1_ Name=x",
        "Slurm Job_id=-1 Name=x",
    ] {
        assert_eq!(job_of_subject(subject), None, "{subject:?}");
    }
}

/// Only a job's end (Ended, Failed) gets a summary; the mail's arguments stay as given.
#[test]
fn only_end_of_job_mails_get_a_summary() {
    let subject = "Slurm Job_id=55 Name=sim Ended, Run time 00:00:05, COMPLETED, ExitCode 0";
    for (mail_type, job) in [
        (Some("Ended"), Some("55")),
        (Some("Failed"), Some("55")),
        (Some("Began"), None),
        (Some("Reached 90% of time limit"), None),
        (Some("Requeued"), None),
        (None, None),
    ] {
        let r = Request::new(args(subject), mail_type);
        assert_eq!(r.job.as_deref(), job, "{mail_type:?}");
        assert_eq!(r.end_of_job, job.is_some(), "{mail_type:?}");
        assert_eq!(r.args, args(subject));
    }
    // an end mail whose subject names no job: still an end mail (the note says why)
    let r = Request::new(args("something else"), Some("Ended"));
    assert_eq!((r.end_of_job, r.job), (true, None));
}

#[test]
fn the_summary_follows_the_original_body_or_a_note_says_why_not() {
    // slurmctld's body is empty (/dev/null)
    assert_eq!(
        compose("", Some(Ok("Job 5 (x)\n  energy: 1 J\n".into()))),
        "Energy and emissions (senergy):\nJob 5 (x)\n  energy: 1 J\n"
    );
    assert_eq!(
        compose("hello", Some(Ok("S\n".into()))),
        "hello\n\nEnergy and emissions (senergy):\nS\n"
    );
    assert_eq!(
        compose("hello\n", Some(Err("no answer in 90 s".into()))),
        "hello\n\nsenergy: no energy summary: no answer in 90 s\n"
    );
    // any other mail: unchanged, to the byte
    assert_eq!(compose("a\r\nb", None), "a\r\nb");
}

/// A `--mail-user` that begins with `-` is an option to every mailer: refused, whatever
/// else the arguments hold; ordinary recipients and the subject's own dashes pass.
#[test]
fn a_recipient_a_mailer_would_take_for_an_option_is_refused() {
    let with = |user: &str| {
        let mut a = args("Slurm Job_id=7 Name=-x Ended, Run time 00:00:01, COMPLETED");
        a.pop();
        a.push(user.to_string());
        a
    };
    assert_eq!(option_like_recipient(&with("alice")), None);
    assert_eq!(option_like_recipient(&with("alice@example.org")), None);
    assert_eq!(
        option_like_recipient(&with("-Sexpandaddr=shquote")),
        Some("-Sexpandaddr=shquote")
    );
    assert_eq!(
        option_like_recipient(&with("--exec=!id")),
        Some("--exec=!id")
    );
    let mut two = with("alice");
    two.push("-v".into());
    assert_eq!(option_like_recipient(&two), Some("-v"));
    assert_eq!(option_like_recipient(&["-q".to_string()]), Some("-q"));
}

/// `SLURM_JOB_RUN_TIME` as slurmctld writes it (`secs2time_str`), and what is none.
#[test]
fn a_run_time_is_read_as_slurmctld_writes_it() {
    assert_eq!(run_time_s("00:01:05"), Some(65));
    assert_eq!(run_time_s("12:00:00"), Some(43_200));
    assert_eq!(
        run_time_s("2-03:04:05"),
        Some(2 * 86_400 + 3 * 3_600 + 4 * 60 + 5)
    );
    for bad in [
        "",
        "1:2",
        "00:61:00",
        "-1-00:00:00",
        "a:b:c",
        "1:2:3:4",
        "INVALID",
    ] {
        assert_eq!(run_time_s(bad), None, "{bad:?}");
    }
}
