//! Outside input never crashes or poisons: a carbon-intensity file (any
//! bytes, or a grid operator's export with its times and figures broken) gives a series of
//! finite figures >= 0 over positive steps, or an error naming its line; the site file
//! gives a tariff of finite figures >= 0, or an error. Thousands of cases each.

use std::path::Path;

use proptest::prelude::*;
use proptest::sample::select;

use super::*;
use crate::site::{SiteFile, Tariff};

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,80}",
        prop::collection::vec(any::<u8>(), 0..80)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// A gCO2e/kWh figure as a file may hold it.
fn grams_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0.0f64..900.0).prop_map(|g| format!("{g:.1}")),
        1 => any::<f64>().prop_map(|g| g.to_string()),
        1 => select(vec!["NaN", "inf", "-1", "1e309", "", "ND", "-", "DC", "12,5", " 7 "]).prop_map(String::from),
        1 => any_text(),
    ]
}

/// A time as a two-column file may hold it: unix seconds (any), RFC 3339 (any date), or
/// anything.
fn time_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (1_600_000_000i64..1_800_000_000).prop_map(|t| (t - t % 900).to_string()),
        2 => any::<i64>().prop_map(|t| t.to_string()),
        1 => select(vec![i64::MIN, i64::MAX, i64::MIN + 1, -1, 0]).prop_map(|t| t.to_string()),
        2 => (0i32..10_000, 1u32..13, 1u32..32, 0u32..25, 0u32..61, select(vec!["Z", "+02:00", "-23:59", "+24:00", ""]))
            .prop_map(|(y, mo, d, h, mi, z)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:00{z}")),
        1 => any_text(),
    ]
}

/// A file in one of the formats, its rows broken here and there.
fn series_file() -> impl Strategy<Value = String> {
    let two = prop::collection::vec((time_text(), grams_text()), 0..12).prop_map(|rows| {
        let rows: Vec<String> = rows.into_iter().map(|(t, g)| format!("{t},{g}")).collect();
        format!("time,g_co2e_per_kwh\n{}\n", rows.join("\n"))
    });
    let maps = prop::collection::vec(
        ((2000i32..2100, 1u32..13, 1u32..29, 0u32..24), grams_text()),
        0..12,
    )
    .prop_map(|rows| {
        let rows: Vec<String> = rows
            .into_iter()
            .map(|((y, m, d, h), g)| format!("{y}-{m:02}-{d:02} {h:02}:00:00,France,FR,{g},40.1"))
            .collect();
        format!(
            "Datetime (UTC),Country,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA)\r\n{}\r\n",
            rows.join("\r\n")
        )
    });
    // RTE's own files: Paris wall-clock dates and quarter hours, the clock changes included
    let rte = prop::collection::vec(
        (
            prop_oneof![
                Just((2024, 3, 31)), Just((2024, 10, 27)), Just((262_143, 12, 31)),
                (1990i32..2100, 1u32..13, 1u32..32).prop_map(|d| d)
            ],
            (0u32..25, select(vec![0u32, 15, 30, 45, 60])),
            grams_text(),
        ),
        0..12,
    )
    .prop_map(|rows| {
        let rows: Vec<String> = rows
            .into_iter()
            .map(|((y, mo, d), (h, mi), g)| format!("France\tDonnées temps réel\t{y}-{mo:02}-{d:02}\t{h:02}:{mi:02}\t45000\t{g}\t"))
            .collect();
        format!("Périmètre\tNature\tDate\tHeures\tConsommation\tTaux de Co2\n{}\nRTE ne pourra être tenu responsable\n", rows.join("\n"))
    });
    prop_oneof![3 => two, 2 => maps, 2 => rte, 1 => any_text()]
}

/// A series read is usable: finite figures >= 0, a positive step; any run's emissions
/// under it are finite and not negative, or unknown.
fn check(series: Intensities, runs: &[(f64, f64, f64)]) -> Result<(), TestCaseError> {
    prop_assert!(series.step > 0, "step {}", series.step);
    prop_assert!(series.from.values().all(|g| g.is_finite() && *g >= 0.0));
    let keys: Vec<i64> = series.from.keys().copied().collect();
    let tariff = Tariff::new(None, Some(series), None, None).expect("no static figures");
    for &(joules, start, length) in runs {
        let start = keys.first().map_or(start, |k| *k as f64 + start);
        if let Some(g) = tariff.emissions_g(joules, start, start + length) {
            prop_assert!(g.is_finite() && g >= 0.0, "{g} g");
        }
    }
    Ok(())
}

fn runs() -> impl Strategy<Value = Vec<(f64, f64, f64)>> {
    prop::collection::vec((0.0f64..1e9, -1e5f64..1e6, 0.0f64..1e5), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn intensity_files(text in series_file(), latin1 in any::<bool>(), runs in runs()) {
        // RTE's files come as Latin-1: the same text's bytes one per character
        let bytes: Vec<u8> = if latin1 {
            text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect()
        } else {
            text.clone().into_bytes()
        };
        match Intensities::parse(Path::new("grid.csv"), &bytes) {
            Ok(series) => check(series, &runs)?,
            Err(TariffError::Csv { line, .. }) => {
                prop_assert!(line >= 1 && line <= text.lines().count() as u64 + 1, "line {line}");
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    #[test]
    fn any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300), runs in runs()) {
        if let Ok(series) = Intensities::parse(Path::new("grid.csv"), &bytes) {
            check(series, &runs)?;
        }
    }

    /// The site file: a tariff of finite figures >= 0, or an error.
    #[test]
    fn site_files(
        intensity in prop_oneof![(0.0f64..900.0).prop_map(|g| g.to_string()), select(vec!["nan", "inf", "-inf", "-1", "1e309", "\"300\"", "true", "[]"]).prop_map(String::from), any::<f64>().prop_map(|g| format!("{g:?}"))],
        price in prop_oneof![(0.0f64..1.0).prop_map(|p| p.to_string()), select(vec!["nan", "-0.2", "inf"]).prop_map(String::from)],
        extra in prop_oneof![Just(String::new()), any_text()],
    ) {
        let text = format!("carbon_intensity = {intensity}\nprice_per_kwh = {price}\n{extra}");
        if let Ok(site) = SiteFile::parse(Path::new("senergy.conf"), &text)
            && let Ok(t) = Tariff::new(site.carbon_intensity, None, site.price_per_kwh, site.currency)
        {
            prop_assert!(t.location.value.is_none_or(|g| g.is_finite() && g >= 0.0));
            prop_assert!(t.price_per_kwh.is_none_or(|p| p.is_finite() && p >= 0.0));
            prop_assert!(t.cost(3.6e6).is_none_or(|c| c.is_finite() && c >= 0.0));
        }
    }

    #[test]
    fn times(text in prop_oneof![time_text(), any_text()]) {
        let _ = parse_time(&text);
    }
}
