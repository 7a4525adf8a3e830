//! HTTP(S) to the BMC (ureq over rustls): one agent with timeouts on every request, and
//! one login: a Redfish session (SessionService) where the BMC grants one, else basic
//! authentication on every request.

use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::Value;
use ureq::Agent;
use ureq::http::StatusCode;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

use super::config::{KEY_CA_FILE, KEY_INSECURE, KEY_URL, RedfishConfig};

/// Bigger than any Redfish resource this plugin reads.
const MAX_BODY: u64 = 4 << 20;
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

#[derive(Debug)]
enum Login {
    /// `X-Auth-Token`; the session's URI is deleted when the client is dropped.
    Session {
        token: String,
        uri: Option<String>,
    },
    /// `Authorization: Basic ...`, precomputed.
    Basic(String),
    None,
}

pub(super) struct Client {
    agent: Agent,
    base: String,
    login: Login,
}

impl Client {
    /// Connects and logs in. Runs in the poller thread.
    pub(super) fn connect(config: &RedfishConfig) -> Result<Self, String> {
        let base = config
            .url
            .clone()
            .ok_or_else(|| format!("{KEY_URL} is not set in acct_gather.conf"))?;
        let agent = Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls(config)?)
            .build()
            .new_agent();
        let mut client = Client {
            agent,
            base,
            login: Login::None,
        };
        client.login = client.log_in(config);
        Ok(client)
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    pub(super) fn auth(&self) -> &'static str {
        match self.login {
            Login::Session { .. } => "a Redfish session",
            Login::Basic(_) => "basic authentication",
            Login::None => "no authentication",
        }
    }

    fn log_in(&self, config: &RedfishConfig) -> Login {
        let Some(user) = &config.username else {
            return Login::None;
        };
        let basic = Login::Basic(format!(
            "Basic {}",
            BASE64_STANDARD.encode(format!("{user}:{}", config.password.expose()))
        ));
        let body = serde_json::json!({"UserName": user, "Password": config.password.expose()});
        let answer = self
            .agent
            .post(format!("{}{SESSIONS}", self.base))
            .header("Content-Type", "application/json")
            .send(body.to_string());
        match answer {
            Ok(r) if r.status().is_success() => {
                let header = |name| {
                    r.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                match header("X-Auth-Token") {
                    Some(token) => Login::Session {
                        token,
                        uri: header("Location"),
                    },
                    None => {
                        log::info!(
                            "the BMC granted no session token (HTTP {}); using basic authentication",
                            r.status()
                        );
                        basic
                    }
                }
            }
            Ok(r) => {
                log::info!(
                    "the BMC refused a session (HTTP {}); using basic authentication",
                    r.status()
                );
                basic
            }
            Err(e) => {
                log::info!("no session ({e}); using basic authentication");
                basic
            }
        }
    }

    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.login {
            Login::Session { token, .. } => request.header("X-Auth-Token", token),
            Login::Basic(header) => request.header("Authorization", header),
            Login::None => request,
        }
    }

    /// GETs a resource (`/redfish/v1/...`) as JSON.
    pub(super) fn get(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut response = self
            .authorized(self.agent.get(&url))
            .header("Accept", "application/json")
            .call()
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(format!(
                "GET {url}: HTTP {status}: check EnergyRedfishUsername and EnergyRedfishPassword"
            ));
        }
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| format!("GET {url}: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("GET {url}: not JSON ({e})"))
    }
}

impl Drop for Client {
    /// Ends the session, so that the BMC's few session slots are not used up by restarts.
    fn drop(&mut self) {
        if let Login::Session {
            uri: Some(uri),
            token,
        } = &self.login
        {
            let url = if uri.starts_with("http") {
                uri.clone()
            } else {
                format!("{}{uri}", self.base)
            };
            let _ = self.agent.delete(&url).header("X-Auth-Token", token).call();
        }
    }
}

/// How the BMC's certificate is checked: against the site's CA file when one is named,
/// else the system's trust store (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else the distribution's
/// bundle, as openssl finds it), or not at all when the admin said so.
fn tls(config: &RedfishConfig) -> Result<TlsConfig, String> {
    let tls = TlsConfig::builder();
    if config.insecure {
        log::warn!(
            "{KEY_INSECURE}=yes: the BMC's certificate is not verified (for a self-signed \
             BMC); anyone on the network path to it can pose as it"
        );
        return Ok(tls.disable_verification(true).build());
    }
    let certs: Vec<Certificate<'static>> = match &config.ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("{KEY_CA_FILE}={}: {e}", path.display()))?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!(
                    "{KEY_CA_FILE}={}: no PEM certificate in the file",
                    path.display()
                ));
            }
            certs
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let certs: Vec<_> = found
                .certs
                .iter()
                .map(|der| Certificate::from_der(der.as_ref()).to_owned())
                .collect();
            if certs.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or("none found".to_string(), ToString::to_string);
                return Err(format!(
                    "no CA certificate in the system's trust store ({why}): name the BMC's CA \
                     with {KEY_CA_FILE}"
                ));
            }
            certs
        }
    };
    Ok(tls.root_certs(RootCerts::new_with_certs(&certs)).build())
}
