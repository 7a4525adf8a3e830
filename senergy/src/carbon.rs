//! Carbon intensity series: a grid's gCO2e/kWh (any interval; as grid operators publish
//! it) read from its file, to be integrated over a job's run time; the checks every figure
//! of the site file passes, and the errors of reading it. The site file and the tariff it
//! makes are [`crate::site`]'s.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::{MappedLocalTime, NaiveDateTime, Offset, TimeZone};
use chrono_tz::{Europe::Paris, Tz};
use thiserror::Error;

pub const JOULES_PER_KWH: f64 = 3.6e6;

/// The largest carbon intensity (gCO2e/kWh) or price per kWh taken: far above any grid's
/// (coal's is about 1 000 gCO2e/kWh), and small enough that no energy Slurm can record
/// (u64 joules, 5e12 kWh) times it overflows a float to infinity, as 1e307 gCO2e/kWh did.
pub const MAX_FIGURE: f64 = 1e9;

/// A figure from 0 to [`MAX_FIGURE`] (not NaN).
pub fn is_figure(v: f64) -> bool {
    (0.0..=MAX_FIGURE).contains(&v)
}

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
    #[error("{what} = {value}: must be a finite number >= 0 and <= 1e9")]
    OutOfRange { what: &'static str, value: f64 },
    #[error("pue = {value}: must be a power usage effectiveness from 1 to 10")]
    Pue { value: f64 },
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
    /// RTE éCO2mix from rte-france.com ("Télécharger les indicateurs": the `.xls` in
    /// `eCO2mix_RTE_En-cours-TR.zip`, `eCO2mix_RTE_En-cours-Consolide.zip`,
    /// `eCO2mix_RTE_Annuel-Definitif_2023.zip`). Despite its name the `.xls` is text:
    ///
    /// - tab-separated, ISO-8859-1 (Latin-1); data rows end with a tab, one field more than
    ///   the header;
    /// - header `Périmètre`, `Nature`, `Date`, `Heures`, `Consommation`, `Prévision J-1`,
    ///   `Prévision J`, `Fioul`, ..., `Ech. physiques`, `Taux de Co2` (so spelt), `Ech. comm.
    ///   Angleterre`, ...: 36 columns in 2016, 40 since the battery and offshore wind ones;
    /// - `Date` `2024-10-27`, `Heures` `02:15`, Paris wall-clock time, 96 quarter hours a day
    ///   every day: on the spring-forward Sunday the 02:00-02:45 rows, an hour Paris skips,
    ///   repeat another hour's figures; on the autumn Sunday the 02:00-02:45 rows that
    ///   Paris lives twice are listed once;
    /// - `Taux de Co2` in gCO2/kWh: every quarter hour in real-time (`Données temps réel`)
    ///   files, only at :00 and :30 in consolidated and definitive ones, whose :15 and :45
    ///   rows are empty but for forecasts; quarters not yet come are empty (`ND` in the
    ///   forecasts);
    /// - a closing notice, `RTE ne pourra être tenu responsable de l'usage qui pourrait être
    ///   fait des données mises à disposition, ni en cas de prévisions qui se révèleraient
    ///   imprécises.`, then an empty line.
    ///
    /// Read from such files kept in public repositories (`eCO2mix_RTE_En-cours-TR.xls` of
    /// June 2016 in Vomain/dubonjus, `eCO2mix_RTE_En-cours-Consolide.xls` of 2024 in
    /// thomasissa-png/Tempo: 2024-03-31 and 2024-10-27 show the two changes) and from
    /// readers of them (lpea/eCO2mix_viz: Latin-1, every other row empty, one footer line;
    /// henriupton99/eco2mix-retriever: tab, Latin-1; pierre-haessig/french-elec: the same
    /// 96-row days in RTE's older daily files).
    Eco2mixRte {
        date: usize,
        hours: usize,
        grams: usize,
    },
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::TwoColumns => "time,g_co2e_per_kwh",
            Format::ElectricityMaps { .. } => "Electricity Maps export",
            Format::Eco2mix { .. } => "RTE eCO2mix export",
            Format::Eco2mixRte { .. } => "RTE eCO2mix (rte-france.com)",
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
        let co2 = find(&|h| h.starts_with("taux de co2"));
        if let (Some(time), Some(grams)) = (find(&|h| h == "date - heure"), co2) {
            return Format::Eco2mix { time, grams };
        }
        if let (Some(date), Some(hours), Some(grams)) =
            (find(&|h| h == "date"), find(&|h| h == "heures"), co2)
        {
            return Format::Eco2mixRte { date, hours, grams };
        }
        Format::TwoColumns
    }

    /// Whether rows may lack a value: éCO2mix leaves some quarter hours empty, or `ND` (not
    /// available), `-` (none) or `DC` (confidential).
    fn has_gaps(self) -> bool {
        matches!(self, Format::Eco2mix { .. } | Format::Eco2mixRte { .. })
    }
}

/// A file's text: UTF-8 when its bytes are, else ISO-8859-1 (Latin-1), where each byte is
/// the code point of the same number: RTE's `.xls` is Latin-1. Windows-1252 differs only
/// in 0x80-0x9F, which would come out as control characters; they can only be in names
/// and notes, never in the dates, hours and figures read here.
fn decode(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => Cow::Owned(bytes.iter().copied().map(char::from).collect()),
    }
}

/// The delimiter the header line uses most: `,`, `;` (ODRE) or a tab (RTE's `.xls`); `,`
/// on a tie.
fn delimiter(header: &str) -> u8 {
    [b'\t', b';', b',']
        .into_iter()
        .max_by_key(|d| header.bytes().filter(|b| b == d).count())
        .unwrap_or(b',')
}

/// Whether a row is the notice RTE closes its downloads with, in the first column ("RTE ne
/// pourra être tenu responsable ..."; "L'ensemble des informations disponibles sur
/// éCO2mix ..." in its Tempo calendars).
fn is_rte_notice(record: &csv::StringRecord) -> bool {
    record.get(0).is_some_and(|first| {
        first.starts_with("RTE ne pourra") || first.starts_with("L'ensemble des informations")
    })
}

/// A row's time as written (RTE's `.xls` splits it in `Date` and `Heures`) and its
/// intensity field.
fn time_and_value(
    format: Format,
    record: &csv::StringRecord,
    fields: usize,
) -> Result<(Cow<'_, str>, &str), String> {
    let short = || format!("fewer fields than the header's {fields}");
    match format {
        Format::TwoColumns => match (record.get(0), record.get(1), record.len()) {
            (Some(t), Some(v), 2) => Ok((t.into(), v)),
            _ => Err("expected two fields: time,g_co2e_per_kwh".into()),
        },
        Format::ElectricityMaps { time, grams } | Format::Eco2mix { time, grams } => {
            match (record.get(time), record.get(grams)) {
                (Some(t), Some(v)) => Ok((t.into(), v)),
                _ => Err(short()),
            }
        }
        Format::Eco2mixRte { date, hours, grams } => {
            match (record.get(date), record.get(hours), record.get(grams)) {
                (Some(d), Some(h), Some(v)) => Ok((format!("{d} {h}").into(), v)),
                _ => Err(short()),
            }
        }
    }
}

/// A gCO2e/kWh figure.
fn grams(value: &str) -> Result<f64, String> {
    value
        .parse()
        .ok()
        .filter(|g: &f64| is_figure(*g))
        .ok_or_else(|| format!("{value:?} is not a gCO2e/kWh figure >= 0 and <= 1e9"))
}

/// A row read: its time as written, its start (unix seconds) and gCO2e/kWh.
type Row = (String, i64, f64);

/// One row; `None` for a row that holds no intensity: an éCO2mix gap, RTE's closing notice,
/// the spring hour Paris skips (whose figures RTE copies from another hour).
fn read_row(
    format: Format,
    record: &csv::StringRecord,
    fields: usize,
    paris: &mut ParisClock,
) -> Result<Option<Row>, String> {
    if matches!(format, Format::Eco2mixRte { .. }) && is_rte_notice(record) {
        return Ok(None);
    }
    let (time, value) = time_and_value(format, record, fields)?;
    if format.has_gaps() && matches!(value, "" | "ND" | "-" | "DC") {
        return Ok(None);
    }
    let bad_time = || format!("{time:?} is not a time this format has");
    let start = match format {
        Format::ElectricityMaps { .. } => NaiveDateTime::parse_from_str(&time, "%Y-%m-%d %H:%M:%S")
            .ok()
            .map(|t| t.and_utc().timestamp()),
        Format::Eco2mixRte { .. } => {
            let wall = NaiveDateTime::parse_from_str(&time, "%Y-%m-%d %H:%M")
                .ok()
                .and_then(paris_wall)
                .ok_or_else(bad_time)?;
            match paris.utc(wall) {
                Some(t) => Some(t),
                None => return Ok(None),
            }
        }
        Format::TwoColumns | Format::Eco2mix { .. } => parse_time(&time),
    }
    .ok_or_else(bad_time)?;
    Ok(Some((time.into_owned(), start, grams(value)?)))
}

/// Where a Paris wall-clock time falls in UTC.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wall {
    Once(NaiveDateTime),
    /// The autumn hour the clocks go back over: in summer time, then again in winter time.
    Twice {
        cest: NaiveDateTime,
        cet: NaiveDateTime,
    },
    /// The spring hour the clocks skip.
    Never,
}

/// `local` (Paris wall-clock time) in UTC, by the IANA time zone database's Europe/Paris
/// (chrono-tz): its history too (before 1996 summer time ended in September). chrono-tz
/// lists the clock changes up to 2099 and takes later times as winter time. `None` past
/// chrono's dates.
fn paris_wall(local: NaiveDateTime) -> Option<Wall> {
    let utc = |offset: <Tz as TimeZone>::Offset| local.checked_sub_offset(offset.fix());
    Some(match Paris.offset_from_local_datetime(&local) {
        MappedLocalTime::Single(offset) => Wall::Once(utc(offset)?),
        // chrono-tz gives the earlier offset, summer time's, first
        MappedLocalTime::Ambiguous(summer, winter) => Wall::Twice {
            cest: utc(summer)?,
            cet: utc(winter)?,
        },
        MappedLocalTime::None => Wall::Never,
    })
}

/// Paris wall-clock times to UTC, in file order. RTE's files list the autumn hour once; it
/// is taken as the summer-time one, which comes first (so 01:00-02:00 UTC that night has no
/// value); a file that lists it twice gets the second listing in winter time.
#[derive(Debug, Default)]
struct ParisClock {
    /// The autumn wall-clock times already listed, by their summer-time instant.
    twice: BTreeSet<NaiveDateTime>,
}

impl ParisClock {
    /// Unix seconds; `None` in the spring hour Paris skips.
    fn utc(&mut self, wall: Wall) -> Option<i64> {
        let utc = match wall {
            Wall::Once(utc) => utc,
            Wall::Twice { cest, cet } => {
                if self.twice.insert(cest) {
                    cest
                } else {
                    cet
                }
            }
            Wall::Never => return None,
        };
        Some(utc.and_utc().timestamp())
    }
}

impl Intensities {
    /// Reads a series in any of the [`Format`]s from a file's contents: text, or its bytes
    /// as read, UTF-8 or Latin-1 (see [`decode`]); an error names the line.
    pub fn parse(path: &Path, contents: impl AsRef<[u8]>) -> Result<Intensities, TariffError> {
        let err = |line: u64, message: String| TariffError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        };
        let text = decode(contents.as_ref());
        // csv ends a record at its '\r' but counts lines by '\n', so with CRLF endings an error
        // would name the line before the row's
        let text = if text.contains('\r') {
            Cow::Owned(text.replace("\r\n", "\n"))
        } else {
            text
        };
        let text = text.trim_start_matches('\u{feff}');
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .delimiter(delimiter(text.lines().next().unwrap_or_default()))
            .flexible(true)
            .from_reader(text.as_bytes());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| err(1, e.to_string()))?
            .iter()
            .map(str::to_string)
            .collect();
        let format = Format::of(&header.iter().map(String::as_str).collect::<Vec<_>>());
        let mut from = BTreeMap::new();
        let mut paris = ParisClock::default();
        for record in reader.records() {
            let record = record
                .map_err(|e| err(e.position().map(|p| p.line()).unwrap_or(0), e.to_string()))?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let Some((time, start, grams)) =
                read_row(format, &record, header.len(), &mut paris).map_err(|m| err(line, m))?
            else {
                continue;
            };
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

    /// The times within `(start, end)` (unix seconds) where a value begins or ends.
    pub fn bounds(&self, start: f64, end: f64) -> Vec<f64> {
        let (first, last) = (
            (start.floor() as i64).saturating_sub(self.step),
            end.ceil() as i64,
        );
        self.from
            .range(first..=last)
            .flat_map(|(t, _)| [*t, t + self.step])
            .map(|b| b as f64)
            .filter(|b| start < *b && *b < end)
            .collect()
    }

    /// Every value of the series.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.from.values().copied()
    }

    /// The intensity at `t` (unix seconds).
    pub fn at(&self, t: f64) -> Option<f64> {
        let (from, grams) = self.from.range(..=t.floor() as i64).next_back()?;
        (t < (from + self.step) as f64).then_some(*grams)
    }
}

/// Unix seconds, or an RFC 3339 time (`2025-03-01T13:00:00Z`); seconds only within the
/// dates chrono knows (±262 000 years), so that differences and sums of times never
/// overflow (`-9223372036854775808` made a series' pieces panic).
pub fn parse_time(text: &str) -> Option<i64> {
    let seconds = text
        .parse::<i64>()
        .ok()
        .filter(|&t| chrono::DateTime::from_timestamp(t, 0).is_some());
    seconds.or_else(|| {
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp())
    })
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests;
