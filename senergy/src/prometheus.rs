//! A job's energy counter as Prometheus scraped it from the nodes' metrics files
//! (`slurm_energy_job_joules_total`, written by slurmd with `EnergyMetricsFile`): its raw
//! samples per node and source, for emissions at each sample's time and power plots.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

/// A job's series lingers this long after it left a node (the plugins' grace period,
/// 120 s, and a scrape or two).
const AFTER_END: f64 = 180.0;
/// The most a response may hold: a day-long job on a few hundred nodes at 15 s scrapes.
const MAX_BODY: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
#[error("Prometheus at {url}: {message}")]
pub struct PromError {
    pub url: String,
    pub message: String,
}

/// One node's counter of the job (one plugin's: `source`), its samples `(unix time, J)`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSamples {
    pub node: String,
    pub source: String,
    pub points: Vec<(f64, f64)>,
}

impl NodeSamples {
    /// The power over each interval between two samples: `(its middle, watts)`.
    pub fn power(&self) -> Vec<(f64, f64)> {
        self.points
            .windows(2)
            .filter(|w| w[1].0 > w[0].0)
            .map(|w| {
                let rise = if w[1].1 >= w[0].1 {
                    w[1].1 - w[0].1
                } else {
                    w[1].1
                };
                ((w[0].0 + w[1].0) / 2.0, rise / (w[1].0 - w[0].0))
            })
            .collect()
    }
}

/// `text` matched literally in a PromQL regex (RE2), inside a double-quoted string.
fn regex_quoted(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push_str("\\\\");
        } else if c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Samples `(time, value)` per `(node, source)`.
type BySeries = BTreeMap<(String, String), Vec<(f64, f64)>>;

pub struct Prometheus {
    base: String,
    agent: Agent,
}

impl Prometheus {
    /// `url`: Prometheus's base URL (`http://prometheus:9090`).
    pub fn new(url: &str) -> Result<Self, PromError> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(PromError {
                url: url.into(),
                message: "expected an http:// or https:// URL".into(),
            });
        }
        let agent = Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Self { base, agent })
    }

    fn error(&self, message: impl Into<String>) -> PromError {
        PromError {
            url: self.base.clone(),
            message: message.into(),
        }
    }

    /// The answer's `data` to an instant query evaluated at `time`.
    fn instant(&self, expr: &str, time: f64) -> Result<Value, PromError> {
        let url = format!("{}/api/v1/query", self.base);
        let mut response = self
            .agent
            .get(&url)
            .query("query", expr)
            .query("time", format!("{time:.3}"))
            .call()
            .map_err(|e| self.error(e.to_string()))?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| self.error(e.to_string()))?;
        let answer: Value = serde_json::from_str(&text)
            .map_err(|_| self.error(format!("HTTP {status}: not Prometheus's API")))?;
        if answer["status"] != "success" {
            let why = answer["error"].as_str().unwrap_or("no reason given");
            return Err(self.error(format!("query {expr:?} failed (HTTP {status}): {why}")));
        }
        Ok(answer["data"].clone())
    }

    /// The raw samples of `selector` over `range` seconds before `at`, per `(node,
    /// source)`, in time order.
    fn raw(&self, selector: &str, range: u64, at: f64) -> Result<BySeries, PromError> {
        let data = self.instant(&format!("{selector}[{range}s]"), at)?;
        let mut found = BySeries::new();
        for series in data["result"].as_array().into_iter().flatten() {
            let label = |k: &str| series["metric"][k].as_str().unwrap_or("").to_string();
            let points = found.entry((label("node"), label("source"))).or_default();
            points.extend(
                series["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.parse::<f64>().ok()?)))
                    .filter(|(_, v)| v.is_finite()),
            );
        }
        for points in found.values_mut() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Ok(found)
    }

    /// The samples of job `job`'s energy counter on each node from `start` to `end` (unix
    /// seconds; `now` for a job still running), each at the time slurmd took it: a scrape
    /// reads the file up to a sample period after, and the same scrape's
    /// `slurm_energy_sampled_timestamp_seconds` says when. Empty when Prometheus has none.
    pub fn job_counters(
        &self,
        job: u32,
        start: i64,
        end: Option<i64>,
        now: i64,
    ) -> Result<Vec<NodeSamples>, PromError> {
        let at = end.map_or(now as f64, |e| (e as f64 + AFTER_END).min(now as f64));
        let range = (at - start as f64 + 60.0).max(60.0).ceil() as u64;
        let counters = self.raw(
            &format!("slurm_energy_job_joules_total{{jobid=\"{job}\"}}"),
            range,
            at,
        )?;
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let nodes: BTreeSet<&str> = counters.keys().map(|(n, _)| n.as_str()).collect();
        let pattern: Vec<String> = nodes.iter().map(|n| regex_quoted(n)).collect();
        let sampled = self.raw(
            &format!(
                "slurm_energy_sampled_timestamp_seconds{{node=~\"{}\"}}",
                pattern.join("|")
            ),
            range,
            at,
        )?;
        // a scrape's samples share its timestamp (ms)
        let ms = |t: f64| (t * 1000.0).round() as i64;
        Ok(counters
            .into_iter()
            .map(|((node, source), points)| {
                let taken: HashMap<i64, f64> = sampled
                    .get(&(node.clone(), source.clone()))
                    .into_iter()
                    .flatten()
                    .map(|&(scraped, t)| (ms(scraped), t))
                    .collect();
                let points = points
                    .into_iter()
                    .map(|(scraped, joules)| {
                        (taken.get(&ms(scraped)).copied().unwrap_or(scraped), joules)
                    })
                    .collect();
                NodeSamples {
                    node,
                    source,
                    points,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_is_each_rise_over_its_interval() {
        let n = NodeSamples {
            node: "n1".into(),
            source: "rust_rapl".into(),
            points: vec![(10.0, 100.0), (12.0, 500.0), (14.0, 1300.0), (16.0, 200.0)],
        };
        // a counter that fell began anew: its value is the rise
        assert_eq!(n.power(), vec![(11.0, 200.0), (13.0, 400.0), (15.0, 100.0)]);
    }

    #[test]
    fn node_names_match_literally() {
        assert_eq!(regex_quoted("node-1"), "node-1");
        assert_eq!(regex_quoted("n1.cluster"), r"n1\\.cluster");
    }

    #[test]
    fn a_url_must_be_http() {
        assert!(Prometheus::new("prometheus:9090").is_err());
        assert!(Prometheus::new("http://prometheus:9090/").is_ok());
    }
}
