//! `senergy` with no subcommand: a line per job, as sacct lists them, its columns those of
//! `senergy job --csv`'s job lines ([`job_cells`]) that `--format` picks: the
//! table, the CSV and the JSON show the same cells, and a column CSV has is one `--format`
//! takes.

use std::fmt::Write;

use super::csv_lines::job_cells;
use super::{duration, local_time, shown};
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
    job_cells(&[], &Tariff::default()).0
}

/// The picked columns' cells of each of `jobs`, as `senergy job --csv` writes them: what
/// the list keeps of a page of accounting (the jobs' reports go with the page).
pub fn list_cells(jobs: &[JobReport], tariff: &Tariff, format: &[String]) -> Vec<Vec<String>> {
    let (header, rows) = job_cells(jobs, tariff);
    let at: Vec<usize> = format
        .iter()
        .filter_map(|f| header.iter().position(|h| h == f))
        .collect();
    rows.into_iter()
        .map(|row| at.iter().map(|&k| row[k].clone()).collect())
        .collect()
}

/// A cell as the table shows it: times as local dates and durations as sacct writes them,
/// text with its control characters escaped.
fn shown_cell(column: &str, cell: &str) -> String {
    match (column, cell.parse::<i64>()) {
        ("start" | "end", Ok(unix)) => local_time(unix),
        ("elapsed_s", Ok(secs)) => duration(secs.unsigned_abs()),
        _ => shown(cell).into_owned(),
    }
}

/// The table: a header of the columns' names in capitals, a line per job, each column as
/// wide as its widest cell.
pub fn list_table(format: &[String], cells: &[Vec<String>]) -> String {
    let mut lines: Vec<Vec<String>> = vec![format.iter().map(|c| c.to_uppercase()).collect()];
    lines.extend(cells.iter().map(|row| {
        format
            .iter()
            .zip(row)
            .map(|(column, cell)| shown_cell(column, cell))
            .collect()
    }));
    let widths: Vec<usize> = (0..format.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut t = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(t, "{}", cells.join(" ").trim_end());
    }
    t
}

/// The CSV: the picked columns of `senergy job --csv`'s job lines, cell for cell.
pub fn list_csv(format: &[String], cells: &[Vec<String>]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(format);
    for row in cells {
        let _ = w.write_record(row);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The JSON: `{schema_version, columns, jobs: [{column: cell}]}`, each cell the CSV's text
/// (`null` where it is empty).
pub fn list_json(format: &[String], cells: &[Vec<String>]) -> String {
    let jobs: Vec<serde_json::Map<String, serde_json::Value>> = cells
        .iter()
        .map(|row| {
            format
                .iter()
                .zip(row)
                .map(|(column, cell)| {
                    let value = match cell.is_empty() {
                        true => serde_json::Value::Null,
                        false => serde_json::Value::String(cell.clone()),
                    };
                    (column.clone(), value)
                })
                .collect()
        })
        .collect();
    let doc = serde_json::json!({"schema_version": 1, "columns": format, "jobs": jobs});
    format!("{doc}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tests::a_short_and_a_long_step;

    fn format(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// The table and the CSV show the same cells of the same columns, the CSV's cells
    /// those of `senergy job --csv`'s job line.
    #[test]
    fn the_table_and_the_csv_show_the_job_lines_cells() {
        let job = a_short_and_a_long_step();
        let tariff = Tariff::default();
        let picked = format(&["id", "energy_j", "avg_watts", "kept", "name"]);
        let kept = list_cells(std::slice::from_ref(&job), &tariff, &picked);
        let csv = list_csv(&picked, &kept);
        let full = crate::output::jobs_csv(std::slice::from_ref(&job), &tariff);
        let mut full = csv::Reader::from_reader(full.as_bytes());
        let header = full.headers().expect("a header").clone();
        let line = full
            .records()
            .next()
            .expect("the job's line")
            .expect("a line");
        let mut list = csv::Reader::from_reader(csv.as_bytes());
        assert_eq!(
            list.headers().expect("a header").iter().collect::<Vec<_>>(),
            picked
        );
        let cells = list.records().next().expect("a line").expect("a line");
        for (name, cell) in picked.iter().zip(cells.iter()) {
            let k = header
                .iter()
                .position(|h| h == name)
                .expect("a job --csv column");
            assert_eq!(cell, &line[k], "{name}");
        }
        let table = list_table(&picked, &kept);
        let mut rows = table.lines();
        let head: Vec<&str> = rows.next().expect("a header").split_whitespace().collect();
        assert_eq!(head, ["ID", "ENERGY_J", "AVG_WATTS", "KEPT", "NAME"]);
        let row = rows.next().expect("the job");
        for cell in cells.iter().filter(|c| !c.contains(' ')) {
            assert!(row.contains(cell), "{cell} in {row}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&list_json(&picked, &kept)).expect("JSON");
        for (name, cell) in picked.iter().zip(cells.iter()) {
            let want = match cell.is_empty() {
                true => serde_json::Value::Null,
                false => serde_json::Value::String(cell.to_string()),
            };
            assert_eq!(json["jobs"][0][name], want, "{name}");
        }
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
        assert_eq!(shown_cell("elapsed_s", "3725"), "01:02:05");
        assert_eq!(shown_cell("start", "0"), local_time(0));
        assert_eq!(shown_cell("name", "a\x1b[2J"), "a\\x1b[2J");
        assert_eq!(shown_cell("name", "bad\u{1b}[2J"), "bad\\x1b[2J");
        assert_eq!(shown_cell("energy_j", ""), "");
    }
}
