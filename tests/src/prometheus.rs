//! Debian's Prometheus and node_exporter on free loopback ports, as a site runs them:
//! node_exporter's textfile collector reads a directory the cluster's slurmd writes its
//! metrics file in, and Prometheus scrapes node_exporter at the interval the test picks
//! (the file is written every second) into a TSDB in the test's directory. Queries go
//! through Prometheus's HTTP API (curl).

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct Prometheus {
    pub port: u16,
    /// What runs a program where the cluster's clients run ([`Cluster::client_prefix`]).
    ///
    /// [`Cluster::client_prefix`]: crate::cluster::Cluster::client_prefix
    prefix: Vec<OsString>,
    exporter: Child,
    server: Child,
}

/// One series of a query's answer: its labels and value.
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

impl Prometheus {
    /// The directory under `dir` that node_exporter's textfile collector reads, made.
    pub fn textfile_dir(dir: &Path) -> PathBuf {
        let textfile_dir = dir.join("textfile");
        fs::create_dir_all(&textfile_dir).expect("textfile dir");
        textfile_dir
    }

    /// A program run through `prefix`.
    fn command(prefix: &[OsString], program: &str) -> Command {
        let mut c = Command::new(&prefix[0]);
        c.args(&prefix[1..]).arg(program);
        c
    }

    /// Starts both under `dir`, scraping every `scrape_secs`, where `prefix` runs programs
    /// (the cluster's clients' network namespace,
    /// [`crate::cluster::Cluster::client_prefix`]).
    pub fn start(dir: &Path, prefix: Vec<OsString>, scrape_secs: u32) -> Prometheus {
        let textfile_dir = Self::textfile_dir(dir);
        let exporter_port = free_port();
        let exporter = Self::command(&prefix, "/usr/bin/prometheus-node-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{exporter_port}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!(
                "--collector.textfile.directory={}",
                textfile_dir.display()
            ))
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("node_exporter.log")).expect("log"))
            .spawn()
            .expect("start prometheus-node-exporter (Debian's prometheus-node-exporter)");
        let port = free_port();
        let config = dir.join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {scrape_secs}s\n  evaluation_interval: {scrape_secs}s\n\
                 scrape_configs:\n  - job_name: node\n    static_configs:\n      \
                 - targets: ['127.0.0.1:{exporter_port}']\n"
            ),
        )
        .expect("prometheus.yml");
        let server = Self::command(&prefix, "/usr/bin/prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("prometheus.log")).expect("log"))
            .spawn()
            .expect("start prometheus (Debian's prometheus)");
        let p = Prometheus {
            port,
            prefix,
            exporter,
            server,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while p.get("/-/ready").is_none_or(|t| !t.contains("Ready")) {
            assert!(
                Instant::now() < deadline,
                "Prometheus not ready in 60 s:\n{}",
                fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            sleep(Duration::from_millis(200));
        }
        p
    }

    fn get(&self, path: &str) -> Option<String> {
        let out = Self::command(&self.prefix, "curl")
            .args(["-sf", "--max-time", "10"])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The API's answer to an instant query evaluated at `time` (Unix seconds; now when
    /// `None`); panics with Prometheus's error.
    fn instant(&self, expr: &str, time: Option<f64>) -> Value {
        let mut curl = Self::command(&self.prefix, "curl");
        curl.args(["-s", "--max-time", "20", "--get", "--data-urlencode"])
            .arg(format!("query={expr}"));
        if let Some(t) = time {
            curl.args(["--data-urlencode", &format!("time={t:.3}")]);
        }
        let out = curl
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("query {expr:?}: not JSON ({e}): {text}"));
        assert_eq!(
            answer["status"], "success",
            "query {expr:?} failed: {answer}"
        );
        answer
    }

    /// The raw samples `(time, value)` of the one series a range selector (`x[5m]`) picks.
    pub fn samples(&self, range_selector: &str) -> Vec<(f64, f64)> {
        let answer = self.instant(range_selector, None);
        let result = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            result.len(),
            1,
            "{range_selector:?}: one series wanted: {answer}"
        );
        result[0]["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.parse().ok()?)))
            .collect()
    }

    /// An instant query's result (a vector or a scalar), evaluated now.
    pub fn query(&self, expr: &str) -> Vec<Series> {
        self.query_at(expr, None)
    }

    /// An instant query's result evaluated at `time` (Unix seconds; now when `None`).
    pub fn query_at(&self, expr: &str, time: Option<f64>) -> Vec<Series> {
        let answer = self.instant(expr, time);
        let data = &answer["data"];
        match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| Series {
                    labels: r["metric"].as_object().cloned().unwrap_or_default(),
                    value: r["value"][1]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(f64::NAN),
                })
                .collect(),
            Some("scalar") => vec![Series {
                labels: serde_json::Map::new(),
                value: data["result"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
            }],
            other => panic!("query {expr:?}: unexpected result type {other:?}: {answer}"),
        }
    }

    /// Waits until `expr` returns a series, for at most `timeout`.
    pub fn wait_for(&self, expr: &str, timeout: Duration) -> Vec<Series> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.query(expr);
            if !found.is_empty() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no series for {expr:?} in {timeout:?}"
            );
            sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        for child in [&mut self.server, &mut self.exporter] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
