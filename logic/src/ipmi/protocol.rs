//! IPMI commands the plugin needs, as bytes in and values out (no I/O here).
//!
//! ipmi-rs 0.6 has no DCMI, its SDR iterator asks for whole records (many BMCs, ipmi_sim
//! among them, refuse with 0xCA), its typed reading ignores the sensor's LUN and its raw to
//! watts conversion is private: these are built on its raw request/response instead.

use ipmi_rs::storage::sdr::Unit;
use ipmi_rs::storage::sdr::record::{DataFormat, Linearization, Record, WithSensorRecordCommon};

pub(super) const NETFN_APP: u8 = 0x06;
pub(super) const NETFN_SENSOR: u8 = 0x04;
pub(super) const NETFN_STORAGE: u8 = 0x0A;
pub(super) const NETFN_GROUP_EXT: u8 = 0x2C;

pub(super) const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3B;
pub(super) const CMD_GET_SENSOR_READING: u8 = 0x2D;
pub(super) const CMD_RESERVE_SDR_REPOSITORY: u8 = 0x22;
pub(super) const CMD_GET_SDR: u8 = 0x23;
pub(super) const CMD_DCMI_GET_POWER_READING: u8 = 0x02;
pub(super) const CMD_DCMI_GET_POWER_LIMIT: u8 = 0x03;
/// Completion code of Get Power Limit: no power limit is active.
pub(super) const CC_NO_ACTIVE_POWER_LIMIT: u8 = 0x80;

const DCMI_GROUP: u8 = 0xDC;
pub(super) const PRIVILEGE_ADMIN: u8 = 0x04;
/// Get SDR reads this many bytes at a time: what every BMC can return over LAN.
pub(super) const SDR_CHUNK: u8 = 16;
pub(super) const SDR_HEADER_LEN: u8 = 5;
pub(super) const SDR_LAST_RECORD: u16 = 0xFFFF;

/// DCMI Get Power Reading request data: mode 1 (system power statistics) or 2 (enhanced).
pub(super) fn dcmi_power_request(enhanced: bool) -> Vec<u8> {
    vec![DCMI_GROUP, if enhanced { 0x02 } else { 0x01 }, 0x00, 0x00]
}

/// Current watts from a DCMI Get Power Reading response (data after the completion code:
/// group, current, min, max, average, timestamp, period, state).
pub(super) fn parse_dcmi_power(data: &[u8]) -> Result<u16, String> {
    if data.len() < 18 || data[0] != DCMI_GROUP {
        return Err(format!(
            "malformed DCMI power reading ({} bytes)",
            data.len()
        ));
    }
    if data[17] & 0x40 == 0 {
        return Err("the BMC says power measurement is not active".into());
    }
    Ok(u16::from_le_bytes([data[1], data[2]]))
}

/// DCMI Get Power Limit request data.
pub(super) fn dcmi_power_limit_request() -> Vec<u8> {
    vec![DCMI_GROUP, 0x00, 0x00]
}

/// The active power limit in watts from a DCMI Get Power Limit response (data after the
/// completion code: group, 2 reserved, exception actions, limit, correction time, 2
/// reserved, sampling period); `None` for a limit of 0 W, which limits nothing.
pub(super) fn parse_dcmi_power_limit(data: &[u8]) -> Result<Option<u16>, String> {
    if data.len() < 6 || data[0] != DCMI_GROUP {
        return Err(format!("malformed DCMI power limit ({} bytes)", data.len()));
    }
    Ok(Some(u16::from_le_bytes([data[4], data[5]])).filter(|w| *w > 0))
}

pub(super) fn parse_reservation(data: &[u8]) -> Result<u16, String> {
    match data {
        [lo, hi, ..] => Ok(u16::from_le_bytes([*lo, *hi])),
        _ => Err("malformed Reserve SDR Repository response".into()),
    }
}

pub(super) fn get_sdr_request(reservation: u16, record: u16, offset: u8, len: u8) -> Vec<u8> {
    let [r0, r1] = reservation.to_le_bytes();
    let [i0, i1] = record.to_le_bytes();
    vec![r0, r1, i0, i1, offset, len]
}

/// `(next record id, bytes)` from a Get SDR response.
/// An SDR record the BMC sent, decoded by ipmi-rs, or why not. ipmi-rs panics on some
/// records a BMC can send (an ID string modifier it has no fallback for): a record it
/// cannot decode is one it cannot decode, whichever way it says so.
pub(super) fn parse_record(bytes: &[u8]) -> Result<Record, String> {
    match std::panic::catch_unwind(|| Record::parse(bytes)) {
        Ok(Ok(record)) => Ok(record),
        Ok(Err(e)) => Err(format!("{e:?}")),
        Err(_) => Err("ipmi-rs cannot decode it".into()),
    }
}

pub(super) fn parse_get_sdr(data: &[u8]) -> Result<(u16, &[u8]), String> {
    match data {
        [lo, hi, rest @ ..] => Ok((u16::from_le_bytes([*lo, *hi]), rest)),
        _ => Err("malformed Get SDR response".into()),
    }
}

/// How to turn a Full Sensor Record's raw reading into watts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WattsSensor {
    pub record_id: u16,
    pub name: String,
    pub number: u8,
    pub lun: u8,
    format: DataFormat,
    m: i16,
    b: i16,
    b_exponent: i8,
    result_exponent: i8,
}

impl WattsSensor {
    /// A Watts sensor from an SDR record; an explanation when the record is not one we can
    /// convert (not a full sensor record, not Watts, non-linear, not analog).
    pub(super) fn from_record(record: &Record) -> Result<Self, String> {
        let record_id = record.header.id.value();
        let full = record
            .full_sensor()
            .ok_or_else(|| format!("SDR record {record_id} is not a full sensor record"))?;
        let common = full.common();
        let name = common.sensor_id.to_string();
        if common.sensor_units.base_unit != Unit::Watt {
            return Err(format!(
                "sensor {record_id} ({name}) does not measure watts"
            ));
        }
        if !matches!(full.linearization, Linearization::Linear) {
            return Err(format!("sensor {record_id} ({name}) is not linear"));
        }
        let format = full
            .analog_data_format
            .ok_or_else(|| format!("sensor {record_id} ({name}) has no analog reading"))?;
        Ok(Self {
            record_id,
            name,
            number: common.key.sensor_number.get(),
            lun: common.key.owner_lun.value(),
            format,
            m: full.m,
            b: full.b,
            b_exponent: full.b_exponent,
            result_exponent: full.result_exponent,
        })
    }

    /// IPMI 2.0 §36.3: y = (M·x + B·10^Bexp)·10^Rexp; an error when that is negative.
    pub(super) fn watts(&self, raw: u8) -> Result<f64, String> {
        let x = match self.format {
            DataFormat::Unsigned => f64::from(raw),
            DataFormat::TwosComplement => f64::from(raw as i8),
            // ones' complement: negative values are the inverted magnitude
            DataFormat::OnesComplement if raw & 0x80 != 0 => -f64::from(!raw & 0x7F),
            DataFormat::OnesComplement => f64::from(raw),
        };
        let watts = (f64::from(self.m) * x
            + f64::from(self.b) * 10f64.powi(self.b_exponent.into()))
            * 10f64.powi(self.result_exponent.into());
        // a record whose M or B is negative turns a reading into negative watts, which
        // integrated would take energy away
        if watts.is_finite() && watts >= 0.0 {
            Ok(watts)
        } else {
            Err(format!(
                "sensor {} ({}) reads {raw:#04x}, which its record converts to {watts} W",
                self.record_id, self.name
            ))
        }
    }
}

/// The raw byte of a Get Sensor Reading response, unless the BMC says it is not valid.
pub(super) fn parse_sensor_reading(data: &[u8]) -> Result<u8, String> {
    match data {
        [raw, flags, ..] => {
            if flags & 0x20 != 0 {
                Err("reading unavailable".into())
            } else if flags & 0x40 == 0 {
                Err("sensor scanning disabled".into())
            } else {
                Ok(*raw)
            }
        }
        _ => Err("malformed Get Sensor Reading response".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "Pwr Consumption" record of the simulated BMC (tests/ipmisim, compiled by
    /// sdrcomp): Full sensor record 2, sensor 3, Watts, unsigned, linear, M=4.
    pub(super) const SIM_POWER_RECORD: &[u8] = &[
        0x02, 0x00, 0x51, 0x01, 0x3A, 0x20, 0x00, 0x03, 0x0A, 0x01, 0x45, 0x00, 0x03, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xCF, 0x50, 0x77, 0x72, 0x20, 0x43, 0x6F, 0x6E, 0x73, 0x75, 0x6D, 0x70, 0x74,
        0x69, 0x6F, 0x6E,
    ];

    #[test]
    fn dcmi_power_reading() {
        // group, current 300, min 222, max 300, avg 270, timestamp, period 1000 ms, active
        let mut data = vec![0xDC, 0x2C, 0x01, 0xDE, 0x00, 0x2C, 0x01, 0x0E, 0x01];
        data.extend([0, 0, 0, 0, 0xE8, 0x03, 0, 0, 0x40]);
        assert_eq!(parse_dcmi_power(&data), Ok(300));
        data[17] = 0;
        assert!(parse_dcmi_power(&data).is_err());
        assert!(parse_dcmi_power(&data[..10]).is_err());
        assert_eq!(dcmi_power_request(false), vec![0xDC, 1, 0, 0]);
    }

    #[test]
    fn dcmi_power_limit() {
        // group, reserved, exception action (hard power off), 800 W, 1000 ms, reserved, 1 s
        let data = [
            0xDC, 0, 0, 0x01, 0x20, 0x03, 0xE8, 0x03, 0, 0, 0, 0, 0x01, 0x00,
        ];
        assert_eq!(parse_dcmi_power_limit(&data), Ok(Some(800)));
        let mut zero = data;
        zero[4] = 0;
        zero[5] = 0;
        assert_eq!(parse_dcmi_power_limit(&zero), Ok(None));
        assert!(parse_dcmi_power_limit(&data[..5]).is_err());
        assert!(parse_dcmi_power_limit(&[0xDD; 14]).is_err());
        assert_eq!(dcmi_power_limit_request(), vec![0xDC, 0, 0]);
    }

    #[test]
    fn sdr_chunks() {
        assert_eq!(
            get_sdr_request(0x1234, 2, 5, 16),
            vec![0x34, 0x12, 2, 0, 5, 16]
        );
        assert_eq!(
            parse_get_sdr(&[3, 0, 0xAA, 0xBB]),
            Ok((3, &[0xAA, 0xBB][..]))
        );
        assert!(parse_get_sdr(&[1]).is_err());
        assert_eq!(parse_reservation(&[0x01, 0x02]), Ok(0x0201));
    }

    #[test]
    fn watts_from_the_simulator_record() {
        let record = Record::parse(SIM_POWER_RECORD).expect("parses");
        let sensor = WattsSensor::from_record(&record).expect("a watts sensor");
        assert_eq!((sensor.record_id, sensor.number, sensor.lun), (2, 3, 0));
        assert_eq!(sensor.name, "Pwr Consumption");
        assert_eq!(sensor.watts(75), Ok(300.0));
    }

    #[test]
    fn conversion_formula_and_formats() {
        let mut s = WattsSensor {
            record_id: 1,
            name: "x".into(),
            number: 1,
            lun: 0,
            format: DataFormat::Unsigned,
            m: 2,
            b: 5,
            b_exponent: 1,
            result_exponent: -1,
        };
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} != {b}");
        // (2*100 + 5*10) / 10
        close(s.watts(100).expect("watts"), 25.0);
        s.format = DataFormat::TwosComplement;
        close(s.watts(0xFE).expect("watts"), (2.0 * -2.0 + 50.0) / 10.0);
        s.format = DataFormat::OnesComplement;
        close(s.watts(0xFE).expect("watts"), (-2.0 + 50.0) / 10.0); // -1 in ones' complement, M = 2
    }

    #[test]
    fn sensor_reading_flags() {
        assert_eq!(parse_sensor_reading(&[75, 0x40, 0]), Ok(75));
        assert!(parse_sensor_reading(&[75, 0x60]).is_err()); // unavailable
        assert!(parse_sensor_reading(&[75, 0x00]).is_err()); // scanning disabled
        assert!(parse_sensor_reading(&[75]).is_err());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a BMC answers, decoding gives a value or an error.
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_dcmi_power(&data);
            let _ = parse_dcmi_power_limit(&data);
            let _ = parse_get_sdr(&data);
            let _ = parse_reservation(&data);
            let _ = parse_sensor_reading(&data);
            if let Ok(record) = Record::parse(&data) {
                let _ = WattsSensor::from_record(&record).map(|s| s.watts(data.first().copied().unwrap_or(0)));
            }
        }

        #[test]
        fn dcmi_current_power_is_bytes_1_and_2(current in any::<u16>(), rest in proptest::collection::vec(any::<u8>(), 14)) {
            let mut data = vec![0xDC];
            data.extend(current.to_le_bytes());
            data.extend(rest);
            data.push(0x40);
            prop_assert_eq!(parse_dcmi_power(&data), Ok(current));
        }
    }
}
