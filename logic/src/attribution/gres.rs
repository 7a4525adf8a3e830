//! Which of the node's GPUs a step holds, as Slurm allocated them (its GPU GRES): the same
//! with or without `ConstrainDevices`, on cgroup v1 and v2.
//!
//! Slurm tells a step's tasks the GRES indexes of its GPUs in their environment:
//! `SLURM_STEP_GPUS` for srun's steps, `SLURM_JOB_GPUS` for the batch and interactive
//! steps (`gres_common_gpu_set_env()`), also for a step holding only shards or MPS of a GPU
//! (the shard and MPS plugins name the underlying GPU), with `SLURM_SHARDS_ON_NODE` and
//! `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for how much of it. This is the one source that is
//! the same in every configuration: the devices cgroup limits only with `ConstrainDevices`
//! and is not readable back under cgroup v2; Slurm's step structure is internal and changes
//! with every release; `CUDA_VISIBLE_DEVICES` is renumbered from 0 under
//! `ConstrainDevices`. A step's environment is read once, from its first task (or batch
//! script) that has started: until then it holds nothing known, and the GPU's energy
//! meanwhile is charged to it when its holding is known ([`super::ledger`]).
//!
//! A GRES index is a place in slurmd's list of the node's GPUs ([`GresOrder`]), matched to
//! the library's GPUs by device file, or by the library's order where Slurm detected the
//! GPUs with that library: never by an enumeration order Slurm did not use.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::hostlist;

use super::StepId;

/// How slurmd numbers the node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GresOrder {
    /// `AutoDetect` (nvml, nvidia, rsmi, ...): the GPUs the library detects, sorted by
    /// device file and then by their links, which follow the library's own (PCI bus) order
    /// (`_sort_gpu_by_links_order()`, gres_gpu.c): index i is the library's GPU i.
    Detected,
    /// Without: gres.conf's `Name=gpu` records for this node in the file's order, one index
    /// per device file (`File=/dev/nvidia[0-1]`: two), one per `MultipleFiles` record (a
    /// MIG instance: its GPU's file, then its capability files).
    Files(Vec<Vec<PathBuf>>),
}

/// A line's `key=value` pairs; keys are case-insensitive, `#` starts a comment.
fn pairs(line: &str) -> Vec<(String, String)> {
    let line = line.split('#').next().unwrap_or_default();
    line.split_whitespace()
        .filter_map(|word| {
            let (k, v) = word.split_once('=')?;
            Some((k.to_ascii_lowercase(), v.to_string()))
        })
        .collect()
}

fn autodetects(value: &str) -> bool {
    !matches!(value.to_ascii_lowercase().as_str(), "off" | "none" | "")
}

/// Whether a gres.conf `NodeName=` list names `node`.
fn names_node(list: &str, node: &str) -> Result<bool, String> {
    hostlist::expand(list)
        .map(|names| names.iter().any(|n| n == node))
        .map_err(|e| format!("gres.conf NodeName={list}: {e}"))
}

impl GresOrder {
    /// From gres.conf's text, for the node `node`. An error names the line.
    pub fn parse(text: &str, node: &str) -> Result<Self, String> {
        let mut global_autodetect = None;
        let mut node_autodetect = None;
        let mut files = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let pairs = pairs(line);
            let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            let here = match get("nodename") {
                Some(list) => {
                    names_node(list, node).map_err(|e| format!("line {}: {e}", number + 1))?
                }
                None => true,
            };
            if !here {
                continue;
            }
            if let Some(v) = get("autodetect") {
                if get("nodename").is_some() {
                    node_autodetect = Some(autodetects(v));
                } else {
                    global_autodetect = Some(autodetects(v));
                }
            }
            if !get("name").is_some_and(|n| n.eq_ignore_ascii_case("gpu")) {
                continue;
            }
            if let Some(multiple) = get("multiplefiles") {
                let expanded = hostlist::expand(multiple).map_err(|e| {
                    format!(
                        "gres.conf line {}: MultipleFiles={multiple}: {e}",
                        number + 1
                    )
                })?;
                files.push(expanded.into_iter().map(PathBuf::from).collect());
            } else if let Some(file) = get("file") {
                let expanded = hostlist::expand(file)
                    .map_err(|e| format!("gres.conf line {}: File={file}: {e}", number + 1))?;
                files.extend(expanded.into_iter().map(|f| vec![PathBuf::from(f)]));
            }
        }
        Ok(if node_autodetect.or(global_autodetect).unwrap_or(false) {
            Self::Detected
        } else {
            Self::Files(files)
        })
    }

    /// Each GRES index's device files: their `(major, minor)` ([`Self::Files`], `None`
    /// where a file is not a device), or none when the library's order applies.
    pub fn device_files(&self) -> Vec<Vec<Option<(u32, u32)>>> {
        match self {
            Self::Detected => Vec::new(),
            Self::Files(records) => records
                .iter()
                .map(|files| files.iter().map(|f| device_number(f)).collect())
                .collect(),
        }
    }
}

/// A device file's numbers: the file's own, else (a file slurmd cannot see either) the
/// kernel's for its name, as Slurm takes a GPU's number from it: `/dev/nvidiaN` is NVIDIA's
/// minor N, `/dev/dri/renderDN` the DRM minor N.
fn device_number(path: &Path) -> Option<(u32, u32)> {
    if let Some(rdev) = std::fs::metadata(path)
        .ok()
        .map(|m| m.rdev())
        .filter(|r| *r != 0)
    {
        return Some((
            nix::sys::stat::major(rdev) as u32,
            nix::sys::stat::minor(rdev) as u32,
        ));
    }
    let name = path.file_name()?.to_str()?;
    let number = |prefix: &str| name.strip_prefix(prefix)?.parse::<u32>().ok();
    number("nvidia")
        .map(|n| (NVIDIA_MAJOR, n))
        .or_else(|| number("renderD").map(|n| (DRM_MAJOR, n)))
}

/// Linux's character-device majors of GPU device files (gpu-libs' too, which this crate
/// has only with its `gpu` feature).
const NVIDIA_MAJOR: u32 = 195;
const DRM_MAJOR: u32 = 226;

/// What a step holds of the node's GPUs, from one of its tasks' environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Its GPUs' GRES indexes.
    pub gpus: Vec<u32>,
    /// Its MIG instances' UUIDs, where `CUDA_VISIBLE_DEVICES` names them (Slurm does for
    /// the MIG instances it detects).
    pub mig_uuids: Vec<String>,
    /// How much of each GPU it holds, in the sharing GRES's unit (shards, an MPS
    /// percentage); `None`: the GPUs are its whole.
    pub shares: Option<f64>,
}

impl Allocation {
    /// Its shares of each of its GPUs (shards spread evenly where a step holds shards of
    /// several GPUs: Slurm tells only their total on the node).
    pub fn shares_per_gpu(&self) -> f64 {
        match self.shares {
            Some(total) if !self.gpus.is_empty() => total / self.gpus.len() as f64,
            Some(total) => total,
            None => 1.0,
        }
    }
}

/// A GRES index list (`0,2`, `0-1`); `None` if malformed.
fn indexes(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
                if hi < lo || hi - lo > 4096 {
                    return None;
                }
                out.extend(lo..=hi);
            }
            None => out.push(item.parse().ok()?),
        }
    }
    Some(out)
}

/// The step's allocation from a process's environment (`/proc/<pid>/environ`, NUL
/// separated); `None` when it is not a task's (no `SLURM_JOB_ID`: a process the
/// slurmstepd forked that has not become a task yet). A task without GPU variables holds
/// no GPU.
pub fn allocation(environ: &[u8], step: StepId) -> Option<Allocation> {
    let text = String::from_utf8_lossy(environ);
    let vars: Vec<(&str, &str)> = text
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let get = |key: &str| vars.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v);
    get("SLURM_JOB_ID")?;
    // a srun step's tasks inherit the batch script's SLURM_JOB_GPUS: the step's own first
    let list = match step {
        StepId::BATCH | StepId::INTERACTIVE => get("SLURM_JOB_GPUS"),
        _ => get("SLURM_STEP_GPUS").or_else(|| get("SLURM_JOB_GPUS")),
    };
    let gpus = list.and_then(indexes).unwrap_or_default();
    let number = |key: &str| {
        get(key)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let shares =
        number("SLURM_SHARDS_ON_NODE").or_else(|| number("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    let mig_uuids = get("CUDA_VISIBLE_DEVICES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|d| d.starts_with("MIG-"))
        .map(str::to_string)
        .collect();
    Some(Allocation {
        gpus,
        mig_uuids,
        shares,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_conf_orders_the_files_of_this_node_unless_gpus_are_detected() {
        let conf = "# the node's GPUs\n\
                    AutoDetect=off\n\
                    NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[2-3]\n\
                    NodeName=n3 Name=gpu File=/dev/nvidia9\n\
                    Name=shard Count=8 File=/dev/nvidia2\n\
                    nodename=n1 name=GPU file=/dev/nvidia0 # last\n";
        assert_eq!(
            GresOrder::parse(conf, "n1"),
            Ok(GresOrder::Files(vec![
                vec!["/dev/nvidia2".into()],
                vec!["/dev/nvidia3".into()],
                vec!["/dev/nvidia0".into()]
            ]))
        );
        assert_eq!(
            GresOrder::parse(conf, "n3"),
            Ok(GresOrder::Files(vec![vec!["/dev/nvidia9".into()]]))
        );
        let mig = "Name=gpu MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap[21-22]\n";
        assert_eq!(
            GresOrder::parse(mig, "n1"),
            Ok(GresOrder::Files(vec![vec![
                "/dev/nvidia0".into(),
                "/dev/nvidia-caps/nvidia-cap21".into(),
                "/dev/nvidia-caps/nvidia-cap22".into()
            ]]))
        );
        assert_eq!(
            GresOrder::parse("AutoDetect=nvml\nName=gpu File=/dev/nvidia1\n", "n1"),
            Ok(GresOrder::Detected)
        );
        // a node's own AutoDetect overrides the global one
        let own = "AutoDetect=nvml\nNodeName=n2 AutoDetect=off Name=gpu File=/dev/nvidia4\n";
        assert_eq!(GresOrder::parse(own, "n1"), Ok(GresOrder::Detected));
        assert_eq!(
            GresOrder::parse(own, "n2"),
            Ok(GresOrder::Files(vec![vec!["/dev/nvidia4".into()]]))
        );
        // files slurmd cannot see are numbered as the kernel names them
        assert_eq!(
            GresOrder::Files(vec![
                vec!["/nonexistent/nvidia4".into()],
                vec!["/nonexistent/dri/renderD130".into()],
                vec!["/nonexistent/gpu".into()]
            ])
            .device_files(),
            vec![vec![Some((195, 4))], vec![Some((226, 130))], vec![None]]
        );
        let bad = GresOrder::parse("Name=gpu File=/dev/nvidia[1-\n", "n1").expect_err("bad");
        assert!(
            bad.contains("line 1") && bad.contains("File=/dev/nvidia[1-"),
            "{bad}"
        );
    }

    fn env(vars: &[&str]) -> Vec<u8> {
        vars.iter()
            .flat_map(|v| format!("{v}\0").into_bytes())
            .collect()
    }

    #[test]
    fn a_steps_gpus_and_shares_come_from_its_tasks_environment() {
        let step = StepId(0);
        // srun's step: its own list, not the batch script's inherited one
        let task = env(&["SLURM_JOB_ID=7", "SLURM_JOB_GPUS=0,1", "SLURM_STEP_GPUS=1"]);
        assert_eq!(
            allocation(&task, step),
            Some(Allocation {
                gpus: vec![1],
                mig_uuids: vec![],
                shares: None
            })
        );
        assert_eq!(
            allocation(&task, StepId::BATCH).map(|a| a.gpus),
            Some(vec![0, 1])
        );
        let shards = env(&[
            "SLURM_JOB_ID=7",
            "SLURM_STEP_GPUS=0-1",
            "SLURM_SHARDS_ON_NODE=4",
        ]);
        let a = allocation(&shards, step).expect("a task");
        assert_eq!((a.gpus.clone(), a.shares_per_gpu()), (vec![0, 1], 2.0));
        let mps = env(&[
            "SLURM_JOB_ID=7",
            "SLURM_STEP_GPUS=2",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=15",
        ]);
        assert_eq!(allocation(&mps, step).map(|a| a.shares), Some(Some(15.0)));
        let mig = env(&[
            "SLURM_JOB_ID=7",
            "SLURM_STEP_GPUS=0",
            "CUDA_VISIBLE_DEVICES=MIG-4b1c-aa,MIG-4b1c-bb",
        ]);
        assert_eq!(
            allocation(&mig, step).map(|a| a.mig_uuids),
            Some(vec!["MIG-4b1c-aa".to_string(), "MIG-4b1c-bb".to_string()])
        );
        // a task without GPUs holds none; a process that is not a task yet tells nothing
        assert_eq!(
            allocation(&env(&["SLURM_JOB_ID=7"]), step).map(|a| a.gpus),
            Some(vec![])
        );
        assert_eq!(allocation(&env(&["PATH=/bin"]), step), None);
        assert_eq!(
            allocation(&env(&["SLURM_JOB_ID=7", "SLURM_STEP_GPUS=x"]), step).map(|a| a.gpus),
            Some(vec![])
        );
    }
}
