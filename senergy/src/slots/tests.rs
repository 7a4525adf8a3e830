use super::*;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// N slots: N summaries hold one each, the next finds none (and does not wait); a slot let
/// go is taken again. The directory is made 0700.
#[test]
fn at_most_n_are_held_and_a_released_one_is_taken_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(DIR_NAME);
    let held: Vec<Slot> = (0..3)
        .map(|k| take(&dir, 3).unwrap_or_else(|e| panic!("slot {k}: {e}")))
        .collect();
    let mode = std::fs::metadata(&dir).expect("made").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let started = Instant::now();
    match take(&dir, 3) {
        Err(SlotError::Busy { slots: 3, .. }) => {}
        other => panic!("a fourth summary got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a busy answer does not wait"
    );
    drop(held);
    let again: Vec<Slot> = (0..3)
        .map(|k| take(&dir, 3).unwrap_or_else(|e| panic!("slot {k} again: {e}")))
        .collect();
    assert_eq!(again.len(), 3);
}

/// The kernel keeps the count across processes: a slot another process holds (util-linux
/// `flock`, the same flock(2)) is not taken, and is free again once that process is killed.
#[test]
fn another_process_holds_its_slot_until_it_dies() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(DIR_NAME);
    drop(take(&dir, 1).expect("the directory and slot.0"));
    // the shell locks its descriptor 9 (flock(1) on an inherited descriptor), then becomes
    // sleep, which keeps it: the lock is the process's to its death
    let mut other = Command::new("sh")
        .args(["-c", "exec 9>>\"$1\" && flock -n 9 && exec sleep 60", "sh"])
        .arg(dir.join("slot.0"))
        .stdout(Stdio::null())
        .spawn()
        .expect("sh and util-linux flock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while take(&dir, 1).is_ok() {
        assert!(Instant::now() < deadline, "the other process never held it");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches!(take(&dir, 1), Err(SlotError::Busy { .. })));
    other.kill().expect("kill");
    other.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(10);
    let slot = loop {
        match take(&dir, 1) {
            Ok(slot) => break slot,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("never freed: {e}"),
        }
    };
    drop(slot);
}

/// A directory others may write, a symlink in its place, or a slot file that is a
/// symlink: refused, with the path and why (a job's owner must not hold or redirect slots).
#[test]
fn a_directory_or_slot_others_control_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = take(&open, 2).expect_err("a world-writable directory");
    assert!(
        matches!(&err, SlotError::Unusable { dir, why } if dir == &open && why.contains("mode 777")),
        "{err}"
    );
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    assert!(matches!(take(&link, 2), Err(SlotError::Unusable { .. })));
    let dir = tmp.path().join(DIR_NAME);
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::symlink(elsewhere.join("x"), dir.join("slot.0")).expect("symlink");
    let err = take(&dir, 2).expect_err("a symlinked slot");
    assert!(err.to_string().contains("slot.0"), "{err}");
    assert!(
        !elsewhere.join("x").exists(),
        "nothing made through the link"
    );
}
