//! Outside input never crashes or poisons (issue 28): what a BMC answers, as frames and
//! as sensor records, decodes to a value or an error, and a sensor's watts are finite and
//! not negative. Thousands of cases each (see logic/tests/outside_input.rs for the rest).

use ipmi_rs::storage::sdr::record::Record;
use proptest::prelude::*;

use super::protocol::{
    WattsSensor, parse_dcmi_power, parse_get_sdr, parse_record, parse_reservation,
    parse_sensor_reading,
};

/// The simulated BMC's "Pwr Consumption" record (tests/ipmisim): Full sensor record 2,
/// sensor 3, Watts, unsigned, linear, M=4.
const SIM_POWER_RECORD: [u8; 63] = [
    0x02, 0x00, 0x51, 0x01, 0x3A, 0x20, 0x00, 0x03, 0x0A, 0x01, 0x45, 0x00, 0x03, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xCF,
    0x50, 0x77, 0x72, 0x20, 0x43, 0x6F, 0x6E, 0x73, 0x75, 0x6D, 0x70, 0x74, 0x69, 0x6F, 0x6E,
];

/// A record's watts for every raw reading: finite and not negative, or an error.
fn check_record(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(record) = parse_record(bytes) else {
        return Ok(());
    };
    let Ok(sensor) = WattsSensor::from_record(&record) else {
        return Ok(());
    };
    for raw in 0..=u8::MAX {
        if let Ok(w) = sensor.watts(raw) {
            prop_assert!(w.is_finite() && w >= 0.0, "{w} W from {raw} by {sensor:?}");
        }
    }
    Ok(())
}

/// A compact sensor record whose ID string modifier is 0b10 or 0b11 makes ipmi-rs 0.6.0
/// panic (found by `any_frame`): decoded, it is an error, never a panic.
#[test]
fn a_record_ipmi_rs_panics_on_is_an_error() {
    let mut panicking = 0;
    for at in 5..SIM_POWER_RECORD.len() {
        for value in [0x20u8, 0x30, 0xE0, 0xF0] {
            let mut bytes = SIM_POWER_RECORD.to_vec();
            bytes[3] = 0x02; // a compact sensor record
            bytes[at] = value;
            if std::panic::catch_unwind(|| Record::parse(&bytes)).is_err() {
                panicking += 1;
                assert!(parse_record(&bytes).is_err());
            }
        }
    }
    assert!(
        panicking > 0,
        "no record made ipmi-rs panic: the guard is untested"
    );
}

#[test]
fn the_simulators_record_reads_watts() {
    let record = Record::parse(&SIM_POWER_RECORD).expect("parses");
    let sensor = WattsSensor::from_record(&record).expect("a watts sensor");
    assert_eq!(sensor.watts(75), Ok(300.0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Any answer: a value or an error, from every decoder.
    #[test]
    fn any_frame(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = (parse_get_sdr(&data), parse_reservation(&data), parse_sensor_reading(&data));
        let _ = parse_dcmi_power(&data);
        check_record(&data)?;
    }

    /// The simulator's record with bytes changed (its M, B, exponents, units, format,
    /// length...): watts that are finite and not negative, or an error.
    #[test]
    fn near_valid_records(
        changes in prop::collection::vec((0..SIM_POWER_RECORD.len(), any::<u8>()), 1..4),
        cut in prop_oneof![Just(SIM_POWER_RECORD.len()), 0..SIM_POWER_RECORD.len()],
    ) {
        let mut bytes = SIM_POWER_RECORD.to_vec();
        for (at, value) in changes {
            bytes[at] = value;
        }
        check_record(&bytes[..cut])?;
    }

    /// A DCMI answer with any current power and state: the power, or an error when the
    /// BMC says measurement is off.
    #[test]
    fn dcmi_answers(data in prop::collection::vec(any::<u8>(), 18..40)) {
        let mut data = data;
        data[0] = 0xDC;
        match parse_dcmi_power(&data) {
            Ok(w) => {
                prop_assert_eq!(w, u16::from_le_bytes([data[1], data[2]]));
                prop_assert!(data[17] & 0x40 != 0);
            }
            Err(_) => prop_assert!(data[17] & 0x40 == 0),
        }
    }
}
