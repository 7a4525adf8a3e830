//! What each channel is (its rail kind), and which make the node's energy.
//!
//! NVIDIA Grace and Grace Hopper name their ACPI power meters' rails in `power1_oem_info`
//! (Grace Performance Tuning Guide, "Power and Thermals"):
//! - "Module Power Socket N" (Grace Hopper only): the whole superchip N, CPU, GPU, LPDDR5X,
//!   HBM and regulator losses;
//! - "Grace Power Socket N": the Grace socket N, its CPU rail, SoC rail and memory;
//! - "CPU Power Socket N": the CPU rail within it; "SysIO Power Socket N": the SoC rail.
//!
//! So the node's energy is, by default: on Grace Hopper the module rails (the grace, cpu
//! and sysio rails lie inside them); on Grace (no module rail) the Grace sockets (the cpu
//! and sysio rails lie inside them, and adding them would count them twice); elsewhere
//! every ACPI power meter (chip `power_meter`), the node's own meters. What is not
//! counted is reported beside the node as a part per kind (`Module`, `Grace`, `Cpu`,
//! `Sysio`), never added to it. `EnergyHwmonSensors` names others.

use super::tree::Channel;

/// What a channel measures, by its label or chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Module,
    Grace,
    Cpu,
    Sysio,
    /// An ACPI power meter that is none of the above (a whole server's).
    Meter,
    Other,
}

impl Kind {
    /// The part's label, in the log and the profile (`<label>Power`), for Grace's rails.
    pub(super) fn part_label(self) -> Option<&'static str> {
        match self {
            Kind::Module => Some("Module"),
            Kind::Grace => Some("Grace"),
            Kind::Cpu => Some("Cpu"),
            Kind::Sysio => Some("Sysio"),
            Kind::Meter | Kind::Other => None,
        }
    }

    /// Its name in `EnergyHwmonSensors`.
    fn key_name(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Grace => "grace",
            Kind::Cpu => "cpu",
            Kind::Sysio => "sysio",
            Kind::Meter => "power_meter",
            Kind::Other => "",
        }
    }
}

/// The kind of a channel with `label` on chip `chip`.
pub(super) fn kind(chip: &str, label: Option<&str>) -> Kind {
    let rail = label.and_then(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            [rail, power, socket, n]
                if power.eq_ignore_ascii_case("power")
                    && socket.eq_ignore_ascii_case("socket")
                    && n.parse::<u32>().is_ok() =>
            {
                Some(rail.to_ascii_lowercase())
            }
            _ => None,
        }
    });
    match rail.as_deref() {
        Some("module") => Kind::Module,
        Some("grace") => Kind::Grace,
        Some("cpu") => Kind::Cpu,
        Some("sysio") => Kind::Sysio,
        _ if chip == "power_meter" => Kind::Meter,
        _ => Kind::Other,
    }
}

/// Which of `kinds` (each channel's) make the node's energy under `choice`; an error says
/// why none does.
/// `named`: the sensors `EnergyHwmonSensors` names; none: the platform's default.
pub(super) fn counted(
    channels: &[Channel],
    kinds: &[Kind],
    named: &[String],
) -> Result<Vec<bool>, String> {
    let chosen: Vec<bool> = match named {
        [] => {
            let has = |k: Kind| kinds.contains(&k);
            let pick = [Kind::Module, Kind::Grace, Kind::Meter]
                .into_iter()
                .find(|k| has(*k));
            let Some(pick) = pick else {
                return Err(
                    "no ACPI power meter and no NVIDIA Grace rail; name the sensors to count \
                     in EnergyHwmonSensors"
                        .into(),
                );
            };
            kinds.iter().map(|k| *k == pick).collect()
        }
        names => channels
            .iter()
            .zip(kinds)
            .map(|(c, k)| {
                names.iter().any(|n| {
                    c.label
                        .as_deref()
                        .is_some_and(|l| l.eq_ignore_ascii_case(n))
                        || c.chip.eq_ignore_ascii_case(n)
                        || k.key_name().eq_ignore_ascii_case(n)
                })
            })
            .collect(),
    };
    if !chosen.contains(&true) {
        return Err("no sensor matches EnergyHwmonSensors".into());
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hwmon::tree::Input;

    fn channel(chip: &str, label: Option<&str>) -> Channel {
        Channel {
            what: "hwmon0/power1_average".into(),
            chip: chip.into(),
            label: label.map(String::from),
            input: Input::Power {
                file: "/x".into(),
                interval: None,
            },
        }
    }

    #[test]
    fn kinds_by_nvidias_labels() {
        assert_eq!(
            kind("power_meter", Some("Module Power Socket 0")),
            Kind::Module
        );
        assert_eq!(
            kind("power_meter", Some("Grace Power Socket 1")),
            Kind::Grace
        );
        assert_eq!(kind("power_meter", Some("CPU Power Socket 3")), Kind::Cpu);
        assert_eq!(
            kind("power_meter", Some("SysIO Power Socket 0")),
            Kind::Sysio
        );
        assert_eq!(kind("power_meter", None), Kind::Meter);
        assert_eq!(kind("power_meter", Some("Power Meter 1")), Kind::Meter);
        assert_eq!(kind("ina3221", Some("VDD_IN")), Kind::Other);
        assert_eq!(kind("ina3221", Some("CPU Power Socket x")), Kind::Other);
    }

    fn gh200() -> Vec<Channel> {
        let mut all = Vec::new();
        for s in 0..2 {
            for rail in ["Module", "Grace", "CPU", "SysIO"] {
                all.push(channel(
                    "power_meter",
                    Some(&format!("{rail} Power Socket {s}")),
                ));
            }
        }
        all
    }

    fn chosen(channels: &[Channel], choice: &[String]) -> Result<Vec<Option<String>>, String> {
        let kinds: Vec<Kind> = channels
            .iter()
            .map(|c| kind(&c.chip, c.label.as_deref()))
            .collect();
        let counted = counted(channels, &kinds, choice)?;
        Ok(channels
            .iter()
            .zip(counted)
            .filter(|(_, c)| *c)
            .map(|(ch, _)| ch.label.clone())
            .collect())
    }

    #[test]
    fn grace_hopper_counts_its_modules_grace_its_sockets_else_the_meter() {
        let gh = gh200();
        assert_eq!(
            chosen(&gh, &[]),
            Ok(vec![
                Some("Module Power Socket 0".into()),
                Some("Module Power Socket 1".into())
            ])
        );
        // Grace CPU superchip: no module rail; the sockets, never cpu + sysio beside them
        let grace: Vec<Channel> = gh
            .into_iter()
            .filter(|c| !c.label.as_deref().unwrap_or("").starts_with("Module"))
            .collect();
        assert_eq!(
            chosen(&grace, &[]),
            Ok(vec![
                Some("Grace Power Socket 0".into()),
                Some("Grace Power Socket 1".into())
            ])
        );
        // an x86 server's ACPI meter beside a board's sensor
        let server = vec![
            channel("ina3221", Some("VDD_IN")),
            channel("power_meter", None),
        ];
        assert_eq!(chosen(&server, &[]), Ok(vec![None]));
        let e = chosen(&[channel("ina3221", None)], &[]).expect_err("none");
        assert!(e.contains("EnergyHwmonSensors"), "{e}");
    }

    #[test]
    fn named_sensors_by_label_chip_or_kind() {
        let gh = gh200();
        let named = |n: &[&str]| -> Vec<String> { n.iter().map(|s| s.to_string()).collect() };
        assert_eq!(
            chosen(&gh, &named(&["cpu"])),
            Ok(vec![
                Some("CPU Power Socket 0".into()),
                Some("CPU Power Socket 1".into())
            ])
        );
        assert_eq!(
            chosen(&gh, &named(&["grace power socket 1"])),
            Ok(vec![Some("Grace Power Socket 1".into())])
        );
        let board = vec![
            channel("ina3221", Some("VDD_IN")),
            channel("power_meter", None),
        ];
        assert_eq!(
            chosen(&board, &named(&["ina3221"])),
            Ok(vec![Some("VDD_IN".into())])
        );
        let e = chosen(&board, &named(&["nothing"])).expect_err("no match");
        assert!(e.contains("EnergyHwmonSensors"), "{e}");
    }
}
