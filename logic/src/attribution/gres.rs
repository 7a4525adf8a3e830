//! Which of the node's GPUs a GRES index names: a step's GPUs come from Slurm's own step
//! record ([`super::grant`]) as GRES indexes, places in slurmd's list of the node's GPUs
//! ([`GresOrder`]), matched to the library's GPUs by device file, or by the library's order
//! where Slurm detected the GPUs with that library: never by an enumeration order Slurm did
//! not use.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::hostlist;

/// How slurmd numbers the node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GresOrder {
    /// `AutoDetect` with a library (nvml, rsmi, ...): the GPUs the library detects, sorted
    /// by device file and then by their links, which follow the library's own (PCI bus)
    /// order (`_sort_gpu_by_links_order()`, gres_gpu.c): index i is the library's GPU i.
    Detected,
    /// `AutoDetect=nvidia` (Slurm 24.11 and later, no library): the GPUs the driver lists
    /// carry no links, so slurmd sorts them by device file alone (`_sort_gpu_by_file()`,
    /// natural order: `/dev/nvidia2` before `/dev/nvidia10`): index i is the GPU of the
    /// i-th lowest minor, whatever order the library lists them in. It detects no MIG
    /// instance: a partitioned GPU is one index.
    DetectedByFile,
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

/// How an `AutoDetect` value orders the GPUs; `None`: it detects nothing (gres.conf's
/// records are the order).
fn detected_order(value: &str) -> Option<GresOrder> {
    match value.to_ascii_lowercase().as_str() {
        "off" | "none" | "" => None,
        "nvidia" => Some(GresOrder::DetectedByFile),
        _ => Some(GresOrder::Detected),
    }
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
                    node_autodetect = Some(detected_order(v));
                } else {
                    global_autodetect = Some(detected_order(v));
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
        Ok(node_autodetect
            .or(global_autodetect)
            .flatten()
            .unwrap_or(Self::Files(files)))
    }

    /// Each GRES index's device files: their `(major, minor)` ([`Self::Files`], `None`
    /// where a file is not a device), or none when the library's order applies.
    pub fn device_files(&self) -> Vec<Vec<Option<(u32, u32)>>> {
        match self {
            Self::Detected | Self::DetectedByFile => Vec::new(),
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

/// What a step holds of the node's GPUs ([`super::grant::Grant::allocation`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allocation {
    /// Its GPUs' GRES indexes.
    pub gpus: Vec<u32>,
    /// How much of each GPU it holds, in the sharing GRES's unit (shards, MPS units);
    /// `None`: the GPUs are its whole.
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
        // Slurm 24.11's library-less detection orders by device file
        assert_eq!(
            GresOrder::parse("NodeName=n1 AutoDetect=NVIDIA\n", "n1"),
            Ok(GresOrder::DetectedByFile)
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
}
