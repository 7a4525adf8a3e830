//! Carbon intensity and price: a static gCO2e/kWh, optionally hourly intensities
//! integrated over a job's run time, and a price per kWh.

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
    /// CSV of hourly intensities: `hour,g_co2e_per_kwh` (unix seconds or RFC 3339).
    pub carbon_intensity_csv: Option<PathBuf>,
    pub price_per_kwh: Option<f64>,
    pub currency: Option<String>,
}

impl SiteFile {
    pub fn parse(path: &Path, text: &str) -> Result<SiteFile, TariffError> {
        toml::from_str(text).map_err(|e| TariffError::Config {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })
    }
}

/// Hourly intensities: the gCO2e/kWh of the hour starting at each key (unix seconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hourly(BTreeMap<i64, f64>);

impl Hourly {
    pub fn parse(path: &Path, text: &str) -> Result<Hourly, TariffError> {
        let err = |line: u64, message: String| TariffError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let mut hours = BTreeMap::new();
        for record in reader.records() {
            let record = record
                .map_err(|e| err(e.position().map(|p| p.line()).unwrap_or(0), e.to_string()))?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let (Some(hour), Some(value), 2) = (record.get(0), record.get(1), record.len()) else {
                return Err(err(line, "expected two fields: hour,g_co2e_per_kwh".into()));
            };
            let start = parse_time(hour)
                .ok_or_else(|| err(line, format!("{hour:?} is not unix seconds or RFC 3339")))?;
            if start % 3600 != 0 {
                return Err(err(line, format!("{hour:?} does not start an hour (UTC)")));
            }
            let grams: f64 = value
                .parse()
                .ok()
                .filter(|g: &f64| g.is_finite() && *g >= 0.0)
                .ok_or_else(|| err(line, format!("{value:?} is not a gCO2e/kWh figure >= 0")))?;
            if hours.insert(start, grams).is_some() {
                return Err(err(line, format!("hour {hour} is listed twice")));
            }
        }
        if hours.is_empty() {
            return Err(err(1, "no hours listed".into()));
        }
        Ok(Hourly(hours))
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
    pub hourly: Option<Hourly>,
    pub price_per_kwh: Option<f64>,
    pub currency: String,
}

impl Tariff {
    pub fn new(
        intensity: Option<f64>,
        hourly: Option<Hourly>,
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
            hourly,
            price_per_kwh,
            currency: currency.unwrap_or_default(),
        })
    }

    /// gCO2e of `joules` spent evenly over `[start, end)` (unix seconds): each hour's
    /// share of the run time at that hour's intensity, the static one where the hourly
    /// table has no entry. `None` if some hour has neither.
    pub fn emissions_g(&self, joules: f64, start: i64, end: i64) -> Option<f64> {
        let kwh = joules / JOULES_PER_KWH;
        let Some(Hourly(hours)) = &self.hourly else {
            return self.intensity.map(|g| kwh * g);
        };
        let at = |hour: i64| hours.get(&hour).copied().or(self.intensity);
        if end <= start {
            return at(start.div_euclid(3600) * 3600).map(|g| kwh * g);
        }
        let duration = (end - start) as f64;
        let mut grams = 0.0;
        let mut hour = start.div_euclid(3600) * 3600;
        while hour < end {
            let overlap = (end.min(hour + 3600) - start.max(hour)) as f64;
            grams += kwh * overlap / duration * at(hour)?;
            hour += 3600;
        }
        Some(grams)
    }

    pub fn cost(&self, joules: f64) -> Option<f64> {
        self.price_per_kwh.map(|p| joules / JOULES_PER_KWH * p)
    }

    /// The intensity in words for reports ("350 gCO2e/kWh", "hourly (static 350)").
    pub fn intensity_text(&self) -> Option<String> {
        match (&self.hourly, self.intensity) {
            (Some(_), Some(g)) => Some(format!("hourly table, else {g} gCO2e/kWh")),
            (Some(_), None) => Some("hourly table".into()),
            (None, Some(g)) => Some(format!("{g} gCO2e/kWh")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hourly(text: &str) -> Result<Hourly, TariffError> {
        Hourly::parse(Path::new("i.csv"), text)
    }

    #[test]
    fn static_intensity_and_price() {
        let t = Tariff::new(Some(350.0), None, Some(0.25), Some("EUR".into()))
            .expect("valid in this test");
        // 7.2 MJ = 2 kWh
        assert_eq!(t.emissions_g(7.2e6, 0, 100), Some(700.0));
        assert_eq!(t.cost(7.2e6), Some(0.5));
        let none = Tariff::default();
        assert_eq!(none.emissions_g(7.2e6, 0, 100), None);
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
            .emissions_g(3.6e6, t0 + 1800, t0 + 5400)
            .expect("valid in this test");
        assert!((g - 200.0).abs() < 1e-9, "{g}");
        // a quarter in the first hour
        let g = t
            .emissions_g(3.6e6, t0 + 2700, t0 + 6300)
            .expect("valid in this test");
        assert!((g - (0.25 * 100.0 + 0.75 * 300.0)).abs() < 1e-9, "{g}");
        // an hour the table lacks and no static fallback: unknown
        assert_eq!(t.emissions_g(3.6e6, t0 + 3600, t0 + 7300), None);
        let with_static = Tariff {
            intensity: Some(500.0),
            ..t
        };
        let g = with_static
            .emissions_g(3.6e6, t0 + 5400, t0 + 9000)
            .expect("valid in this test");
        assert!((g - (0.5 * 300.0 + 0.5 * 500.0)).abs() < 1e-9, "{g}");
    }

    #[test]
    fn malformed_csv_names_the_line() {
        for (text, line, words) in [
            ("hour,g\n1735689600,abc\n", 2, "\"abc\""),
            ("hour,g\n1735689601,5\n", 2, "does not start an hour"),
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
