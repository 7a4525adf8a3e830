//! The BMC through `ipmitool dcmi power reading`, else FreeIPMI's `ipmi-dcmi`: its power
//! now (DCMI Get Power Reading), in band or, with ipmitool, over the LAN as acct_gather.conf
//! configures rust_ipmi.

use slurm_energy_logic::{IpmiConfig, IpmiTarget};

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::site::{NodeConf, configured};
use super::tool::run_tool;

/// The BMC through ipmitool, else FreeIPMI's ipmi-dcmi; one slot, the BMC is one.
pub(super) fn slot(site: &NodeConf) -> Slot {
    let ipmi = configured::<slurm_energy_logic::Ipmi>(site).unwrap_or_default();
    let first = BmcTool::open(BmcTool::Ipmitool, &ipmi);
    let reader = match first {
        Ok(r) => Ok(boxed(r)),
        Err(why) => match BmcTool::open(BmcTool::IpmiDcmi, &ipmi) {
            Ok(r) => Ok(boxed(r)),
            // the first tool's reason, unless it is only missing
            Err(second) => Err(match (&why, &second) {
                (Unavailable::Absent(a), Unavailable::Absent(b)) => {
                    Unavailable::Absent(format!("{a}; {b}"))
                }
                (Unavailable::Absent(_), _) => second,
                _ => why,
            }),
        },
    };
    Slot {
        name: "bmc",
        scope: Scope::WholeNode,
        reader,
    }
}

/// The first number of `text` (`196 Watts`, `: 176 Watts`).
fn first_number(text: &str) -> Option<f64> {
    text.split(|c: char| c.is_whitespace() || c == ':')
        .find_map(|w| w.parse::<f64>().ok())
        .filter(|w| w.is_finite() && *w >= 0.0)
}

/// `ipmitool dcmi power reading`: the `Instantaneous power reading:  196 Watts` line, unless
/// `Power reading state is: deactivated`.
fn parse_ipmitool_power(text: &str) -> Result<f64, String> {
    if text
        .lines()
        .any(|l| l.contains("Power reading state is") && l.contains("deactivated"))
    {
        return Err("the BMC's power reading is deactivated".into());
    }
    text.lines()
        .find_map(|l| first_number(l.trim().strip_prefix("Instantaneous power reading")?))
        .ok_or_else(|| "no \"Instantaneous power reading\" in its answer".into())
}

/// FreeIPMI `ipmi-dcmi --get-system-power-statistics`: `Current Power : 176 Watts`, unless
/// `Power Measurement : Not Available` (or anything but `Active`).
fn parse_ipmi_dcmi_power(text: &str) -> Result<f64, String> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    if let Some(state) = field("Power Measurement")
        && state != "Active"
    {
        return Err(format!("the BMC's power measurement is {state:?}"));
    }
    field("Current Power")
        .as_deref()
        .and_then(first_number)
        .ok_or_else(|| "no \"Current Power\" in its answer".into())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum BmcTool {
    Ipmitool,
    IpmiDcmi,
}

struct BmcToolReader {
    tool: BmcTool,
    args: Vec<String>,
    password: Option<String>,
}

impl BmcTool {
    fn open(self, config: &IpmiConfig) -> Result<BmcToolReader, Unavailable> {
        let mut args: Vec<String> = Vec::new();
        let mut password = None;
        match (&config.target, self) {
            (IpmiTarget::Lan { host, port }, BmcTool::Ipmitool) => {
                args.extend(["-I", "lanplus", "-C", "3", "-H"].map(String::from));
                args.extend([host.clone(), "-p".into(), port.to_string()]);
                if let Some(user) = &config.username {
                    args.extend(["-U".into(), user.clone()]);
                }
                // -E: the password from IPMI_PASSWORD, not on a command line ps shows; from
                // EnergyIPMIPasswordFile where set, which root alone may read
                args.push("-E".into());
                let config = config.with_password().map_err(Unavailable::Failed)?;
                password = Some(config.password.expose().to_string());
            }
            (IpmiTarget::Lan { .. }, BmcTool::IpmiDcmi) => {
                // FreeIPMI takes a password only on its command line or in its own
                // configuration: not passed here
                return Err(Unavailable::Absent(
                    "ipmi-dcmi: an out-of-band BMC (EnergyIPMIHost) is read through ipmitool only"
                        .into(),
                ));
            }
            (IpmiTarget::Device(_), _) => {}
        }
        match self {
            BmcTool::Ipmitool => args.extend(["dcmi", "power", "reading"].map(String::from)),
            BmcTool::IpmiDcmi => args.push("--get-system-power-statistics".into()),
        }
        let mut reader = BmcToolReader {
            tool: self,
            args,
            password,
        };
        reader.read()?;
        Ok(reader)
    }

    fn program(self) -> &'static str {
        match self {
            BmcTool::Ipmitool => "ipmitool",
            BmcTool::IpmiDcmi => "ipmi-dcmi",
        }
    }
}

impl Reader for BmcToolReader {
    fn path(&self) -> String {
        match self.tool {
            BmcTool::Ipmitool => "ipmitool dcmi power reading (DCMI, the BMC's power)".into(),
            BmcTool::IpmiDcmi => {
                "ipmi-dcmi --get-system-power-statistics (DCMI, the BMC's power)".into()
            }
        }
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        Quantity::Power
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let envs: Vec<(&str, &str)> = self
            .password
            .as_deref()
            .map(|p| ("IPMI_PASSWORD", p))
            .into_iter()
            .collect();
        let out = run_tool(self.tool.program(), &args, &envs)?;
        let parsed = match self.tool {
            BmcTool::Ipmitool => parse_ipmitool_power(&out),
            BmcTool::IpmiDcmi => parse_ipmi_dcmi_power(&out),
        };
        parsed.map_err(|why| Unavailable::Failed(format!("{}: {why}", self.tool.program())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ipmitool dcmi power reading` as ipmitool 1.8.19 prints it (ipmi_dcmi.c).
    const IPMITOOL: &str = "
    Instantaneous power reading:                   196 Watts
    Minimum during sampling period:                 12 Watts
    Maximum during sampling period:                370 Watts
    Average power reading over sample period:      180 Watts
    IPMI timestamp:                           Thu Jan  1 00:00:00 2026
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated

";

    /// `ipmi-dcmi --get-system-power-statistics` as FreeIPMI 1.6 prints it.
    const IPMI_DCMI: &str = "\
Current Power                        : 176 Watts
Minimum Power over sampling duration : 4 watts
Maximum Power over sampling duration : 382 watts
Average Power over sampling duration : 172 watts
Time Stamp                           : 12/04/2025 - 16:37:44
Statistics reporting time period     : 1000 milliseconds
Power Measurement                    : Active
";

    #[test]
    fn the_bmc_tools_answers_are_read() {
        assert_eq!(parse_ipmitool_power(IPMITOOL), Ok(196.0));
        let off = IPMITOOL.replace("activated", "deactivated");
        assert!(parse_ipmitool_power(&off).is_err());
        assert!(parse_ipmitool_power("Error: no DCMI").is_err());
        assert_eq!(parse_ipmi_dcmi_power(IPMI_DCMI), Ok(176.0));
        let off = IPMI_DCMI.replace(": Active", ": Not Available");
        assert!(
            parse_ipmi_dcmi_power(&off)
                .expect_err("inactive")
                .contains("Not Available")
        );
    }
}
