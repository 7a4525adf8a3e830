//! Carbon intensity and price: a static gCO2e/kWh, optionally a grid's intensity series
//! (any interval; as grid operators publish it) integrated over a job's run time, and a
//! price per kWh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

pub const JOULES_PER_KWH: f64 = 3.6e6;

#[derive(Debug, Error)]
pub enum TariffError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}, line {line}: {message}")]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("{what} = {value}: must be a finite number >= 0")]
    Negative { what: &'static str, value: f64 },
}

/// The site file (`/etc/slurm/senergy.conf`, TOML).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SiteFile {
    /// gCO2e per kWh, used for the hours the CSV does not cover.
    pub carbon_intensity: Option<f64>,
    /// An intensity series: `time,g_co2e_per_kwh` (unix seconds or RFC 3339), or an
    /// Electricity Maps or RTE éCO2mix export as downloaded.
    pub carbon_intensity_csv: Option<PathBuf>,
    pub price_per_kwh: Option<f64>,
    pub currency: Option<String>,
    /// The Prometheus that scrapes the nodes' metrics files (`EnergyMetricsFile`).
    pub prometheus_url: Option<String>,
}

impl SiteFile {
    pub fn parse(path: &Path, text: &str) -> Result<SiteFile, TariffError> {
        toml::from_str(text).map_err(|e| TariffError::Config {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })
    }
}

/// A grid's carbon intensity over time: the gCO2e/kWh from each key (unix seconds) for the
/// series' step (its shortest interval; an hour for a file of one row), or until the next
/// key if that is sooner: hourly tables, 15-minute and 5-minute series alike. A time no
/// value covers (a missing row) has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Intensities {
    from: BTreeMap<i64, f64>,
    /// How long a value holds at most.
    step: i64,
    /// Which file format it was read from, for reports.
    pub format: &'static str,
}

/// The formats an intensity file is read in, told by its header.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    /// `time,g_co2e_per_kwh`: unix seconds or RFC 3339.
    TwoColumns,
    /// Electricity Maps' exports: `Datetime (UTC)` (`2024-01-01 00:00:00`) and `Carbon
    /// intensity gCO₂eq/kWh (direct)` (`Carbon Intensity ...` in older files).
    ElectricityMaps { time: usize, grams: usize },
    /// RTE éCO2mix through ODRE (`eco2mix-national-tr.csv`, `;`): `Date - Heure` (RFC 3339
    /// with its offset) and `Taux de CO2 (g/kWh)`; rows not in order, some without a value.
    Eco2mix { time: usize, grams: usize },
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::TwoColumns => "time,g_co2e_per_kwh",
            Format::ElectricityMaps { .. } => "Electricity Maps export",
            Format::Eco2mix { .. } => "RTE eCO2mix export",
        }
    }

    /// From the header's fields.
    fn of(header: &[&str]) -> Format {
        let find =
            |what: &dyn Fn(&str) -> bool| header.iter().position(|h| what(&h.to_lowercase()));
        if let (Some(time), Some(grams)) = (
            find(&|h| h == "datetime (utc)"),
            find(&|h| h.starts_with("carbon intensity") && h.ends_with("(direct)")),
        ) {
            return Format::ElectricityMaps { time, grams };
        }
        if let (Some(time), Some(grams)) = (
            find(&|h| h == "date - heure"),
            find(&|h| h.starts_with("taux de co2")),
        ) {
            return Format::Eco2mix { time, grams };
        }
        Format::TwoColumns
    }
}

impl Intensities {
    /// Reads a series in any of the [`Format`]s; an error names the line.
    pub fn parse(path: &Path, text: &str) -> Result<Intensities, TariffError> {
        let err = |line: u64, message: String| TariffError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        };
        let first = text.lines().next().unwrap_or_default();
        let delimiter = if first.matches(';').count() > first.matches(',').count() {
            b';'
        } else {
            b','
        };
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .delimiter(delimiter)
            .flexible(true)
            .from_reader(text.trim_start_matches('\u{feff}').as_bytes());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| err(1, e.to_string()))?
            .iter()
            .map(str::to_string)
            .collect();
        let format = Format::of(&header.iter().map(String::as_str).collect::<Vec<_>>());
        let mut from = BTreeMap::new();
        for record in reader.records() {
            let record = record
                .map_err(|e| err(e.position().map(|p| p.line()).unwrap_or(0), e.to_string()))?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let (time, value) = match format {
                Format::TwoColumns => match (record.get(0), record.get(1), record.len()) {
                    (Some(t), Some(v), 2) => (t, v),
                    _ => return Err(err(line, "expected two fields: time,g_co2e_per_kwh".into())),
                },
                Format::ElectricityMaps { time, grams } | Format::Eco2mix { time, grams } => {
                    match (record.get(time), record.get(grams)) {
                        (Some(t), Some(v)) => (t, v),
                        _ => {
                            return Err(err(
                                line,
                                format!("fewer fields than the header's {}", header.len()),
                            ));
                        }
                    }
                }
            };
            // éCO2mix leaves the intensity of some quarter hours empty (or "ND")
            if matches!(format, Format::Eco2mix { .. }) && matches!(value, "" | "ND" | "-") {
                continue;
            }
            let start = match format {
                Format::ElectricityMaps { .. } => {
                    chrono::NaiveDateTime::parse_from_str(time, "%Y-%m-%d %H:%M:%S")
                        .ok()
                        .map(|t| t.and_utc().timestamp())
                }
                _ => parse_time(time),
            }
            .ok_or_else(|| err(line, format!("{time:?} is not a time this format has")))?;
            let grams: f64 = value
                .parse()
                .ok()
                .filter(|g: &f64| g.is_finite() && *g >= 0.0)
                .ok_or_else(|| err(line, format!("{value:?} is not a gCO2e/kWh figure >= 0")))?;
            if from.insert(start, grams).is_some() {
                return Err(err(line, format!("time {time} is listed twice")));
            }
        }
        if from.is_empty() {
            return Err(err(1, "no intensities listed".into()));
        }
        let keys: Vec<i64> = from.keys().copied().collect();
        let step = keys.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(3600);
        Ok(Intensities {
            from,
            step,
            format: format.name(),
        })
    }

    /// The pieces of `[start, end)` (unix seconds) with their intensity (`None` where no
    /// value holds).
    fn pieces(&self, start: f64, end: f64) -> Vec<(f64, f64, Option<f64>)> {
        let mut bounds = vec![start, end];
        let (first, last) = (start.floor() as i64 - self.step, end.ceil() as i64);
        for (t, _) in self.from.range(first..=last) {
            bounds.extend(
                [*t, t + self.step]
                    .into_iter()
                    .map(|b| b as f64)
                    .filter(|b| start < *b && *b < end),
            );
        }
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        bounds
            .windows(2)
            .map(|w| (w[0], w[1], self.at(w[0])))
            .collect()
    }

    /// The intensity at `t` (unix seconds).
    fn at(&self, t: f64) -> Option<f64> {
        let (from, grams) = self.from.range(..=t.floor() as i64).next_back()?;
        (t < (from + self.step) as f64).then_some(*grams)
    }
}

/// Unix seconds, or an RFC 3339 time (`2025-03-01T13:00:00Z`).
pub fn parse_time(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().or_else(|| {
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp())
    })
}

/// Where a job's emissions and cost come from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tariff {
    pub intensity: Option<f64>,
    pub series: Option<Intensities>,
    pub price_per_kwh: Option<f64>,
    pub currency: String,
}

impl Tariff {
    pub fn new(
        intensity: Option<f64>,
        series: Option<Intensities>,
        price_per_kwh: Option<f64>,
        currency: Option<String>,
    ) -> Result<Tariff, TariffError> {
        for (what, value) in [
            ("carbon_intensity", intensity),
            ("price_per_kwh", price_per_kwh),
        ] {
            if let Some(value) = value.filter(|v| !v.is_finite() || *v < 0.0) {
                return Err(TariffError::Negative { what, value });
            }
        }
        Ok(Tariff {
            intensity,
            series,
            price_per_kwh,
            currency: currency.unwrap_or_default(),
        })
    }

    /// gCO2e of `joules` spent evenly over `[start, end)` (unix seconds): each piece of the
    /// run at the series' intensity then, the static one where the series has none. `None`
    /// if some piece has neither.
    pub fn emissions_g(&self, joules: f64, start: f64, end: f64) -> Option<f64> {
        let kwh = joules / JOULES_PER_KWH;
        let Some(series) = &self.series else {
            return self.intensity.map(|g| kwh * g);
        };
        if end <= start {
            return series.at(start).or(self.intensity).map(|g| kwh * g);
        }
        let duration = end - start;
        let mut grams = 0.0;
        for (from, to, g) in series.pieces(start, end) {
            grams += kwh * (to - from) / duration * g.or(self.intensity)?;
        }
        Some(grams)
    }

    pub fn cost(&self, joules: f64) -> Option<f64> {
        self.price_per_kwh.map(|p| joules / JOULES_PER_KWH * p)
    }

    /// The intensity in words for reports ("350 gCO2e/kWh", "... series, else 350").
    pub fn intensity_text(&self) -> Option<String> {
        match (&self.series, self.intensity) {
            (Some(s), Some(g)) => Some(format!("{} series, else {g} gCO2e/kWh", s.format)),
            (Some(s), None) => Some(format!("{} series", s.format)),
            (None, Some(g)) => Some(format!("{g} gCO2e/kWh")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hourly(text: &str) -> Result<Intensities, TariffError> {
        Intensities::parse(Path::new("i.csv"), text)
    }

    #[test]
    fn static_intensity_and_price() {
        let t = Tariff::new(Some(350.0), None, Some(0.25), Some("EUR".into()))
            .expect("valid in this test");
        // 7.2 MJ = 2 kWh
        assert_eq!(t.emissions_g(7.2e6, 0.0, 100.0), Some(700.0));
        assert_eq!(t.cost(7.2e6), Some(0.5));
        let none = Tariff::default();
        assert_eq!(none.emissions_g(7.2e6, 0.0, 100.0), None);
        assert_eq!(none.cost(7.2e6), None);
    }

    #[test]
    fn hourly_is_integrated_over_the_run() {
        let h = hourly("hour,g\n2025-01-01T00:00:00Z,100\n1735693200,300\n")
            .expect("valid in this test");
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
            intensity: Some(500.0),
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
            let series = Intensities::parse(Path::new("FR_2025_hourly.csv"), &text)
                .expect("valid in this test");
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
        let series = Intensities::parse(Path::new("eco2mix-national-tr.csv"), text)
            .expect("valid in this test");
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
            ("hour,g\n1735689600\n", 2, ""),
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

    #[test]
    fn site_file_keys() {
        let f = SiteFile::parse(
            Path::new("s.conf"),
            "carbon_intensity = 350\nprice_per_kwh = 0.25\ncurrency = \"EUR\"\n",
        )
        .expect("valid in this test");
        assert_eq!(f.carbon_intensity, Some(350.0));
        assert_eq!(f.currency.as_deref(), Some("EUR"));
        let e = SiteFile::parse(Path::new("s.conf"), "carbon_intensty = 3\n")
            .expect_err("invalid in this test");
        assert!(e.to_string().contains("carbon_intensty"), "{e}");
        let e = SiteFile::parse(Path::new("s.conf"), "price_per_kwh = \"cheap\"\n")
            .expect_err("invalid in this test");
        assert!(e.to_string().contains("price_per_kwh"), "{e}");
        assert!(Tariff::new(Some(-1.0), None, None, None).is_err());
        assert!(Tariff::new(None, None, Some(f64::NAN), None).is_err());
    }
}
