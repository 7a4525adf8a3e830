use super::*;
// the series are checked through the tariff, as reports use them
use crate::site::Tariff;

fn hourly(text: &str) -> Result<Intensities, TariffError> {
    Intensities::parse(Path::new("i.csv"), text)
}

#[test]
fn hourly_is_integrated_over_the_run() {
    let h =
        hourly("hour,g\n2025-01-01T00:00:00Z,100\n1735693200,300\n").expect("valid in this test");
    let t0 = 1_735_689_600; // 2025-01-01T00:00:00Z
    let t = Tariff::new(None, Some(h), None, None).expect("valid in this test");
    // 1 kWh over 00:30-01:30: half at 100, half at 300
    let g = t
        .emissions_g(3.6e6, (t0 + 1800) as f64, (t0 + 5400) as f64)
        .expect("valid in this test");
    assert!((g - 200.0).abs() < 1e-9, "{g}");
    // a quarter in the first hour
    let g = t
        .emissions_g(3.6e6, (t0 + 2700) as f64, (t0 + 6300) as f64)
        .expect("valid in this test");
    assert!((g - (0.25 * 100.0 + 0.75 * 300.0)).abs() < 1e-9, "{g}");
    // an hour the table lacks and no static fallback: unknown
    assert_eq!(
        t.emissions_g(3.6e6, (t0 + 3600) as f64, (t0 + 7300) as f64),
        None
    );
    let with_static = Tariff {
        location: crate::scopes::Factor {
            value: Some(500.0),
            ..t.location.clone()
        },
        ..t
    };
    let g = with_static
        .emissions_g(3.6e6, (t0 + 5400) as f64, (t0 + 9000) as f64)
        .expect("valid in this test");
    assert!((g - (0.5 * 300.0 + 0.5 * 500.0)).abs() < 1e-9, "{g}");
}

/// Electricity Maps' hourly export (both header generations) and RTE éCO2mix's
/// 15-minute one, as downloaded: the same series, each piece at its own intensity.
#[test]
fn grid_operators_exports_are_read_as_published() {
    let t0 = 1_735_689_600; // 2025-01-01T00:00:00Z
    for header in [
        "Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),\
             Carbon Intensity gCO₂eq/kWh (LCA),Low Carbon Percentage,Renewable Percentage,\
             Data Source,Data Estimated,Data Estimation Method",
        "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),\
             Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%),\
             Renewable energy percentage (RE%),Data source,Data estimated,Data estimation method",
    ] {
        let text = format!(
            "{header}\r\n2025-01-01 00:00:00,France,France,FR,20.5,40.1,90,30,entsoe.eu,false,\r\n\
                 2025-01-01 01:00:00,France,France,FR,60.5,80.1,90,30,entsoe.eu,false,\r\n"
        );
        let series =
            Intensities::parse(Path::new("FR_2025_hourly.csv"), &text).expect("valid in this test");
        assert_eq!(series.format, "Electricity Maps export");
        let t = Tariff::new(None, Some(series), None, None).expect("valid");
        // 1 kWh over 00:30-01:30: half at 20.5, half at 60.5 (the direct figures)
        let g = t
            .emissions_g(3.6e6, (t0 + 1800) as f64, (t0 + 5400) as f64)
            .expect("covered");
        assert!((g - 40.5).abs() < 1e-9, "{g}");
    }
    // éCO2mix through ODRE: `;`, times with their offset, rows unsorted, some empty
    let text = "Périmètre;Nature;Date;Heure;Date - Heure;Consommation (MW);Taux de CO2 (g/kWh)\n\
                    France;Données temps réel;2025-01-01;01:15;2025-01-01T01:15:00+01:00;60000;30\n\
                    France;Données temps réel;2025-01-01;01:00;2025-01-01T01:00:00+01:00;60000;20\n\
                    France;Données temps réel;2025-01-01;01:30;2025-01-01T01:30:00+01:00;60000;\n\
                    France;Données temps réel;2025-01-01;01:45;2025-01-01T01:45:00+01:00;60000;50\n";
    let series =
        Intensities::parse(Path::new("eco2mix-national-tr.csv"), text).expect("valid in this test");
    assert_eq!(series.format, "RTE eCO2mix export");
    let t = Tariff::new(Some(1000.0), Some(series), None, None).expect("valid");
    // an hour from 00:00 UTC (01:00 in Paris): 20, 30, the missing quarter at the
    // static 1000, then 50
    let g = t
        .emissions_g(3.6e6, (t0) as f64, (t0 + 3600) as f64)
        .expect("covered");
    assert!(
        (g - (20.0 + 30.0 + 1000.0 + 50.0) / 4.0).abs() < 1e-9,
        "{g}"
    );
}

/// A 5-minute series that doubles mid-job while the job runs: each piece at its own.
#[test]
fn a_series_at_any_interval_is_followed_exactly() {
    let t0 = 1_735_689_600;
    let text = format!("time,g\n{t0},100\n{},200\n{},200\n", t0 + 300, t0 + 600);
    let t = Tariff::new(None, Some(hourly(&text).expect("valid")), None, None).expect("valid");
    // 2 kWh over 2.5 minutes before and 5 after the doubling
    let g = t
        .emissions_g(7.2e6, (t0 + 150) as f64, (t0 + 600) as f64)
        .expect("covered");
    assert!(
        (g - (2.0 / 3.0 * 100.0 + 4.0 / 3.0 * 200.0)).abs() < 1e-9,
        "{g}"
    );
    // past the last value's step: not covered
    assert_eq!(
        t.emissions_g(7.2e6, (t0 + 600) as f64, (t0 + 960) as f64),
        None
    );
}

#[test]
fn malformed_csv_names_the_line() {
    for (text, line, words) in [
        ("hour,g\n1735689600,abc\n", 2, "\"abc\""),
        ("hour,g\nyesterday,5\n", 2, "\"yesterday\""),
        ("hour,g\n1735689600,5\n1735689600,6\n", 3, "twice"),
        ("hour,g\n1735689600,-5\n", 2, ">= 0"),
        // beyond 1e9 a job's emissions overflowed to infinity
        ("hour,g\n1735689600,1.4e307\n", 2, "<= 1e9"),
        ("hour,g\n1735689600\n", 2, ""),
        (
            "hour,g\r\n1735689600,5\r\nyesterday,5\r\n",
            3,
            "\"yesterday\"",
        ),
    ] {
        match hourly(text) {
            Err(TariffError::Csv {
                line: l, message, ..
            }) => {
                assert_eq!(l, line, "{text:?}: {message}");
                assert!(message.contains(words), "{text:?}: {message}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    assert!(matches!(hourly("hour,g\n"), Err(TariffError::Csv { .. })));
}

/// The header of RTE's `.xls` as of 2024 (40 columns).
const RTE_XLS_HEADER: &str = "Périmètre\tNature\tDate\tHeures\tConsommation\tPrévision J-1\t\
        Prévision J\tFioul\tCharbon\tGaz\tNucléaire\tEolien\tSolaire\tHydraulique\tPompage\t\
        Bioénergies\tEch. physiques\tTaux de Co2\tEch. comm. Angleterre\tEch. comm. Espagne\t\
        Ech. comm. Italie\tEch. comm. Suisse\tEch. comm. Allemagne-Belgique\tFioul - TAC\t\
        Fioul - Cogén.\tFioul - Autres\tGaz - TAC\tGaz - Cogén.\tGaz - CCG\tGaz - Autres\t\
        Hydraulique - Fil de l?eau + éclusée\tHydraulique - Lacs\tHydraulique - STEP turbinage\t\
        Bioénergies - Déchets\tBioénergies - Biomasse\tBioénergies - Biogaz\t Stockage batterie\t\
        Déstockage batterie\tEolien terrestre\tEolien offshore";

const RTE_NOTICE: &str = "RTE ne pourra être tenu responsable de l'usage qui pourrait être \
        fait des données mises à disposition, ni en cas de prévisions qui se révèleraient \
        imprécises.";

/// A row of RTE's `.xls` with `co2` as its `Taux de Co2`; as in consolidated files, a row
/// without one has only its forecasts. Ends with a tab, as RTE's rows do.
fn rte_row(nature: &str, date: &str, hours: &str, co2: &str) -> String {
    let figure = if co2.is_empty() { "" } else { "40000" };
    let mut fields = vec!["France", nature, date, hours, figure, "43400", "43000"];
    fields.extend(std::iter::repeat_n(figure, 10));
    fields.push(co2);
    fields.extend(std::iter::repeat_n(figure, 22));
    fields.join("\t") + "\t"
}

/// RTE's `.xls` from its lines, in Latin-1 as RTE writes it.
fn rte_xls(rows: &[String]) -> Vec<u8> {
    let text: String = std::iter::once(RTE_XLS_HEADER)
        .chain(rows.iter().map(String::as_str))
        .flat_map(|line| [line, "\n"])
        .collect();
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).expect("Latin-1 in this test"))
        .collect()
}

fn utc(rfc3339: &str) -> i64 {
    parse_time(rfc3339).expect("valid in this test")
}

/// A consolidated file over both 2024 changes, as RTE writes it: Latin-1, figures at :00
/// and :30 only, the skipped spring hour filled with the next one's figures, the autumn
/// hour listed once, the notice and an empty line at the end.
#[test]
fn rte_xls_is_read_in_paris_time() {
    let rows: Vec<String> = [
        ("2024-03-31", "01:30", "20"),
        ("2024-03-31", "01:45", ""),
        ("2024-03-31", "02:00", "21"),
        ("2024-03-31", "02:15", ""),
        ("2024-03-31", "02:30", "20"),
        ("2024-03-31", "02:45", ""),
        ("2024-03-31", "03:00", "21"),
        ("2024-03-31", "03:15", ""),
        ("2024-10-27", "01:30", "20"),
        ("2024-10-27", "01:45", ""),
        ("2024-10-27", "02:00", "9"),
        ("2024-10-27", "02:15", ""),
        ("2024-10-27", "02:30", "10"),
        ("2024-10-27", "02:45", ""),
        ("2024-10-27", "03:00", "11"),
        ("2024-10-27", "03:15", ""),
    ]
    .iter()
    .map(|(date, hours, co2)| rte_row("Données consolidées", date, hours, co2))
    .chain([RTE_NOTICE.to_string(), String::new()])
    .collect();
    let bytes = rte_xls(&rows);
    assert!(std::str::from_utf8(&bytes).is_err(), "Latin-1, not UTF-8");
    let path = Path::new("eCO2mix_RTE_En-cours-Consolide.xls");
    let series = Intensities::parse(path, &bytes).expect("valid in this test");
    assert_eq!(series.format, "RTE eCO2mix (rte-france.com)");
    let expected: BTreeMap<i64, f64> = [
        ("2024-03-31T00:30:00Z", 20.0), // 01:30 CET
        ("2024-03-31T01:00:00Z", 21.0), // 03:00 CEST; 02:xx does not exist
        ("2024-10-26T23:30:00Z", 20.0), // 01:30 CEST
        ("2024-10-27T00:00:00Z", 9.0),  // 02:00 CEST, the first of the two
        ("2024-10-27T00:30:00Z", 10.0),
        ("2024-10-27T02:00:00Z", 11.0), // 03:00 CET
    ]
    .into_iter()
    .map(|(t, g)| (utc(t), g))
    .collect();
    assert_eq!(series.from, expected);
    assert_eq!(series.step, 1800);
    // the same file saved as UTF-8 reads the same
    let text: String = bytes.iter().copied().map(char::from).collect();
    assert_eq!(Intensities::parse(path, &text).expect("valid"), series);
    let t = Tariff::new(None, Some(series), None, None).expect("valid");
    let night = utc("2024-10-27T00:00:00Z") as f64;
    let g = t
        .emissions_g(3.6e6, night, night + 3600.0)
        .expect("covered");
    assert!((g - 9.5).abs() < 1e-9, "{g}");
    // the winter-time 02:00-03:00, which RTE does not list, has no value
    assert_eq!(t.emissions_g(3.6e6, night + 3600.0, night + 7200.0), None);
}

/// A Paris wall-clock time `%Y-%m-%d %H:%M`, as `paris_wall` places it.
fn wall(text: &str) -> Wall {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M")
        .ok()
        .and_then(paris_wall)
        .expect("valid in this test")
}

/// The UTC time an RFC 3339 text names.
fn naive(rfc3339: &str) -> NaiveDateTime {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("valid in this test")
        .naive_utc()
}

#[test]
fn paris_time_follows_the_eu_rule() {
    for (local, expected) in [
        (
            "2023-03-26 01:59",
            Wall::Once(naive("2023-03-26T00:59:00Z")),
        ),
        ("2023-03-26 02:00", Wall::Never),
        (
            "2023-03-26 03:00",
            Wall::Once(naive("2023-03-26T01:00:00Z")),
        ),
        (
            "2023-07-14 12:00",
            Wall::Once(naive("2023-07-14T10:00:00Z")),
        ),
        (
            "2023-10-29 01:59",
            Wall::Once(naive("2023-10-28T23:59:00Z")),
        ),
        (
            "2023-10-29 02:45",
            Wall::Twice {
                cest: naive("2023-10-29T00:45:00Z"),
                cet: naive("2023-10-29T01:45:00Z"),
            },
        ),
        (
            "2023-10-29 03:00",
            Wall::Once(naive("2023-10-29T02:00:00Z")),
        ),
        (
            "2025-01-01 00:30",
            Wall::Once(naive("2024-12-31T23:30:00Z")),
        ),
        ("2025-03-30 02:30", Wall::Never),
        (
            "2025-10-26 01:00",
            Wall::Once(naive("2025-10-25T23:00:00Z")),
        ),
    ] {
        assert_eq!(wall(local), expected, "{local}");
    }
    // a file listing the autumn hour twice: summer time first, then winter time
    let mut paris = ParisClock::default();
    let twice = wall("2025-10-26 02:15");
    assert_eq!(paris.utc(twice), Some(utc("2025-10-26T00:15:00Z")));
    assert_eq!(paris.utc(twice), Some(utc("2025-10-26T01:15:00Z")));
    assert_eq!(paris.utc(wall("2025-03-30 02:15")), None);
}

/// Before the EU rule, France's summer time ended on the last Sunday of September
/// (1990: 03:00 CEST became 02:00 CET on 30 September, as `zdump -v Europe/Paris` says).
#[test]
fn paris_time_follows_its_history() {
    assert_eq!(
        wall("1990-09-30 02:30"),
        Wall::Twice {
            cest: naive("1990-09-30T00:30:00Z"),
            cet: naive("1990-09-30T01:30:00Z"),
        }
    );
    assert_eq!(
        wall("1990-10-15 12:00"),
        Wall::Once(naive("1990-10-15T11:00:00Z"))
    );
    assert_eq!(wall("1990-03-25 02:30"), Wall::Never);
}

#[test]
fn malformed_rte_xls_names_the_line() {
    let tr = |date: &str, hours: &str, co2: &str| rte_row("Données temps réel", date, hours, co2);
    for (rows, line, words) in [
        (vec![tr("2024-01-01", "00:00", "abc")], 2, "\"abc\""),
        (
            vec![
                tr("2024-01-01", "00:00", "30"),
                tr("2024-01-01", "25:00", "30"),
            ],
            3,
            "\"2024-01-01 25:00\"",
        ),
        (
            vec!["France\tDonnées temps réel\t2024-01-01\t00:00\t45000".to_string()],
            2,
            "fewer fields",
        ),
        (
            vec![
                tr("2024-10-27", "02:00", "30"),
                tr("2024-10-27", "02:00", "31"),
                tr("2024-10-27", "02:00", "32"),
            ],
            4,
            "twice",
        ),
    ] {
        match Intensities::parse(Path::new("eCO2mix_RTE_En-cours-TR.xls"), rte_xls(&rows)) {
            Err(TariffError::Csv {
                line: l, message, ..
            }) => {
                assert_eq!(l, line, "{rows:?}: {message}");
                assert!(message.contains(words), "{rows:?}: {message}");
            }
            other => panic!("{rows:?}: {other:?}"),
        }
    }
}
