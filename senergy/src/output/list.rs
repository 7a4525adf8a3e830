//! `senergy` with no subcommand: a line per job, as sacct lists them, its columns those of
//! `senergy job --csv`'s job lines ([`COLUMNS`]) that `--format` picks: the table, the CSV
//! and the JSON show the same cells, and a column CSV has is one `--format` takes. Written
//! a page of accounting at a time ([`ListWriter`]): a year of jobs is never in memory at
//! once.

use super::columns::{COLUMNS, Column, Line, Shown, column};
use super::{duration, factors_text, local_time, shown};
use crate::report::JobReport;
use crate::site::Tariff;

/// The columns without `--format`.
pub const DEFAULT_FORMAT: &[&str] = &[
    "id",
    "name",
    "user",
    "state",
    "start",
    "elapsed_s",
    "nodes",
    "energy_j",
    "avg_watts",
    "emissions_g",
    "cost",
    "kept",
];

/// Every column `--format` takes: `senergy job --csv`'s job line's, in its order.
pub fn columns() -> Vec<String> {
    COLUMNS.iter().map(|c| c.name.to_string()).collect()
}

/// The columns `format` names, in its order (`--format` refuses a name that is none).
fn picked(format: &[String]) -> Vec<&'static Column> {
    format.iter().filter_map(|name| column(name)).collect()
}

/// The picked columns' cells of each of `jobs`, as `senergy job --csv` writes them: what
/// the list keeps of a page of accounting (the jobs' reports go with the page).
pub fn list_cells(jobs: &[JobReport], tariff: &Tariff, format: &[String]) -> Vec<Vec<String>> {
    let factors = factors_text(tariff);
    let picked = picked(format);
    jobs.iter()
        .map(|job| {
            let line = Line {
                job,
                step: None,
                currency: &tariff.currency,
                factors: &factors,
            };
            picked
                .iter()
                .map(|c| (c.cell)(&line).into_string())
                .collect()
        })
        .collect()
}

/// A cell as the table shows it: times as local dates and durations as sacct writes them,
/// text with its control characters escaped.
fn shown_cell(column: &Column, cell: &str) -> String {
    match (column.shown, cell.parse::<i64>()) {
        (Shown::Time, Ok(unix)) => local_time(unix),
        (Shown::Duration, Ok(secs)) => duration(secs.unsigned_abs()),
        _ => shown(cell).into_owned(),
    }
}

/// The list as it is written, a page of jobs at a time: the table, the CSV or the JSON
/// of the same cells.
pub struct ListWriter {
    output: super::Output,
    columns: Vec<&'static Column>,
    jobs: usize,
}

impl ListWriter {
    pub fn new(output: super::Output, format: &[String]) -> Self {
        ListWriter {
            output,
            columns: picked(format),
            jobs: 0,
        }
    }

    /// What comes before the jobs: the header, or the JSON's opening.
    pub fn begin(&self) -> String {
        use super::Output;
        let names = self.columns.iter().map(|c| c.name);
        match self.output {
            Output::Csv => csv_line(names),
            Output::Json => {
                let names: Vec<&str> = names.collect();
                let columns = serde_json::to_string(&names).unwrap_or_default();
                format!("{{\"schema_version\":1,\"columns\":{columns},\"jobs\":[")
            }
            Output::Table | Output::Summary => {
                let headings: Vec<&str> = self.columns.iter().map(|c| c.heading).collect();
                self.table_line(&headings)
            }
        }
    }

    /// A page of jobs' cells.
    pub fn page(&mut self, cells: &[Vec<String>]) -> String {
        use super::Output;
        let mut t = String::new();
        for row in cells {
            match self.output {
                Output::Csv => t += &csv_line(row),
                Output::Json => {
                    if self.jobs > 0 {
                        t.push(',');
                    }
                    t += &json_job(&self.columns, row).to_string();
                }
                Output::Table | Output::Summary => {
                    let shown: Vec<String> = self
                        .columns
                        .iter()
                        .zip(row)
                        .map(|(column, cell)| shown_cell(column, cell))
                        .collect();
                    t += &self.table_line(&shown);
                }
            }
            self.jobs += 1;
        }
        t
    }

    /// What comes after the jobs.
    pub fn end(&self) -> String {
        match self.output {
            super::Output::Json => "]}\n".to_string(),
            _ => String::new(),
        }
    }

    fn table_line(&self, cells: &[impl AsRef<str>]) -> String {
        let each: Vec<String> = self
            .columns
            .iter()
            .zip(cells)
            .map(|(column, cell)| format!("{:<w$}", cell.as_ref(), w = column.width))
            .collect();
        format!("{}\n", each.join(" ").trim_end())
    }
}

/// One CSV line of `cells`.
fn csv_line<T: AsRef<[u8]>>(cells: impl IntoIterator<Item = T>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(cells);
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// A job's object of the JSON: each column's cell, the CSV's text, `null` where empty.
fn json_job(columns: &[&Column], row: &[String]) -> serde_json::Value {
    let job: serde_json::Map<String, serde_json::Value> = columns
        .iter()
        .zip(row)
        .map(|(column, cell)| {
            let value = match cell.is_empty() {
                true => serde_json::Value::Null,
                false => serde_json::Value::String(cell.clone()),
            };
            (column.name.to_string(), value)
        })
        .collect();
    serde_json::Value::Object(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Output;
    use crate::output::tests::a_short_and_a_long_step;

    fn format(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// The list written in each form, in two pages.
    fn written(output: Output, format: &[String], cells: &[Vec<String>]) -> String {
        let mut w = ListWriter::new(output, format);
        let (first, second) = cells.split_at(cells.len() / 2);
        w.begin() + &w.page(first) + &w.page(second) + &w.end()
    }

    /// The table, the CSV and the JSON show the same cells of the same columns, the CSV's
    /// cells those of `senergy job --csv`'s job line, whatever the pages.
    #[test]
    fn the_table_the_csv_and_the_json_show_the_job_lines_cells() {
        let job = a_short_and_a_long_step();
        let tariff = Tariff::default();
        let picked = format(&["id", "energy_j", "avg_watts", "kept", "name", "elapsed_s"]);
        let jobs = vec![job.clone(), job.clone(), job.clone()];
        let kept = list_cells(&jobs, &tariff, &picked);
        let full = crate::output::jobs_csv(std::slice::from_ref(&job), &tariff);
        let mut full = csv::Reader::from_reader(full.as_bytes());
        let header = full.headers().expect("a header").clone();
        let line = full
            .records()
            .next()
            .expect("the job's line")
            .expect("a line");
        let csv = written(Output::Csv, &picked, &kept);
        let mut list = csv::Reader::from_reader(csv.as_bytes());
        assert_eq!(
            list.headers().expect("a header").iter().collect::<Vec<_>>(),
            picked
        );
        let lines: Vec<csv::StringRecord> = list.records().map(|r| r.expect("a line")).collect();
        assert_eq!(lines.len(), 3);
        let json: serde_json::Value =
            serde_json::from_str(&written(Output::Json, &picked, &kept)).expect("JSON");
        assert_eq!(json["jobs"].as_array().map(Vec::len), Some(3));
        let table = written(Output::Table, &picked, &kept);
        let rows: Vec<&str> = table.lines().collect();
        let head: Vec<&str> = rows[0].split_whitespace().collect();
        assert_eq!(
            head,
            ["ID", "ENERGY_J", "AVG_WATTS", "KEPT", "NAME", "ELAPSED_S"]
        );
        for (name, cell) in picked.iter().zip(lines[2].iter()) {
            let k = header
                .iter()
                .position(|h| h == name)
                .expect("a job --csv column");
            assert_eq!(cell, &line[k], "{name}");
            let want = match cell.is_empty() {
                true => serde_json::Value::Null,
                false => serde_json::Value::String(cell.to_string()),
            };
            assert_eq!(json["jobs"][2][name], want, "{name}");
            let shown = shown_cell(column(name).expect("a column"), cell);
            assert!(rows[3].contains(shown.as_str()), "{shown} in {}", rows[3]);
        }
        // fixed widths: every line's columns begin where the header's do
        let at = rows[0].find("KEPT").expect("KEPT");
        assert!(
            rows[1..].iter().all(|r| r[at..].starts_with(&lines[0][3])),
            "{table}"
        );
    }

    #[test]
    fn every_default_column_is_a_job_line_column() {
        let all = columns();
        for name in DEFAULT_FORMAT {
            assert!(all.iter().any(|c| c == name), "{name}");
        }
        assert!(all.len() > 40, "{all:?}");
    }

    #[test]
    fn times_show_as_dates_and_durations_and_text_escaped() {
        let shown = |name: &str, cell: &str| shown_cell(column(name).expect(name), cell);
        assert_eq!(shown("elapsed_s", "3725"), "01:02:05");
        assert_eq!(shown("start", "0"), local_time(0));
        assert_eq!(shown("name", "a\x1b[2J"), "a\\x1b[2J");
        assert_eq!(shown("name", "bad\u{1b}[2J"), "bad\\x1b[2J");
        assert_eq!(shown("energy_j", ""), "");
    }
}
