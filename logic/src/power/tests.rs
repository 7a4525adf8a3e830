use super::*;
use crate::source::Power;

/// A bound far above every power of these tests.
const MAX: f64 = 1e6;

#[test]
fn trapezoid_with_sub_second_timestamps() {
    let t0 = Instant::now();
    let mut i = Integral::default();
    let at = |ms| t0 + Duration::from_millis(ms);
    i.add(
        &Sample {
            watts: 100.0,
            at: at(0),
            energy_j: None,
        },
        MAX,
    );
    // 0.5 s * 200 W = 100 J
    i.add(
        &Sample {
            watts: 300.0,
            at: at(500),
            energy_j: None,
        },
        MAX,
    );
    // 2 s * 300 W = 600 J
    i.add(
        &Sample {
            watts: 300.0,
            at: at(2500),
            energy_j: None,
        },
        MAX,
    );
    assert!((i.energy_uj - 700e6).abs() < 1.0, "{}", i.energy_uj);
}

#[test]
fn extrapolation_brings_energy_to_the_call_and_never_goes_back() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(10);
    let mut i = Integral::default();
    let power = |ms, watts| Sample {
        watts,
        at: t0 + Duration::from_millis(ms),
        energy_j: None,
    };
    i.add(&power(0, 300.0), MAX);
    i.add(&power(1000, 300.0), MAX); // 300 J
    let at = |ms| t0 + Duration::from_millis(ms);
    // 0.5 s after the last sample at 300 W
    assert_eq!(i.energy_at(at(1500), true, limit), 450_000_000);
    assert_eq!(i.energy_at(at(1500), false, limit), 450_000_000); // never backwards
    // the power had fallen to 0: the trapezoid (375 J) is below what was reported
    i.add(&power(1500, 0.0), MAX);
    assert_eq!(i.energy_at(at(2500), true, limit), 450_000_000);
    i.add(&power(2500, 0.0), MAX);
    i.add(&power(3500, 300.0), MAX); // 375 + 150 J
    assert_eq!(i.energy_at(at(3500), false, limit), 525_000_000);
    // a stale sample is extrapolated only up to the limit: 525 J + 10 s at 300 W
    assert_eq!(i.energy_at(at(60_000), true, limit), 3_525_000_000);
}

#[test]
fn an_energy_counter_is_counted_and_a_reset_falls_back_to_the_power() {
    let t0 = Instant::now();
    let mut i = Integral::default();
    let mut add = |ms, watts, energy_j| {
        i.add(
            &Sample {
                watts,
                at: t0 + Duration::from_millis(ms),
                energy_j,
            },
            MAX,
        );
        i.energy_uj
    };
    add(0, 100.0, Some(5000.0));
    // the counter, not the trapezoid (which would say 200 J)
    assert!((add(1000, 300.0, Some(5150.0)) - 150e6).abs() < 1.0);
    // the counter fell (a BMC reset): 1 s at 300 W, integrated
    assert!((add(2000, 300.0, Some(10.0)) - 450e6).abs() < 1.0);
    assert!((add(3000, 300.0, Some(310.0)) - 750e6).abs() < 1.0);
    // no counter in this sample: integrated, and the next counter starts afresh
    assert!((add(4000, 100.0, None) - 950e6).abs() < 1.0);
    assert!((add(5000, 100.0, Some(900.0)) - 1050e6).abs() < 1.0);
}

/// A sensor's energy counter is the count a restarted slurmd bridges its absence with,
/// at the energy as reported: what was brought forward past the last sample is not
/// counted again.
#[test]
fn the_count_stands_where_the_reported_energy_does() {
    let t0 = Instant::now();
    let mut i = Integral::default();
    let sample = |ms, energy_j| Sample {
        watts: 100.0,
        at: t0 + Duration::from_millis(ms),
        energy_j: Some(energy_j),
    };
    i.add(&sample(0, 1_000.0), MAX);
    i.add(&sample(1_000, 1_100.0), MAX);
    // reported half a second later, brought forward at 100 W: 150 J
    let reported = i.energy_at(
        t0 + Duration::from_millis(1_500),
        true,
        Duration::from_secs(3),
    );
    assert_eq!(reported, 150_000_000);
    let count = i.count().expect("a counter");
    assert_eq!(count.value_uj, 1_150_000_000);
    assert_eq!((count.wraps_at_uj, count.max_watts), (None, MAX));
    // 2.5 s on, the counter reads 1 400 J: 250 J more, at 100 W
    let later = HardwareCount {
        value_uj: 1_400_000_000,
        ..count.clone()
    };
    assert_eq!(
        crate::source::bridge(&[count], &[later], 2.5, crate::source::Ends::default())
            .map(crate::source::Bridged::uj),
        Some(250_000_000)
    );
    // a sensor without a counter has none
    let mut power_only = Integral::default();
    power_only.add(&Sample::now(100.0), MAX);
    assert_eq!(power_only.count(), None);
}

/// A 40 s job read every second; `reading(k)` is what the sensor says at second k.
/// The energy the screen and the trapezoid make of it (J), and the last reading
/// accepted after each reading.
fn screened_job(bound: f64, reading: impl Fn(u32) -> f64) -> (f64, Vec<f64>) {
    let t0 = Instant::now();
    let mut screen = Screen::new(
        Bound {
            watts: bound,
            from: "test".into(),
        },
        "power",
    );
    let mut i = Integral::default();
    let mut shown = Vec::new();
    for k in 0..=40 {
        let sample = Sample {
            watts: reading(k),
            at: t0 + Duration::from_secs(k.into()),
            energy_j: None,
        };
        for accepted in screen.judge(sample) {
            i.add(&accepted, bound);
        }
        shown.extend(screen.last().map(|s| s.watts));
    }
    (i.energy_uj / 1e6, shown)
}

/// The bar: a 1, 2 or 3-reading glitch of any size out of bound (1e12 W, the 65535 W
/// of all ones, negative, not a number, infinite), and a one-reading spike of any size
/// within it (up or down), costs at most 0.1% of a 40 s job at 300 W (12 000 J): here
/// nothing at all, and the last reading accepted stays 300 W.
#[test]
fn a_glitch_of_one_to_three_readings_costs_nothing() {
    let truth = 300.0 * 40.0;
    let out_of_bound = [
        1e12,
        65535.0,
        20_001.0,
        -1.0,
        -65535.0,
        f64::NAN,
        f64::INFINITY,
    ];
    for glitch in out_of_bound {
        for len in 1..=3 {
            for first in [1, 10, 37] {
                let (joules, shown) = screened_job(20_000.0, |k| {
                    if (first..first + len).contains(&k) {
                        glitch
                    } else {
                        300.0
                    }
                });
                let error = (joules - truth).abs() / truth;
                assert!(error <= 0.001, "{glitch} W x{len} at {first}: {joules} J");
                assert!(shown.iter().all(|w| *w == 300.0), "{glitch}: {shown:?}");
            }
        }
    }
    for spike in [0.0, 150.0, 330.0, 600.0, 1500.0, 19_999.0] {
        let (joules, shown) = screened_job(20_000.0, |k| if k == 20 { spike } else { 300.0 });
        assert!(
            (joules - truth).abs() / truth <= 0.001,
            "{spike} W: {joules} J"
        );
        assert!(shown.iter().all(|w| *w == 300.0), "{spike}: {shown:?}");
    }
    // without the screen the 65535 W of all ones for 1.5 s cost over 10 times the job
    let mut raw = Integral::default();
    let t0 = Instant::now();
    for k in 0..=40u32 {
        let watts = if (10..12).contains(&k) {
            65535.0
        } else {
            300.0
        };
        raw.add(&power_at(t0, k, watts), 1e12);
    }
    assert!(raw.energy_uj / 1e6 > 10.0 * truth);
}

fn power_at(t0: Instant, k: u32, watts: f64) -> Sample {
    Sample {
        watts,
        at: t0 + Duration::from_secs(k.into()),
        energy_j: None,
    }
}

/// The other side of the bar: a real step from 300 to 600 W that stays (at 19.5 s) is
/// held for one reading, then counted whole: the energy is the trapezoid's, exact here,
/// and the power shown follows one reading late. What that costs: while the reading is
/// held, a reader's figure is brought forward at the lower of the last power accepted
/// and the held one, so it lags the truth by the step over the time since the step
/// (here 300 W x 1.49 s = 447 J), and catches up whole at the next reading; only a step
/// that ends in that period keeps the lag.
#[test]
fn a_real_step_is_followed_one_reading_late_and_costs_nothing() {
    let step = |k: u32| if k >= 20 { 600.0 } else { 300.0 };
    let (joules, shown) = screened_job(20_000.0, step);
    let truth = 300.0 * 19.5 + 600.0 * 20.5;
    assert!((joules - truth).abs() < 1e-6, "{joules} J for {truth} J");
    assert_eq!(shown[20], 300.0, "held");
    assert_eq!(shown[21], 600.0, "confirmed by the next reading");
    // what a reader sees while the step is held, and after
    let t0 = Instant::now();
    let limit = Duration::from_secs(10);
    let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
    let mut i = Integral::default();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    for k in 0..=20 {
        for s in screen.judge(power_at(t0, k, step(k))) {
            i.add(&s, 20_000.0);
        }
        i.held_watts = screen.held().map(|s| s.watts);
    }
    let true_j = |ms: u64| 300.0 * 19.5 + 600.0 * (ms as f64 / 1000.0 - 19.5);
    let lag = true_j(20_990) - i.energy_at(at(20_990), true, limit) as f64 / 1e6;
    assert!((lag - 447.0).abs() < 0.01, "{lag}");
    for s in screen.judge(power_at(t0, 21, 600.0)) {
        i.add(&s, 20_000.0);
    }
    i.held_watts = screen.held().map(|s| s.watts);
    let after = i.energy_at(at(21_000), true, limit) as f64 / 1e6;
    assert!((after - true_j(21_000)).abs() < 1e-3, "{after}");
}

/// A job ending: the power falls from 300 W to 0 at 29.5 s, read at 30 s and held; a
/// reader at 30.9 s sees the energy brought forward at 0 W, never at 300 W (which
/// would stay counted: what is reported never goes back); the 150 J short of the truth
/// come with the next reading.
#[test]
fn a_fall_held_is_not_brought_forward_at_the_power_before() {
    let t0 = Instant::now();
    let limit = Duration::from_secs(10);
    let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
    let mut i = Integral::default();
    for k in 0..=30 {
        let watts = if k < 30 { 300.0 } else { 0.0 };
        for s in screen.judge(power_at(t0, k, watts)) {
            i.add(&s, 20_000.0);
        }
        i.held_watts = screen.held().map(|s| s.watts);
    }
    let figure = i.energy_at(t0 + Duration::from_millis(30_900), true, limit);
    assert_eq!(figure, 8_700_000_000);
}

/// A ramp, a step down to idle and a load that swings at the sampling rate are the
/// node's: counted as the trapezoid counts them (the swing loses its first reading).
#[test]
fn ramps_drops_and_swings_are_power() {
    let trapezoid = |reading: &dyn Fn(u32) -> f64| {
        (0..40u32)
            .map(|k| (reading(k) + reading(k + 1)) / 2.0)
            .sum::<f64>()
    };
    let ramp = |k: u32| f64::from(100 + 50 * k.min(20));
    let (joules, _) = screened_job(20_000.0, ramp);
    assert!((joules - trapezoid(&ramp)).abs() < 1e-6, "{joules}");
    let drop = |k: u32| if k < 30 { 300.0 } else { 40.0 };
    let (joules, _) = screened_job(20_000.0, drop);
    assert!((joules - trapezoid(&drop)).abs() < 1e-6, "{joules}");
    let swing = |k: u32| if k.is_multiple_of(2) { 300.0 } else { 900.0 };
    let (joules, _) = screened_job(20_000.0, swing);
    let missed = trapezoid(&swing) - joules;
    // the first 900 W reading, dropped as a spike: one reading's excess
    assert!(
        (0.0..=600.0).contains(&missed),
        "{missed} J of {}",
        trapezoid(&swing)
    );
    // a two-reading excursion within the bound is a step, and counted
    let twice = |k: u32| if (10..12).contains(&k) { 1500.0 } else { 300.0 };
    let (joules, _) = screened_job(20_000.0, twice);
    assert!((joules - trapezoid(&twice)).abs() < 1e-6, "{joules}");
}

/// The bound: the admin's key, else what the device states (a Redfish chassis'
/// PowerCapacityWatts, a DCMI power limit) times the margin, else the default; a
/// reading within the stated limit's bound is power, one beyond is not.
#[test]
fn the_bound_is_the_key_else_the_devices_limit_else_the_default() {
    let stated = || Some((800.0, "PowerCapacityWatts".to_string()));
    let b = Bound::resolve("EnergyRedfishMaxWatts", None, stated(), 20_000);
    assert_eq!(b.watts, 1200.0);
    assert!(b.from.contains("PowerCapacityWatts of 800 W"), "{}", b.from);
    let b = Bound::resolve("EnergyRedfishMaxWatts", Some(3000), stated(), 20_000);
    assert_eq!(
        (b.watts, b.from.as_str()),
        (3000.0, "EnergyRedfishMaxWatts")
    );
    for nonsense in [0.0, -5.0, f64::NAN, 1e12] {
        let b = Bound::resolve("k", None, Some((nonsense, "x".into())), 20_000);
        assert_eq!(b.watts, 20_000.0, "{nonsense}");
    }
    // 800 W stated: a real 1100 W is power, 1300 W (a spike of any length) is not
    let b = Bound::resolve("k", None, stated(), 20_000);
    let (joules, _) = screened_job(b.watts, |k| if k >= 20 { 1100.0 } else { 300.0 });
    assert!((joules - (300.0 * 19.5 + 1100.0 * 20.5)).abs() < 1e-6);
    let (joules, _) = screened_job(
        b.watts,
        |k| if (20..23).contains(&k) { 1300.0 } else { 300.0 },
    );
    assert!((joules - 12_000.0).abs() < 1e-6, "{joules}");
    assert_eq!(parse_max_watts("k", "1200"), Ok(1200));
    for bad in ["0", "-1", "1.5", "12kW", "10000001", ""] {
        let e = parse_max_watts("EnergyIPMIMaxWatts", bad).expect_err(bad);
        assert!(
            e.to_string().contains(&format!("EnergyIPMIMaxWatts={bad}")),
            "{e}"
        );
    }
    assert_eq!(show_max_watts(None, 5000, false), "5000");
    assert!(show_max_watts(None, 20_000, true).contains("stated limit"));
}

/// A BMC with an energy counter whose power reads 1e12 W: the sample is dropped, and
/// the counter's rise across it is the energy.
#[test]
fn a_glitch_beside_an_energy_counter_is_bridged_by_the_counter() {
    let t0 = Instant::now();
    let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
    let mut i = Integral::default();
    for k in 0..=10u32 {
        let watts = if k == 5 { 1e12 } else { 300.0 };
        let sample = Sample {
            watts,
            at: t0 + Duration::from_secs(k.into()),
            energy_j: Some(1000.0 + 310.0 * f64::from(k)),
        };
        for s in screen.judge(sample) {
            i.add(&s, 20_000.0);
        }
    }
    assert!((i.energy_uj - 3100e6).abs() < 1.0, "{}", i.energy_uj);
}

/// A sensor that reads 1400 W.
struct Stating;

impl Sensor for Stating {
    fn describe(&self) -> String {
        "a sensor at 1400 W".into()
    }

    fn poll(&mut self, _now: Instant) -> Power {
        Ok(Sample::now(1400.0))
    }
}

/// What a sensor states on connecting is the bound its readings pass: 1400 W is power
/// under a stated 1000 W (a bound of 1500 W), and no power under the 1200 W default.
#[test]
fn the_limit_a_sensor_states_on_connecting_bounds_its_readings() {
    for (stated, passes) in [(Some(1000.0), true), (None, false)] {
        let settings = Settings {
            period: Duration::from_millis(10),
            max_backoff: sensor_backoff(Duration::from_millis(10)),
            max_watts_key: "EnergyTestMaxWatts",
            max_watts: None,
            default_max_watts: 1200,
        };
        let mut opened = SensorPolling::polled(&settings, false, move || {
            Ok(Connected {
                sensor: Stating,
                stated_max_watts: stated.map(|w| (w, "its stated limit".to_string())),
            })
        })
        .expect("started");
        assert_eq!(opened.sample_period, Duration::from_millis(10));
        // 20 periods, and (on a busy machine) until a second sample has been integrated
        std::thread::sleep(Duration::from_millis(200));
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut reading = opened.source.poll(Instant::now());
        while passes && reading.energy_uj == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            reading = opened.source.poll(Instant::now());
        }
        if passes {
            assert_eq!(reading.watts, Some(1400.0), "{reading:?}");
            assert!(reading.energy_uj > 0, "{reading:?}");
        } else {
            assert_eq!((reading.watts, reading.energy_uj), (None, 0), "{reading:?}");
        }
    }
}

/// A BMC read every 5 s, the node falling from 300 W to 100 W between two readings, the
/// energy read every second: a report is confirmed only where it comes from a sample new
/// since the last report and is not held at a figure brought forward past the fall. A
/// power measured between confirmed reports over 10 s or more (as a shared node's static
/// power is learned) is then never below what the node drew, whichever second the fall
/// comes in. Before, every report counted: spans of 60 W for a node of 100 W at least, and
/// a cluster test of the shipped Redfish example learned 39.1 W.
#[test]
fn a_power_between_confirmed_reports_is_never_below_the_nodes() {
    for fall_tenths in [201u32, 215, 229, 244] {
        let t0 = Instant::now();
        let limit = missed_after(Duration::from_secs(5));
        let mut i = Integral::default();
        let watts = |tenths: u32| if tenths < fall_tenths { 300.0 } else { 100.0 };
        let mut confirmed: Vec<(f64, f64)> = Vec::new();
        let mut unconfirmed = 0;
        for tenth in 0..=600u32 {
            if tenth % 50 == 0 {
                i.add(&power_at(t0, tenth / 10, watts(tenth)), MAX);
            }
            if tenth % 10 == 5 {
                let now = t0 + Duration::from_millis(u64::from(tenth) * 100);
                // as a sensor's reading takes it (`SensorPolling::reading`)
                let energy_uj = i.energy_at(now, true, limit);
                if i.unconfirmed {
                    unconfirmed += 1;
                } else {
                    confirmed.push((f64::from(tenth) / 10.0, energy_uj as f64 / 1e6));
                }
            }
        }
        assert!(unconfirmed > 0);
        let mut lowest = f64::INFINITY;
        for (k, &(end, e_end)) in confirmed.iter().enumerate() {
            // the latest confirmed report at least 10 s before, as the floor's span
            if let Some(&(start, e_start)) =
                confirmed[..k].iter().rev().find(|(t, _)| end - t >= 10.0)
            {
                lowest = lowest.min((e_end - e_start) / (end - start));
            }
        }
        assert!(
            lowest >= 99.9,
            "fall at {fall_tenths}: a span of {lowest:.1} W"
        );
    }
}
