//! GPUs through their drivers' tools: `nvidia-smi` and `amd-smi`, each the driver's energy
//! counter, summed over the node's GPUs.

use serde_json::Value;

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::tool::run_tool;

/// One slot for each maker's tool.
pub(super) fn slots() -> Vec<Slot> {
    [GpuTool::Nvidia, GpuTool::Amd]
        .into_iter()
        .map(|tool| Slot {
            name: tool.name(),
            scope: Scope::Gpus,
            reader: tool.open().map(boxed),
        })
        .collect()
}

/// `nvidia-smi --query-gpu=index,total_energy_consumption --format=csv,noheader,nounits`:
/// one `INDEX, MILLIJOULES` line per GPU; joules summed over them. A GPU without the counter
/// (`[N/A]`, `[Not Supported]`: before Volta) makes the whole unusable.
fn parse_nvidia_smi_energy(text: &str) -> Result<(usize, f64), String> {
    let mut gpus = 0;
    let mut joules = 0.0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (index, mj) = line
            .split_once(',')
            .ok_or_else(|| format!("{line:?} is not INDEX, ENERGY"))?;
        let mj: f64 = mj
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                format!(
                    "GPU {} reports no energy counter ({}: NVML counts energy from Volta on)",
                    index.trim(),
                    mj.trim()
                )
            })?;
        gpus += 1;
        joules += mj / 1000.0;
    }
    if gpus == 0 {
        return Err("it listed no GPU".into());
    }
    Ok((gpus, joules))
}

/// `amd-smi metric --energy --json`: a list of `{"gpu": N, "energy":
/// {"total_energy_consumption": {"value": J, "unit": "J"}}}` (amd-smi's JSON since ROCm 6.1;
/// before, a bare number of joules); joules summed over the GPUs. `"N/A"` (no counter, or
/// a VM guest) makes the whole unusable.
fn parse_amd_smi_energy(text: &str) -> Result<(usize, f64), String> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| format!("its answer is not JSON: {e}"))?;
    let list = doc
        .as_array()
        .or_else(|| doc.get("gpu_data").and_then(Value::as_array))
        .ok_or("its answer is not a list of GPUs")?;
    let mut joules = 0.0;
    for gpu in list {
        let index = gpu.get("gpu").map(Value::to_string).unwrap_or("?".into());
        let energy = gpu
            .get("energy")
            .and_then(|e| e.get("total_energy_consumption"))
            .ok_or_else(|| format!("GPU {index} reports no energy counter"))?;
        let (value, unit) = match energy {
            Value::Object(o) => (
                o.get("value").and_then(Value::as_f64),
                o.get("unit").and_then(Value::as_str).unwrap_or("J"),
            ),
            v => (v.as_f64(), "J"),
        };
        let scale = match unit {
            "J" => 1.0,
            "mJ" => 1e-3,
            "uJ" | "µJ" => 1e-6,
            other => return Err(format!("GPU {index}: energy in unknown unit {other:?}")),
        };
        let value = value
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("GPU {index} reports no energy counter ({energy})"))?;
        joules += value * scale;
    }
    if list.is_empty() {
        return Err("it listed no GPU".into());
    }
    Ok((list.len(), joules))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum GpuTool {
    Nvidia,
    Amd,
}

struct GpuToolReader {
    tool: GpuTool,
    gpus: usize,
}

impl GpuTool {
    fn name(self) -> &'static str {
        match self {
            GpuTool::Nvidia => "nvidia-smi",
            GpuTool::Amd => "amd-smi",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            GpuTool::Nvidia => &[
                "--query-gpu=index,total_energy_consumption",
                "--format=csv,noheader,nounits",
            ],
            GpuTool::Amd => &["metric", "--energy", "--json"],
        }
    }

    fn read(self) -> Result<(usize, f64), Unavailable> {
        let out = run_tool(self.name(), self.args(), &[])?;
        match self {
            GpuTool::Nvidia => parse_nvidia_smi_energy(&out),
            GpuTool::Amd => parse_amd_smi_energy(&out),
        }
        .map_err(|why| Unavailable::Failed(format!("{}: {why}", self.name())))
    }

    fn open(self) -> Result<GpuToolReader, Unavailable> {
        let (gpus, _) = self.read()?;
        Ok(GpuToolReader { tool: self, gpus })
    }
}

impl Reader for GpuToolReader {
    fn path(&self) -> String {
        format!(
            "{} {} ({} GPU(s), the driver's energy counter)",
            self.tool.name(),
            self.tool.args().join(" "),
            self.gpus
        )
    }
    fn scope(&self) -> Scope {
        Scope::Gpus
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let (gpus, joules) = self.tool.read()?;
        if gpus != self.gpus {
            return Err(Unavailable::Failed(format!(
                "{} listed {} GPU(s), then {gpus}",
                self.tool.name(),
                self.gpus
            )));
        }
        Ok(joules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_tools_answers_are_read() {
        // nvidia-smi's CSV without header or units: millijoules
        assert_eq!(
            parse_nvidia_smi_energy("0, 123456789\n1, 1000\n"),
            Ok((2, 123_457.789))
        );
        assert!(
            parse_nvidia_smi_energy("0, [N/A]\n")
                .expect_err("no counter")
                .contains("Volta")
        );
        assert!(parse_nvidia_smi_energy("").is_err());
        // amd-smi since ROCm 6.1: value and unit; before: a number of joules
        let amd = r#"[
    {"gpu": 0, "energy": {"total_energy_consumption": {"value": 1234.5, "unit": "J"}}},
    {"gpu": 1, "energy": {"total_energy_consumption": {"value": 10.0, "unit": "J"}}}
]"#;
        assert_eq!(parse_amd_smi_energy(amd), Ok((2, 1244.5)));
        let old = r#"[{"gpu": 0, "energy": {"total_energy_consumption": 77.25}}]"#;
        assert_eq!(parse_amd_smi_energy(old), Ok((1, 77.25)));
        let na = r#"[{"gpu": 0, "energy": "N/A"}]"#;
        assert!(parse_amd_smi_energy(na).is_err());
        assert!(parse_amd_smi_energy("not json").is_err());
    }
}
