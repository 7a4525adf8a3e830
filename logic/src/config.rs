//! acct_gather.conf values as Slurm hands them over, and the errors that name bad ones.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The raw string value of each key a source declared; absent keys are not in the map.
#[derive(Debug, Default, Clone)]
pub struct KeyValues(HashMap<&'static str, String>);

impl KeyValues {
    /// No key given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives `key` the raw `value`, replacing any earlier one.
    pub fn set(&mut self, key: &'static str, value: impl Into<String>) {
        self.0.insert(key, value.into());
    }

    /// The value given for `key`, trimmed; `None` where not given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.trim())
    }

    /// Each key given, with its value, in the order of the keys' names.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let mut given: Vec<_> = self.0.iter().map(|(k, v)| (*k, v.trim())).collect();
        given.sort_unstable();
        given.into_iter()
    }
}

/// The value of `key` in the text of a Slurm configuration file (cgroup.conf,
/// acct_gather.conf): the last one given, as Slurm's parser keeps; keys are
/// case-insensitive and `#` starts a comment.
pub fn file_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.split('#').next()?.split_once('='))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, value)| value.trim())
        .rfind(|value| !value.is_empty())
}

/// A key of acct_gather.conf whose value is refused, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("acct_gather.conf: invalid {key}={value}: {reason}")]
pub struct ConfigError {
    /// The key.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// Why it is refused.
    pub reason: String,
}

impl ConfigError {
    /// The error for `key`=`value`, refused for `reason`.
    pub fn new(key: &'static str, value: &str, reason: impl Into<String>) -> Self {
        Self {
            key,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// A sampling period in seconds, fractions accepted, from 0.1 to `max_secs`: energy between
/// two samples is interpolated, and a power step costs up to half a period of that step.
pub(crate) fn period_secs(
    key: &'static str,
    v: &str,
    max_secs: u64,
) -> Result<Duration, ConfigError> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.1..=max_secs as f64).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| ConfigError::new(key, v, format!("expected seconds from 0.1 to {max_secs}")))
}

/// A password that never appears in a log or `scontrol show config`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: &str) -> Self {
        Self(text.to_string())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// An absolute path (`EnergyIPMIPasswordFile`, `EnergyRedfishPasswordFile`): slurmd's
/// working directory is no place to resolve a relative one against.
pub(crate) fn absolute_path(key: &'static str, v: &str) -> Result<Option<PathBuf>, ConfigError> {
    if !v.starts_with('/') {
        return Err(ConfigError::new(key, v, "expected an absolute path"));
    }
    Ok(Some(PathBuf::from(v)))
}

/// How `scontrol show config` shows a password file: its path, never what it holds.
pub(crate) fn shown_password_file(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or_else(|| "(not set)".into(), |p| p.display().to_string())
}

/// A password file is this long at most: a password is one short line.
const MAX_PASSWORD_FILE_BYTES: u64 = 4096;

/// The password in `path`, the file `key` names: its first line, trailing whitespace
/// trimmed. Kept out of acct_gather.conf, which users may read (senergy does; under
/// configless Slurm slurmd caches it 0644 in its spool dir), it is read by slurmd alone, as
/// root, when it opens the BMC. Refused unless the file is a regular file, not reached
/// through a link, of root or SlurmUser (`trusted_dir`) that only its owner may write: anyone who
/// owns or can write it, or the link, chooses the BMC login slurmd uses. Readable by
/// everyone it is a warning. The error names the key and the path, never the password.
pub(crate) fn read_password_file(key: &'static str, path: &Path) -> Result<Secret, String> {
    let refuse = |why: String| format!("{key}={}: {why}", path.display());
    // non-blocking, so a FIFO put there never holds slurmd in open(2); never through a
    // link; checked on the opened file, so the file read is the file judged
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("is a link: name the file itself".into()),
            _ => refuse(format!("cannot be read: {e}")),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    if let Err(users) = crate::trusted_dir::trusted_owner(meta.uid()) {
        return Err(refuse(format!(
            "belongs to uid {}, not to {users}: make it root's (chown root)",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(refuse(format!(
            "is writable by its group or others (mode {:o}): make it root's alone (chmod 600)",
            mode & 0o7777
        )));
    }
    if mode & 0o004 != 0 {
        log::warn!(
            "{key}={}: every user can read the password (mode {:o}): make it root's alone (chmod 600)",
            path.display(),
            mode & 0o7777
        );
    }
    let mut text = String::new();
    file.take(MAX_PASSWORD_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let line = text.lines().next().unwrap_or_default().trim_end();
    if line.is_empty() {
        return Err(refuse("holds no password (its first line is empty)".into()));
    }
    Ok(Secret::new(line))
}

/// The password to log in with: the one `file` names (under `file_key`) where set, else
/// the one acct_gather.conf gives.
pub(crate) fn password(
    given: &Secret,
    file_key: &'static str,
    file: Option<&Path>,
) -> Result<Secret, String> {
    match file {
        Some(path) => read_password_file(file_key, path),
        None => Ok(given.clone()),
    }
}

/// The error for a password given both in acct_gather.conf and in a file: one would be
/// ignored.
pub(crate) fn both_passwords(
    key: &'static str,
    file_key: &'static str,
    values: &KeyValues,
) -> Result<(), ConfigError> {
    match (values.get(key), values.get(file_key)) {
        (Some(_), Some(path)) => Err(ConfigError::new(
            file_key,
            path,
            format!("{key} is set too: set one of the two"),
        )),
        _ => Ok(()),
    }
}

/// yes/no, true/false, on/off, 1/0.
pub(crate) fn boolean(key: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" | "on" => Ok(true),
        "no" | "false" | "0" | "off" => Ok(false),
        _ => Err(ConfigError::new(key, v, "expected yes or no")),
    }
}

/// `yes` or `no`, as [`boolean`] reads them back.
pub(crate) fn yes_no(b: &bool) -> String {
    if *b { "yes" } else { "no" }.into()
}

/// A key of acct_gather.conf as the key reference gives it.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDoc {
    /// The key.
    pub key: &'static str,
    /// Its doc text, a line each: the key's own where it has one, else its field's.
    pub text: &'static str,
    /// Its default as `scontrol show config` shows it; `None` for a password.
    pub default: Option<String>,
}

/// A configuration's keys, declared once: from one table it makes the struct, its
/// `Default`, each key's `pub const`, the key list (`KEYS`, in table order) registered
/// with Slurm, `parse` from acct_gather.conf's pairs and `show` for `scontrol show
/// config`, both in table order, so that a key is added in one place.
///
/// Each field names its default and one or more keys; each key its parser,
/// `fn(key, value) -> Result<field type, ConfigError>`, and how the field shows under it,
/// `fn(&field type) -> String`. A key without `show` is never shown (a password). A field
/// given by several keys takes the first one's value in table order, every one given
/// being checked. An optional `check`, `fn(&Self, &KeyValues) -> Result<(), ConfigError>`,
/// then judges keys together. The module imports `KeyValues` and `ConfigError`, which
/// the expansion names.
///
/// A field's doc lines are its keys' text in the key reference (`docs/keys.md`), which an
/// admin reads: what the key does, in which units, what happens where it is not set, and
/// no Rust name. A key may carry doc lines of its own (of a field given by several keys,
/// each meaning something else): they document its `pub const` and are its text in the
/// reference in place of its field's.
macro_rules! config_keys {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $fdoc:literal])*
                pub $field:ident: $ty:ty = $default:expr, {
                    $(
                        $(#[doc = $kdoc:literal])*
                        $konst:ident = $key:literal: parse($parse:expr) $(, show($show:expr))?;
                    )+
                }
            )*
        }
        $(check: $check:expr;)?
    ) => {
        // the key names, public wherever the table's module is (a private module's stay inside)
        $( $(
            #[allow(unreachable_pub)]
            #[doc = concat!("The acct_gather.conf key `", $key, "`.\n")]
            $(#[doc = $kdoc])*
            pub const $konst: &str = $key;
        )+ )*

        $(#[$meta])*
        pub struct $name {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl $name {
            /// Its acct_gather.conf keys.
            pub const KEYS: &'static [&'static str] = &[$( $( $konst, )+ )*];

            /// Validates the keys given; an error names the key and the value.
            pub fn parse(
                values: &KeyValues,
            ) -> Result<Self, ConfigError> {
                let mut config = Self::default();
                $(
                    let mut first: Option<$ty> = None;
                    $(
                        if let Some(v) = values.get($konst) {
                            let parse: fn(&'static str, &str) -> Result<$ty, ConfigError> = $parse;
                            let value = parse($konst, v)?;
                            if first.is_none() {
                                first = Some(value);
                            }
                        }
                    )+
                    if let Some(value) = first {
                        config.$field = value;
                    }
                )*
                $( let check: fn(&Self, &KeyValues) -> Result<(), ConfigError> = $check;
                   check(&config, values)?; )?
                Ok(config)
            }

            /// Each key with its field's text and its default as `scontrol show config`
            /// shows it: the key reference (`docs/keys.md`, made and checked by a test).
            #[cfg(test)]
            pub fn reference() -> Vec<$crate::config::KeyDoc> {
                let defaults = Self::default();
                let mut docs = Vec::new();
                $(
                    let field_text: &'static str = concat!($($fdoc, "\n",)* "");
                    $(
                        // a key's own text, where it has one, else its field's
                        let key_text: &'static str = concat!($($kdoc, "\n",)* "");
                        let text = if key_text.is_empty() { field_text } else { key_text };
                        let default = None::<String> $( .or_else(|| {
                            let show: fn(&$ty) -> String = $show;
                            Some(show(&defaults.$field))
                        }) )?;
                        docs.push($crate::config::KeyDoc { key: $key, text, default });
                    )+
                )*
                docs
            }

            /// `(key, value)` for `scontrol show config`, defaults included.
            pub fn show(&self) -> Vec<(&'static str, String)> {
                let mut shown = Vec::new();
                $( $( $(
                    let show: fn(&$ty) -> String = $show;
                    shown.push(($konst, show(&self.$field)));
                )? )+ )*
                shown
            }
        }
    };
}
pub(crate) use config_keys;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const KEY: &str = "EnergyIPMIPasswordFile";

    fn file_with(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(format!("pass-{mode:o}"));
        fs::write(&path, text).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_password_file_gives_its_first_line_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logged = crate::scheduler::tests::logged;
        for mode in [0o600, 0o400, 0o640, 0o644] {
            let before = logged().len();
            let path = file_with(dir.path(), "s3cret pass \t\r\nsecond line\n", mode);
            let secret = read_password_file(KEY, &path).expect("readable");
            assert_eq!(secret.expose(), "s3cret pass", "mode {mode:o}");
            // readable by every user: a warning naming the key and the path
            let warned = format!("WARN {KEY}={}: every user can read", path.display());
            let logs = logged()[before..].to_vec();
            assert_eq!(
                logs.iter().any(|l| l.starts_with(&warned)),
                mode == 0o644,
                "{logs:?}"
            );
            assert!(logs.iter().all(|l| !l.contains("s3cret")));
        }
    }

    #[test]
    fn a_password_file_others_may_write_or_not_a_file_is_refused_naming_key_and_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        // a link to a good file: whoever placed the link chose the file
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(file_with(dir.path(), "hunter2\n", 0o600), &link)
            .expect("symlink");
        let cases = [
            (
                file_with(dir.path(), "hunter2\n", 0o620),
                "writable by its group or others",
            ),
            (
                file_with(dir.path(), "hunter2\n", 0o602),
                "writable by its group or others",
            ),
            (
                file_with(dir.path(), "\nhunter2\n", 0o600),
                "holds no password",
            ),
            (dir.path().join("absent"), "cannot be read"),
            (dir.path().to_path_buf(), "is not a regular file"),
            // never waits for a writer
            (fifo, "is not a regular file"),
            (link, "is a link"),
        ];
        for (path, why) in cases {
            let e = read_password_file(KEY, &path).expect_err(why);
            assert!(
                e.starts_with(&format!("{KEY}={}: ", path.display())) && e.contains(why),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    /// A password file of another user (a job's owner who made one and had it named) is
    /// refused, whatever its mode. Needs root (the file is given away).
    #[test]
    fn a_password_file_of_another_user_is_refused() {
        if !crate::test_support::root_or_skip("giving a file to another user") {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file_with(dir.path(), "hunter2\n", 0o600);
        read_password_file(KEY, &path).expect("root's own");
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(64_124)), None).expect("chown");
        let e = read_password_file(KEY, &path).expect_err("another user's");
        assert!(
            e.starts_with(&format!("{KEY}={}: belongs to uid 64124", path.display())),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_password_in_the_file_and_in_the_conf_is_an_error_naming_both() {
        let mut values = KeyValues::new();
        values.set("EnergyIPMIPassword", "hunter2");
        assert!(both_passwords("EnergyIPMIPassword", KEY, &values).is_ok());
        values.set(KEY, "/etc/slurm/bmc.pass");
        let e = both_passwords("EnergyIPMIPassword", KEY, &values)
            .expect_err("both")
            .to_string();
        assert!(
            e.contains(KEY) && e.contains("EnergyIPMIPassword is set too"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        assert!(absolute_path(KEY, "bmc.pass").is_err());
    }
}
