//! The command-line tools some readers run (ipmitool, ipmi-dcmi, nvidia-smi, amd-smi): one run,
//! bounded in time, whose failure says whether the tool is missing, refused or broken.

use std::io::{self, Read};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::reader::Unavailable;

/// How long one run of a tool may take before it counts as hung.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// A thread that reads `pipe` to its end.
fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    pipe.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    })
}

/// What [`drain`] read (once the tool has ended, its pipes are closed).
fn drained(reader: Option<JoinHandle<String>>) -> String {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}

/// Runs `program args` (with `envs`), at most [`TOOL_TIMEOUT`]; its standard output.
pub(super) fn run_tool(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<String, Unavailable> {
    let shown = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                Unavailable::Absent(format!("{program} is not installed (not on PATH)"))
            }
            io::ErrorKind::PermissionDenied => {
                Unavailable::Denied(format!("cannot run {program}: {e}"))
            }
            _ => Unavailable::Failed(format!("cannot run {program}: {e}")),
        })?;
    // read as it writes: a tool that says more than a pipe holds (64 KiB) would otherwise
    // block until the timeout and count as hung
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TOOL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Unavailable::Failed(format!(
                    "{shown} answered nothing in {} s",
                    TOOL_TIMEOUT.as_secs()
                )));
            }
            Err(e) => return Err(Unavailable::Failed(format!("{shown}: {e}"))),
        }
    };
    let (out, err) = (drained(stdout), drained(stderr));
    if status.success() {
        return Ok(out);
    }
    let said = err
        .lines()
        .chain(out.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    let lower = said.to_ascii_lowercase();
    let what = format!("{shown}: {status}: {said}");
    Err(
        if lower.contains("permission denied")
            || lower.contains("insufficient permissions")
            || lower.contains("not root")
        {
            Unavailable::Denied(what)
        } else if lower.contains("could not open device")
            || lower.contains("no such file")
            || lower.contains("couldn't communicate with the nvidia driver")
            || lower.contains("no devices were found")
            || lower.contains("driver not initialized")
        {
            Unavailable::Absent(what)
        } else {
            Unavailable::Failed(what)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_absent_not_failed() {
        let why = run_tool("senergy-no-such-tool", &[], &[]).expect_err("missing");
        assert_eq!(why.status(), "absent");
        assert!(why.detail().contains("not installed"), "{why:?}");
    }

    /// A tool that says more than a pipe holds is read as it writes, not taken for hung.
    #[test]
    fn a_long_answer_is_read_whole() {
        let t0 = Instant::now();
        let out = run_tool("sh", &["-c", "yes 0123456789 | head -n 30000"], &[]).expect("ran");
        assert_eq!(out.len(), 30_000 * 11);
        assert!(t0.elapsed() < TOOL_TIMEOUT / 2, "{:?}", t0.elapsed());
    }
}
