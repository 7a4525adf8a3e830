//! What rust_variorum's plugin and its sampler process say to each other, written once
//! for both sides: the sampler's command line ([`Invocation`]) and the lines it writes
//! back ([`Line`]), one JSON object per line:
//!
//! - `{"ready":true,"api":"<symbol>","version":"<variorum_get_current_version()>"}` once,
//!   after the library was loaded and a first (discarded) call succeeded; `version` only
//!   when the library has `variorum_get_current_version` (its value is unreliable: 0.8.0
//!   says 0.5.0);
//! - `{"ok":true,"json":"<Variorum's JSON, as a string>","t_ns":<CLOCK_MONOTONIC of the
//!   call>}` per sample, every period;
//! - `{"ok":false,"error":"<why>"}` for a failed call, or a failed start (then it exits).
//!
//! The sampler is `plugins/variorum-sampler`, the plugin's side is [`super::sampler`].

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Intel power in Variorum is the energy delta since the previous call divided by the
/// time, and the first call after loading returns 0 W; so the sampler makes one call and
/// discards it, then waits this long before the first sample, which the plugin adds to
/// its first wait.
pub const WARMUP: Duration = Duration::from_millis(250);

/// A sample is a few kB (Variorum indents with 4 spaces); anything this long without a
/// newline is not the sampler talking.
pub const MAX_LINE: usize = 1 << 20;

/// The longest sampling period the sampler accepts (one day): anything longer is a typing
/// error, and the bound keeps `Instant + period` far from overflow.
pub const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// The sampler's command line:
///
/// ```text
/// acct_gather_energy_rust_variorum_sampler --library <path or name> --period <seconds>
///     [--result-fd <fd, default 1>] [--parent <pid>]
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// A path, or a bare name for the dynamic loader to search.
    pub library: String,
    /// Between two calls; sent in whole milliseconds.
    pub period: Duration,
    /// The descriptor the lines go to.
    pub result_fd: RawFd,
    /// The sampler exits when its parent is no longer this process.
    pub parent: Option<u32>,
}

/// A sampler command line that cannot be parsed (why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

impl Invocation {
    /// The arguments (without the program name).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--library".to_string(),
            self.library.clone(),
            "--period".to_string(),
            format!("{:.3}", self.period.as_secs_f64()),
            "--result-fd".to_string(),
            self.result_fd.to_string(),
        ];
        if let Some(pid) = self.parent {
            args.extend(["--parent".to_string(), pid.to_string()]);
        }
        args
    }

    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, UsageError> {
        let usage = |text: String| UsageError(text);
        let mut library = None;
        let mut period = None;
        let mut result_fd = 1;
        let mut parent = None;
        let mut args = args.into_iter().map(|arg| {
            arg.into_string()
                .map_err(|arg| usage(format!("{}: not UTF-8", arg.to_string_lossy())))
        });
        while let Some(flag) = args.next() {
            let flag = flag?;
            let value = args
                .next()
                .ok_or_else(|| usage(format!("{flag} needs a value")))??;
            match flag.as_str() {
                "--library" => library = Some(value),
                "--period" => {
                    let secs: f64 = value
                        .parse()
                        .map_err(|_| usage(format!("--period {value}: expected seconds")))?;
                    let valid = Duration::try_from_secs_f64(secs)
                        .ok()
                        .filter(|p| !p.is_zero() && *p <= MAX_PERIOD);
                    period = Some(valid.ok_or_else(|| {
                        usage(format!(
                            "--period {value}: expected 0 < seconds <= {}",
                            MAX_PERIOD.as_secs()
                        ))
                    })?);
                }
                "--result-fd" => {
                    result_fd = value.parse().ok().filter(|fd| *fd >= 0).ok_or_else(|| {
                        usage(format!("--result-fd {value}: expected a descriptor"))
                    })?;
                }
                "--parent" => {
                    let pid = value.parse().ok().filter(|p| *p > 0);
                    parent = Some(
                        pid.ok_or_else(|| usage(format!("--parent {value}: expected a pid")))?,
                    );
                }
                other => return Err(usage(format!("unknown argument {other}"))),
            }
        }
        Ok(Self {
            library: library.ok_or_else(|| usage("--library is required".into()))?,
            period: period.ok_or_else(|| usage("--period is required".into()))?,
            result_fd,
            parent,
        })
    }
}

/// One line from the sampler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Variorum is loaded and answers: the power function it calls, and what the library
    /// says its version is.
    Ready {
        /// The Variorum function it calls for power.
        api: String,
        /// The library's version, where it says.
        version: Option<String>,
    },
    /// Variorum's JSON, and when the sampler called for it (CLOCK_MONOTONIC, which is
    /// system-wide, in nanoseconds), if it said.
    Sample {
        /// Variorum's JSON.
        json: String,
        /// When the sampler called for it, CLOCK_MONOTONIC nanoseconds.
        t_ns: Option<u64>,
    },
    /// Why a call (or the start) failed.
    Failed(String),
}

/// A line that is not one of [`Line`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineError(String);

impl Line {
    /// The line, newline included. JSON strings escape newlines, so it is one line
    /// whatever the texts hold.
    pub fn encode(&self) -> String {
        let value = match self {
            Line::Ready { api, version } => {
                let mut value = json!({"ready": true, "api": api});
                if let Some(v) = version {
                    value["version"] = json!(v);
                }
                value
            }
            Line::Sample { json, t_ns } => {
                let mut value = json!({"ok": true, "json": json});
                if let Some(t) = t_ns {
                    value["t_ns"] = json!(t);
                }
                value
            }
            Line::Failed(error) => json!({"ok": false, "error": error}),
        };
        let mut line = value.to_string();
        line.push('\n');
        line
    }

    /// Decodes one line (with or without its newline).
    pub fn decode(line: &str) -> Result<Line, LineError> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| LineError(format!("{e}: {}", excerpt(line))))?;
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        if value.get("ready").and_then(Value::as_bool) == Some(true) {
            return Ok(Line::Ready {
                api: text("api").unwrap_or_default(),
                version: text("version"),
            });
        }
        match (
            value.get("ok").and_then(Value::as_bool),
            text("json"),
            text("error"),
        ) {
            (Some(true), Some(json), _) => Ok(Line::Sample {
                json,
                t_ns: value.get("t_ns").and_then(Value::as_u64),
            }),
            (Some(false), _, Some(error)) => Ok(Line::Failed(error)),
            _ => Err(LineError(excerpt(line))),
        }
    }
}

fn excerpt(line: &str) -> String {
    const MAX: usize = 120;
    let line = line.trim_end();
    match line.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &line[..end]),
        None => line.to_string(),
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the sampler stamps samples with it.
pub fn monotonic_ns() -> Option<u64> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok()?;
    let secs = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u64::try_from(now.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The `Instant` of a sample's `t_ns` (std's `Instant` is CLOCK_MONOTONIC on Linux, but
/// cannot be built from a raw value): now minus its age. `None` for a time in the future
/// or before boot.
pub fn instant_of(t_ns: u64) -> Option<Instant> {
    let age = monotonic_ns()?.checked_sub(t_ns)?;
    Instant::now().checked_sub(Duration::from_nanos(age))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn decodes_every_kind_of_line() {
        assert_eq!(
            Line::decode(r#"{"ready":true,"api":"variorum_get_power_json","version":"0.5.0"}"#),
            Ok(Line::Ready {
                api: "variorum_get_power_json".into(),
                version: Some("0.5.0".into())
            })
        );
        assert_eq!(
            Line::decode(r#"{"ok":true,"json":"{\n    \"h\": {}\n}","t_ns":12}"#),
            Ok(Line::Sample {
                json: "{\n    \"h\": {}\n}".into(),
                t_ns: Some(12)
            })
        );
        assert_eq!(
            Line::decode(r#"{"ok":true,"json":"{}"}"#),
            Ok(Line::Sample {
                json: "{}".into(),
                t_ns: None
            })
        );
        assert_eq!(
            Line::decode(r#"{"ok":false,"error":"variorum_get_power_json returned -1"}"#),
            Ok(Line::Failed("variorum_get_power_json returned -1".into()))
        );
    }

    #[test]
    fn anything_else_is_an_error_quoting_the_line() {
        for bad in [
            "",
            "garbage",
            "{\"ok\":true}",
            "[1]",
            "{\"ok\":\"yes\",\"json\":\"{}\"}",
            "{\"ok\":false}",
            "{\"ready\":false,\"api\":\"x\"}",
        ] {
            let err = Line::decode(bad).expect_err(bad);
            assert!(err.to_string().contains(bad), "{bad}: {err}");
        }
        let long = format!("{{\"ok\":{}", "x".repeat(500));
        let err = Line::decode(&long).expect_err("long").to_string();
        assert!(err.ends_with("...") && err.len() < 250, "{err}");
    }

    #[test]
    fn the_wire_format_is_stable() {
        // tests/tests/variorum_sampler.rs reads these lines as text
        assert_eq!(
            Line::Ready {
                api: "variorum_get_power_json".into(),
                version: None
            }
            .encode(),
            "{\"api\":\"variorum_get_power_json\",\"ready\":true}\n"
        );
        assert_eq!(
            Line::Failed("no \"power\"".into()).encode(),
            "{\"error\":\"no \\\"power\\\"\",\"ok\":false}\n"
        );
    }

    #[test]
    fn the_command_line_round_trips() {
        let invocation = Invocation {
            library: "/opt/variorum/lib/libvariorum.so".into(),
            period: Duration::from_millis(1500),
            result_fd: 7,
            parent: Some(4242),
        };
        assert_eq!(
            invocation.args(),
            [
                "--library",
                "/opt/variorum/lib/libvariorum.so",
                "--period",
                "1.500",
                "--result-fd",
                "7",
                "--parent",
                "4242"
            ]
        );
        let parsed = Invocation::parse(invocation.args().into_iter().map(OsString::from));
        assert_eq!(parsed, Ok(invocation));
        assert_eq!(
            Invocation::parse(os(&["--period", "0.1", "--library", "libvariorum.so"])),
            Ok(Invocation {
                library: "libvariorum.so".into(),
                period: Duration::from_millis(100),
                result_fd: 1,
                parent: None,
            })
        );
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        for (args, expect) in [
            (&["--period", "1"][..], "--library is required"),
            (&["--library", "l"][..], "--period is required"),
            (&["--library"][..], "--library needs a value"),
            (
                &["--library", "l", "--period", "0"][..],
                "--period 0: expected 0 <",
            ),
            (
                &["--library", "l", "--period", "-1"][..],
                "--period -1: expected 0 <",
            ),
            (
                &["--library", "l", "--period", "86401"][..],
                "--period 86401",
            ),
            (&["--library", "l", "--period", "NaN"][..], "--period NaN"),
            (
                &["--library", "l", "--period", "soon"][..],
                "expected seconds",
            ),
            (
                &["--library", "l", "--period", "1", "--result-fd", "-1"][..],
                "--result-fd -1",
            ),
            (
                &["--library", "l", "--period", "1", "--parent", "0"][..],
                "--parent 0",
            ),
            (
                &["--library", "l", "--period", "1", "--verbose", "1"][..],
                "unknown argument --verbose",
            ),
        ] {
            let err = Invocation::parse(os(args)).expect_err(expect).to_string();
            assert!(err.contains(expect), "{args:?}: {err}");
        }
        let not_utf8 = OsString::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"lib\xff"),
        );
        let err = Invocation::parse(vec![
            "--library".into(),
            not_utf8,
            "--period".into(),
            "1".into(),
        ])
        .expect_err("not UTF-8");
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn a_sample_time_maps_back_to_its_instant() {
        let now = Instant::now();
        let t = monotonic_ns().expect("clock");
        let at = instant_of(t - 2_000_000_000).expect("two seconds ago");
        let age = now.saturating_duration_since(at);
        assert!(
            age > Duration::from_millis(1990) && age < Duration::from_millis(2010),
            "{age:?}"
        );
        assert_eq!(instant_of(t + 60_000_000_000), None, "in the future");
    }

    fn line() -> impl Strategy<Value = Line> {
        prop_oneof![
            (any::<String>(), proptest::option::of(any::<String>()))
                .prop_map(|(api, version)| Line::Ready { api, version }),
            (any::<String>(), proptest::option::of(any::<u64>()))
                .prop_map(|(json, t_ns)| Line::Sample { json, t_ns }),
            any::<String>().prop_map(Line::Failed),
        ]
    }

    proptest! {
        /// Whatever the texts hold (newlines, quotes, control characters, any Unicode),
        /// a line is one line and decodes to what was encoded.
        #[test]
        fn every_line_round_trips(line in line()) {
            let text = line.encode();
            prop_assert!(text.ends_with('\n'));
            prop_assert_eq!(text.matches('\n').count(), 1);
            prop_assert_eq!(Line::decode(&text), Ok(line));
        }

        /// Periods are sent in milliseconds: what arrives is the period rounded to one.
        #[test]
        fn every_invocation_round_trips(
            library in "[^\u{0}]{1,40}",
            period_ms in 1u64..=86_400_000,
            result_fd in 0..RawFd::MAX,
            parent in proptest::option::of(1u32..=u32::MAX),
        ) {
            let invocation = Invocation {
                library,
                period: Duration::from_millis(period_ms),
                result_fd,
                parent,
            };
            let parsed = Invocation::parse(invocation.args().into_iter().map(OsString::from))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let error = parsed.period.abs_diff(invocation.period);
            prop_assert!(error < Duration::from_micros(1), "{:?}", error);
            prop_assert_eq!(Invocation { period: invocation.period, ..parsed }, invocation);
        }

        /// No line, however broken, makes decoding panic.
        #[test]
        fn decoding_never_panics(text in any::<String>()) {
            let _ = Line::decode(&text);
        }
    }
}
