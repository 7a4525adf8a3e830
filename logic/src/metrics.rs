//! The node's and its jobs' energy in Prometheus's text format, for node_exporter's
//! textfile collector (`EnergyMetricsFile=` in acct_gather.conf).
//!
//! slurmd's ledger keeper writes the file at each ledger update (about once a second),
//! from the ledger itself: the figures are those the node's steps report to Slurm. It is
//! written whole to a temporary file (a name the collector skips, created so that no link
//! planted in the directory is followed: `crate::replace`) renamed over the old one, so
//! a scrape reads a whole file or the previous one. The counters continue across
//! slurmd restarts as the ledger does; a job's series stay for [`GRACE`] after it left the
//! node, so that a scrape sees its final figure, then go.
//!
//! The job's id is the label `jobid`, not `job`: Prometheus gives every scraped series
//! the label `job` (the scrape job's name) and would rename ours. Who ran a job is in a
//! separate info series (`slurm_energy_job_info`), joined by `jobid` where a query needs
//! it: the owner is known only once a task has started, and a label that appeared later
//! would start a new series.
//!
//! Where slurm.conf's `PrivateData` hides jobs, users or usage from other users, the file
//! hides them too unless the admin said otherwise ([`InEffect`]): node_exporter usually
//! serves it to the network without authentication, and a local user reads a 0644 file.
//!
//! One job per module: `config` reads the keys, `text` writes the text from the ledger,
//! `file` decides who may read the file and replaces it.

mod config;
mod file;
mod text;

pub use config::{KEYS, MetricsConfig};
pub(crate) use file::MetricsFile;
pub use file::PrivateData;
pub(crate) use text::{Identity, render};
