//! RAPL through model-specific registers (`/dev/cpu/N/msr`, or msr-safe).
//!
//! An MSR device is read with one `pread` of 8 bytes at offset = register address.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::domain::Domain;
use super::topology::CpuModel;

const INTEL_RAPL_POWER_UNIT: u64 = 0x606;
const INTEL_PKG_ENERGY_STATUS: u64 = 0x611;
const INTEL_DRAM_ENERGY_STATUS: u64 = 0x619;
const INTEL_PLATFORM_ENERGY_STATUS: u64 = 0x64D;
const AMD_RAPL_POWER_UNIT: u64 = 0xC001_0299;
const AMD_PKG_ENERGY_STATUS: u64 = 0xC001_029B;

/// Energy status registers are 32 bits wide.
pub(super) const COUNTER_MODULUS: u64 = 1 << 32;

/// Intel server parts whose DRAM domain counts in a fixed 2^-16 J (15.3 uJ) unit instead of
/// the package unit (Linux `intel_rapl_common.c`, `rapl_defaults_hsw_server`): Haswell-X,
/// Broadwell-X, Skylake-X/Cascade Lake, Ice Lake-X, Ice Lake-D, Knights Landing, Knights Mill.
const INTEL_FIXED_DRAM_UNIT_MODELS: [u32; 7] = [63, 79, 85, 106, 108, 87, 133];
const FIXED_DRAM_ESU: u32 = 16;

/// Where a vendor keeps its RAPL registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    pub vendor: &'static str,
    pub unit: u64,
    pub package: u64,
    pub dram: Option<u64>,
    pub psys: Option<u64>,
    /// Energy status unit of DRAM when it is not the package's.
    pub dram_esu: Option<u32>,
}

impl Layout {
    pub(super) fn for_cpu(cpu: &CpuModel) -> Result<Self, String> {
        match cpu.vendor.as_str() {
            "GenuineIntel" => Ok(Layout {
                vendor: "Intel",
                unit: INTEL_RAPL_POWER_UNIT,
                package: INTEL_PKG_ENERGY_STATUS,
                dram: Some(INTEL_DRAM_ENERGY_STATUS),
                psys: Some(INTEL_PLATFORM_ENERGY_STATUS),
                dram_esu: (cpu.family == 6 && INTEL_FIXED_DRAM_UNIT_MODELS.contains(&cpu.model))
                    .then_some(FIXED_DRAM_ESU),
            }),
            // Zen and later (family 17h+); Hygon Dhyana is family 18h.
            "AuthenticAMD" | "HygonGenuine" if cpu.family >= 0x17 => Ok(Layout {
                vendor: "AMD",
                unit: AMD_RAPL_POWER_UNIT,
                package: AMD_PKG_ENERGY_STATUS,
                dram: None,
                psys: None,
                dram_esu: None,
            }),
            _ => Err(format!(
                "no RAPL registers known for {} family {:#x} model {:#x}",
                cpu.vendor, cpu.family, cpu.model
            )),
        }
    }

    pub(super) fn register(&self, domain: Domain) -> Option<u64> {
        match domain {
            Domain::Package => Some(self.package),
            Domain::Dram => self.dram,
            Domain::Psys => self.psys,
        }
    }
}

/// Energy status unit: the counter counts 2^-ESU joules (bits 12:8 of the unit register).
pub(super) fn energy_status_unit(unit_register: u64) -> u32 {
    ((unit_register >> 8) & 0x1f) as u32
}

/// One package's MSR device, opened once (std opens with `O_CLOEXEC`, so the descriptor
/// never leaks into user tasks that slurmstepd starts).
#[derive(Debug)]
pub(super) struct Device {
    file: File,
    path: PathBuf,
}

impl Device {
    pub(super) fn open(path: &Path) -> Result<Arc<Self>, String> {
        File::open(path)
            .map(|file| {
                Arc::new(Self {
                    file,
                    path: path.to_path_buf(),
                })
            })
            .map_err(|e| {
                let advice = match e.kind() {
                    io::ErrorKind::NotFound => " (is the msr module loaded? modprobe msr)",
                    io::ErrorKind::PermissionDenied => {
                        " (slurmd must run as root, or use msr-safe with EnergyRaplMsrDevice)"
                    }
                    _ => "",
                };
                format!("cannot open {}: {e}{advice}", path.display())
            })
    }

    pub(super) fn read(&self, register: u64) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        let offset = i64::try_from(register)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "register out of range"))?;
        let n = nix::sys::uio::pread(&self.file, &mut buf, offset).map_err(io::Error::from)?;
        if n != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "short read of MSR {register:#x} from {}",
                    self.path.display()
                ),
            ));
        }
        Ok(u64::from_le_bytes(buf))
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

/// An energy status register of one package.
#[derive(Debug)]
pub(super) struct Register {
    pub device: Arc<Device>,
    pub address: u64,
}

impl Register {
    pub(super) fn read_raw(&self) -> io::Result<u64> {
        self.device
            .read(self.address)
            .map(|v| v & (COUNTER_MODULUS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn cpu(vendor: &str, family: u32, model: u32) -> CpuModel {
        CpuModel {
            vendor: vendor.into(),
            family,
            model,
        }
    }

    #[test]
    fn intel_server_dram_uses_the_fixed_unit() {
        let skx = Layout::for_cpu(&cpu("GenuineIntel", 6, 85)).expect("intel");
        assert_eq!(skx.dram_esu, Some(16));
        let client = Layout::for_cpu(&cpu("GenuineIntel", 6, 158)).expect("intel");
        assert_eq!(client.dram_esu, None);
        assert_eq!(client.register(Domain::Dram), Some(0x619));
    }

    #[test]
    fn amd_zen_has_package_only() {
        let zen = Layout::for_cpu(&cpu("AuthenticAMD", 0x19, 17)).expect("amd");
        assert_eq!(zen.register(Domain::Package), Some(0xC001_029B));
        assert_eq!(zen.register(Domain::Dram), None);
        assert!(Layout::for_cpu(&cpu("AuthenticAMD", 0x15, 1)).is_err());
        assert!(Layout::for_cpu(&cpu("CentaurHauls", 6, 15)).is_err());
    }

    #[test]
    fn unit_register_decoding() {
        // Intel's typical 0xA0E03: ESU 14 (61 uJ)
        assert_eq!(energy_status_unit(0x000A_0E03), 14);
        // AMD's typical 0x41003: ESU 16
        assert_eq!(energy_status_unit(0x0004_1003), 16);
    }

    #[test]
    fn reads_little_endian_values_at_the_register_offset() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("msr");
        let file = File::create(&path).expect("create");
        file.write_all_at(
            &0xDEAD_0000_1234_5678u64.to_le_bytes(),
            AMD_PKG_ENERGY_STATUS,
        )
        .expect("write");
        let device = Device::open(&path).expect("open");
        let reg = Register {
            device: Arc::clone(&device),
            address: AMD_PKG_ENERGY_STATUS,
        };
        // the upper 32 bits are reserved
        assert_eq!(reg.read_raw().expect("read"), 0x1234_5678);
        // past the end of the file is an error, not a zero
        assert!(device.read(AMD_PKG_ENERGY_STATUS + 8).is_err());
        assert!(Device::open(&tmp.path().join("missing")).is_err());
    }
}
