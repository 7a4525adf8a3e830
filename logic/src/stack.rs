//! Stacked plugins whose meters overlap: each rail counted once.
//!
//! Slurm splits `AcctGatherEnergyType` on commas and sums the plugins' figures. Where two of
//! them meter the same hardware it would be counted twice: on NVIDIA Grace Hopper (GH200)
//! NVML's energy counter of each GPU covers its whole module (Grace CPU, LPDDR5X, Hopper GPU
//! and HBM; zeus issue #172), which rust_hwmon's module rail ("Module Power Socket N") also
//! meters; on AMD MI300A (an APU) amd-smi's energy of each socket covers its CPU cores, GPU
//! and HBM, whose CPU part RAPL's package also meters.
//!
//! The rule, the same whatever the order of `AcctGatherEnergyType`: **the plugin that charges
//! a rail to the jobs holding it keeps it; the node meter beside it leaves out what that
//! covers.** rust_gpu charges each GPU (and what its counter covers) to the jobs holding that
//! GPU, which a node meter cannot: so stacked with rust_gpu, rust_hwmon counts no Grace
//! Hopper module (nor the Grace, CPU and SysIO rails inside one: they stay parts beside the
//! node), and rust_rapl no package of an MI300A socket. Each plugin decides alone, from
//! `AcctGatherEnergyType` and its own hardware, and logs once at start what it covers and
//! what it leaves to the other. A job holding no GPU on such a node is then charged none of
//! the module: to charge a GH200 node's modules by CPUs (`EnergyAttribution=shared`), run
//! rust_hwmon alone.

/// What a GPU's energy counter covers.
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Covers {
    /// The GPU board.
    Board,
    /// A whole Grace Hopper module (NVML on GH200).
    GraceHopperModule,
    /// A whole APU socket, CPU cores included (amd-smi on MI300A).
    ApuSocket,
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
impl Covers {
    /// For the log.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Covers::Board => "the GPU board",
            Covers::GraceHopperModule => {
                "the whole Grace Hopper module (Grace CPU, LPDDR5X, Hopper GPU and HBM): \
                 stacked with rust_hwmon, the module is counted here, rust_hwmon leaves it out"
            }
            Covers::ApuSocket => {
                "the whole APU socket (CPU cores, GPU and HBM): stacked with rust_rapl, the \
                 socket is counted here, rust_rapl leaves its package out"
            }
        }
    }
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
/// What the energy counter of a GPU named `name` (NVML's or amd-smi's name) covers.
pub(crate) fn gpu_covers(name: &str) -> Covers {
    let name = name.to_ascii_uppercase();
    if name.contains("GH200") {
        Covers::GraceHopperModule
    } else if name.contains("MI300A") {
        Covers::ApuSocket
    } else {
        Covers::Board
    }
}

/// A node meter's configuration: its acct_gather.conf keys, and whether rust_gpu is
/// stacked beside it, which then takes the rails a GPU's counter covers (a Grace Hopper
/// module from rust_hwmon, an MI300A socket's package from rust_rapl).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stacked<K> {
    /// Its acct_gather.conf keys.
    pub keys: K,
    /// rust_gpu is stacked beside it ([`leaves_to_gpus`]).
    pub beside_gpus: bool,
}

impl<K: Clone> Stacked<K> {
    /// As parsed: alone until slurmd says what is stacked ([`Self::among`]).
    pub(crate) fn alone(keys: K) -> Self {
        Self {
            keys,
            beside_gpus: false,
        }
    }

    /// The same keys where `AcctGatherEnergyType` stacks `plugins`.
    pub(crate) fn among(&self, plugins: &[String]) -> Self {
        Self {
            keys: self.keys.clone(),
            beside_gpus: leaves_to_gpus(plugins),
        }
    }
}

/// Whether `plugins` (`AcctGatherEnergyType`'s names, with or without
/// `acct_gather_energy/`) stacks rust_gpu.
pub(crate) fn beside_gpus(plugins: &[String]) -> bool {
    plugins
        .iter()
        .any(|p| p.trim().rsplit('/').next() == Some("rust_gpu"))
}

/// Whether a node meter stacked with `plugins` leaves a rail of its own that a GPU's counter
/// may cover (a Grace Hopper module, an MI300A socket's package) to rust_gpu.
pub(crate) fn leaves_to_gpus(plugins: &[String]) -> bool {
    beside_gpus(plugins)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(text: &str) -> Vec<String> {
        text.split(',').map(String::from).collect()
    }

    #[test]
    fn what_a_gpus_counter_covers_by_its_name() {
        assert_eq!(gpu_covers("NVIDIA GH200 480GB"), Covers::GraceHopperModule);
        assert_eq!(
            gpu_covers("NVIDIA GH200 144G HBM3e"),
            Covers::GraceHopperModule
        );
        assert_eq!(gpu_covers("AMD Instinct MI300A"), Covers::ApuSocket);
        assert_eq!(gpu_covers("NVIDIA H100 80GB HBM3"), Covers::Board);
        assert_eq!(gpu_covers("AMD Instinct MI300X"), Covers::Board);
    }

    /// Whatever the order of AcctGatherEnergyType, the node meter leaves the rail to rust_gpu.
    #[test]
    fn the_rule_holds_in_either_order() {
        for stack in [
            "acct_gather_energy/rust_hwmon,acct_gather_energy/rust_gpu",
            "acct_gather_energy/rust_gpu,acct_gather_energy/rust_hwmon",
            "acct_gather_energy/rust_rapl, acct_gather_energy/rust_gpu",
        ] {
            assert!(leaves_to_gpus(&types(stack)), "{stack}");
        }
        for alone in [
            "acct_gather_energy/rust_hwmon",
            "acct_gather_energy/rust_rapl,acct_gather_energy/rust_ipmi",
            "",
        ] {
            assert!(!leaves_to_gpus(&types(alone)), "{alone}");
        }
    }
}
