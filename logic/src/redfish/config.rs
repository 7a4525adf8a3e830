//! The rust_redfish keys of acct_gather.conf.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{
    ConfigError, KeyValues, Secret, absolute_path, boolean, both_passwords, config_keys,
    period_secs, shown_password_file, yes_no,
};
use crate::power::{parse_max_watts, show_max_watts};

/// BMCs refresh their power readings every few seconds at best; more often costs the BMC.
const DEFAULT_FREQUENCY: Duration = Duration::from_secs(5);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// A reading above this is no node's where the chassis state no `PowerCapacityWatts`:
/// more than the largest 8-GPU servers draw (about 14 kW).
pub(super) const DEFAULT_MAX_WATTS: u32 = 20_000;

config_keys! {
    /// rust_redfish's acct_gather.conf keys: which BMC, its credentials and chassis.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RedfishConfig {
        /// The BMC's Redfish service: `https://host[:port]` or `http://host[:port]`, no
        /// path (a trailing `/redfish/v1` is accepted). `%n` in it is the node's name and
        /// `%h` its host's, so that one file serves every node (`https://%n-bmc`). Over
        /// http the login crosses the network in clear text (a warning). Not set:
        /// rust_redfish reads no BMC and the node reports no energy.
        pub url: Option<String> = None, {
            KEY_URL = "EnergyRedfishUrl": parse(|_, v| parse_url(v).map(Some)),
                show(|u| u.clone().unwrap_or_else(|| "(not set)".into()));
        }
        /// The BMC account slurmd logs in as: a Redfish session, else basic authentication.
        /// Not set: no login.
        pub username: Option<String> = None, {
            KEY_USERNAME = "EnergyRedfishUsername":
                parse(|_, v| Ok(Some(v).filter(|u| !u.is_empty()).map(str::to_string))),
                show(|u| u.clone().unwrap_or_default());
        }
        /// The password of `EnergyRedfishUsername`. Never logged nor shown by `scontrol
        /// show config`, but acct_gather.conf holding it should be root's alone (mode
        /// `0600`): `EnergyRedfishPasswordFile` keeps it out of the file. Not with
        /// `EnergyRedfishPasswordFile`.
        pub password: Secret = Secret::default(), {
            KEY_PASSWORD = "EnergyRedfishPassword": parse(|_, v| Ok(Secret::new(v)));
        }
        /// A file whose first line is the BMC password (trailing spaces trimmed), read by
        /// slurmd as root when it opens the BMC, so that acct_gather.conf holds no password
        /// and can stay readable by users (senergy reads it). An absolute path to a regular
        /// file, not a link, of root (or SlurmUser) that only its owner may write: another
        /// is refused, and the node reports no energy; one every user may read is a
        /// warning. Not with `EnergyRedfishPassword`. `scontrol show config` shows its
        /// path.
        pub password_file: Option<PathBuf> = None, {
            KEY_PASSWORD_FILE = "EnergyRedfishPasswordFile": parse(absolute_path),
                show(shown_password_file);
        }
        /// A PEM file of the CA certificates (or the certificate) the BMC's certificate is
        /// checked against, in place of the system's trust store. Not set: the system's
        /// trust store, as openssl finds it (SSL_CERT_FILE, SSL_CERT_DIR, else the
        /// distribution's bundle), where a site CA installed is trusted.
        pub ca_file: Option<PathBuf> = None, {
            KEY_CA_FILE = "EnergyRedfishCaFile": parse(|k, v| {
                if !v.starts_with('/') {
                    return Err(ConfigError::new(k, v, "expected an absolute path"));
                }
                Ok(Some(PathBuf::from(v)))
            }),
            show(|f| f.as_ref().map_or_else(
                || "(the system's trust store)".into(),
                |p| p.display().to_string(),
            ));
        }
        /// `yes`: the BMC's certificate is not checked (a self-signed BMC without a CA
        /// file); anyone on the network path to the BMC can then pose as it, and slurmd's
        /// log says so.
        pub insecure: bool = false, {
            KEY_INSECURE = "EnergyRedfishInsecure": parse(boolean), show(yes_no);
        }
        /// Seconds between two readings of the BMC, fractions accepted. Power between
        /// readings is interpolated, so a power step costs up to half a period of that
        /// step; each reading is a request the BMC answers (BMCs refresh their readings
        /// every few seconds at best).
        pub frequency: Duration = DEFAULT_FREQUENCY, {
            KEY_FREQUENCY = "EnergyRedfishFrequency": parse(|k, v| period_secs(k, v, 3600)),
                show(|d| d.as_secs_f64().to_string());
        }
        /// Seconds one request to the BMC may take, fractions accepted, before slurmd gives
        /// up and reconnects, backing off.
        pub timeout: Duration = DEFAULT_TIMEOUT, {
            KEY_TIMEOUT = "EnergyRedfishTimeout": parse(|k, v| period_secs(k, v, 60)),
                show(|d| d.as_secs_f64().to_string());
        }
        /// The one chassis to read, by its Id (the last part of
        /// `/redfish/v1/Chassis/<Id>`). Not set: every chassis member, their power summed.
        pub chassis: Option<String> = None, {
            KEY_CHASSIS = "EnergyRedfishChassis": parse(|k, v| {
                if v.is_empty() || v.contains(['/', '?', '#', ' ']) {
                    return Err(ConfigError::new(
                        k,
                        v,
                        "expected a chassis Id (the last part of /redfish/v1/Chassis/<Id>)",
                    ));
                }
                Ok(Some(v.to_string()))
            }),
            show(|c| c.clone().unwrap_or_else(|| "(all, summed)".into()));
        }
        /// The most power the node can draw (every chassis read, summed), in whole watts: a
        /// power reading above it (a glitch) is dropped, never counted as energy, and
        /// bridged from the readings around it; an energy counter rising faster is not
        /// counted either. Not set: the chassis' stated `PowerCapacityWatts` (or
        /// `PowerLimitWatts.AllowableMax`) times 1.5, else 20 000 W.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyRedfishMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, true));
        }
    }
    check: |_, values| both_passwords(KEY_PASSWORD, KEY_PASSWORD_FILE, values);
}

impl RedfishConfig {
    /// With the password read from `EnergyRedfishPasswordFile` where set: what slurmd (or
    /// `senergy check`, as root) logs in with. An error names the key and the path.
    pub fn with_password(&self) -> Result<Self, String> {
        if let Some(warning) = self.login_in_clear() {
            log::warn!("{warning}");
        }
        let password = crate::config::password(
            &self.password,
            KEY_PASSWORD_FILE,
            self.password_file.as_deref(),
        )?;
        Ok(Self {
            password,
            ..self.clone()
        })
    }
}

impl RedfishConfig {
    /// Where the BMC's login would cross the network unencrypted (an `http://` URL with a
    /// user): what to say. Not refused: a BMC on a private management network may speak
    /// only http.
    fn login_in_clear(&self) -> Option<String> {
        let url = self.url.as_deref()?;
        (url.starts_with("http://") && self.username.is_some()).then(|| {
            format!(
                "{KEY_URL}={url}: {KEY_USERNAME} and its password cross the network in clear \
                 text over http: use https where the BMC serves it"
            )
        })
    }
}

/// `http(s)://host[:port]`, with an optional trailing `/` (or `/redfish/v1`, which is
/// where every request goes anyway).
fn parse_url(v: &str) -> Result<String, ConfigError> {
    let err = |why: &str| ConfigError::new(KEY_URL, v, why);
    let (scheme, rest) = v
        .split_once("://")
        .ok_or_else(|| err("expected http://host[:port] or https://host[:port]"))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(err("the scheme must be http or https"));
    }
    let authority = rest
        .trim_end_matches('/')
        .trim_end_matches("/redfish/v1")
        .trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(err(
            "expected host[:port] after the scheme, no path or user",
        ));
    }
    let port = if let Some(inner) = authority.strip_prefix('[') {
        let (_, after) = inner.split_once(']').ok_or_else(|| err("unclosed ["))?;
        after.strip_prefix(':')
    } else {
        authority.split_once(':').map(|(_, p)| p)
    };
    if let Some(p) = port
        && p.parse::<u16>().ok().filter(|p| *p > 0).is_none()
    {
        return Err(err("the port must be 1-65535"));
    }
    Ok(format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&'static str, &str)]) -> Result<RedfishConfig, ConfigError> {
        let mut values = KeyValues::new();
        for (k, v) in pairs {
            values.set(k, *v);
        }
        RedfishConfig::parse(&values)
    }

    /// One acct_gather.conf for a cluster of BMCs named after their nodes.
    /// A user's login over http is said (once per opening of the BMC), over https or
    /// without a user it is not.
    #[test]
    fn a_login_over_http_is_warned_of() {
        let warning = |url: &str, user: Option<&str>| {
            let mut pairs = vec![(KEY_URL, url)];
            pairs.extend(user.map(|u| (KEY_USERNAME, u)));
            parse(&pairs).expect("valid").login_in_clear()
        };
        let said = warning("http://bmc1", Some("root")).expect("a warning");
        assert!(
            said.starts_with("EnergyRedfishUrl=http://bmc1: EnergyRedfishUsername"),
            "{said}"
        );
        assert_eq!(warning("https://bmc1", Some("root")), None);
        assert_eq!(warning("http://bmc1", None), None);
    }

    #[test]
    #[cfg(feature = "redfish")]
    fn the_url_names_each_nodes_own_bmc() {
        use crate::plugin::Plugin;
        let c = parse(&[(KEY_URL, "https://%n-bmc.example.org:8443")]).expect("valid");
        assert_eq!(c.show()[0].1, "https://%n-bmc.example.org:8443");
        let mine = super::super::Redfish::for_node(&c, "node17");
        assert_eq!(
            mine.url.as_deref(),
            Some("https://node17-bmc.example.org:8443")
        );
        let h = parse(&[(KEY_URL, "http://bmc-%h")]).expect("valid");
        let mine = super::super::Redfish::for_node(&h, "n2");
        // %h: the host's name, whatever the node's
        let host = format!("http://bmc-{}", crate::source::host_name());
        assert_eq!(mine.url.as_deref(), Some(host.as_str()));
    }

    #[test]
    fn valid_keys() {
        let c = parse(&[
            (KEY_URL, "https://bmc-n1:8443/redfish/v1/"),
            (KEY_USERNAME, "root"),
            (KEY_PASSWORD, "calvin"),
            (KEY_CA_FILE, "/etc/slurm/bmc-ca.pem"),
            (KEY_FREQUENCY, "0.5"),
            (KEY_TIMEOUT, "2"),
            (KEY_CHASSIS, "1"),
        ])
        .expect("valid");
        assert_eq!(c.url.as_deref(), Some("https://bmc-n1:8443"));
        assert_eq!(c.frequency, Duration::from_millis(500));
        assert_eq!(c.chassis.as_deref(), Some("1"));
        assert_eq!(
            parse(&[(KEY_URL, "HTTP://[fe80::1]:80")])
                .expect("v6")
                .url
                .as_deref(),
            Some("http://[fe80::1]:80")
        );
    }

    #[test]
    fn the_password_is_never_shown() {
        let c = parse(&[(KEY_PASSWORD, "topsecret")]).expect("valid");
        assert!(!format!("{c:?}").contains("topsecret"));
        assert!(
            c.show()
                .iter()
                .all(|(k, v)| *k != KEY_PASSWORD && !v.contains("topsecret"))
        );
    }

    #[test]
    fn the_password_file_is_read_at_open_and_only_its_path_shown() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bmc.pass");
        std::fs::write(&path, "topsecret\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let file = path.display().to_string();
        let c = parse(&[(KEY_PASSWORD_FILE, &file)]).expect("valid");
        assert!(c.show().contains(&(KEY_PASSWORD_FILE, file.clone())));
        assert_eq!(
            c.with_password().expect("readable").password.expose(),
            "topsecret"
        );
        let e = parse(&[(KEY_PASSWORD, "topsecret"), (KEY_PASSWORD_FILE, &file)])
            .expect_err("both")
            .to_string();
        assert!(
            e.contains("EnergyRedfishPasswordFile") && e.contains("EnergyRedfishPassword is set")
        );
        assert!(!e.contains("topsecret"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).expect("chmod");
        let e = c.with_password().expect_err("writable by the group");
        assert!(
            e.starts_with(&format!("EnergyRedfishPasswordFile={file}: ")),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_key_and_value() {
        for (key, value) in [
            (KEY_URL, "bmc-n1"),
            (KEY_URL, "ftp://bmc"),
            (KEY_URL, "https://"),
            (KEY_URL, "https://bmc:0"),
            (KEY_URL, "https://bmc:x"),
            (KEY_URL, "https://user@bmc"),
            (KEY_URL, "https://bmc/other/path"),
            (KEY_CA_FILE, "ca.pem"),
            (KEY_INSECURE, "maybe"),
            (KEY_FREQUENCY, "0"),
            (KEY_TIMEOUT, "61"),
            (KEY_CHASSIS, "a/b"),
            (KEY_MAX_WATTS, "0"),
            (KEY_MAX_WATTS, "1.5e3"),
            (KEY_MAX_WATTS, "20000000"),
        ] {
            let text = parse(&[(key, value)]).expect_err(value).to_string();
            assert!(text.contains(&format!("{key}={value}")), "{text}");
        }
    }
}
