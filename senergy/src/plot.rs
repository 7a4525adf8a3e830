//! `senergy job J --plot FILE`: the job's power over time on each node, from Prometheus's
//! samples of its energy counter, its steps marked; without them, its steps' and nodes'
//! energy as bars, from accounting. SVG, or PNG for a file ending in `.png`.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::prometheus::NodeSamples;
use crate::record::JobRow;
use crate::report::JobReport;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("--plot {path}: expected a file ending in .svg or .png")]
    Kind { path: PathBuf },
    #[error(
        "--plot {path}: drawing needs a TrueType font: install fonts-dejavu-core (or set \
         SENERGY_FONT to a .ttf file)"
    )]
    NoFont { path: PathBuf },
    #[error("--plot {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Svg,
    Png,
}

const SIZE: (u32, u32) = (1200, 700);
const FONT: &str = "sans-serif";
/// Where distributions keep a sans-serif TrueType font.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Whether `path` names a kind of file senergy draws, before accounting is asked.
pub fn check(path: &Path) -> Result<(), PlotError> {
    kind(path).map(|_| ())
}

fn kind(path: &Path) -> Result<Kind, PlotError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(Kind::Svg),
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(Kind::Png),
        _ => Err(PlotError::Kind { path: path.into() }),
    }
}

/// Gives plotters a font to measure and draw text with, once (it keeps it for the
/// process's life): `SENERGY_FONT`, else the first of [`FONTS`] that exists.
fn register_font(path: &Path) -> Result<(), PlotError> {
    let candidates = std::env::var_os("SENERGY_FONT")
        .map(PathBuf::from)
        .into_iter()
        .chain(FONTS.iter().map(PathBuf::from));
    for font in candidates {
        if let Ok(bytes) = std::fs::read(&font) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    Err(PlotError::NoFont { path: path.into() })
}

/// Draws with `draw` (a closure of a drawing area, expanded once per backend) on the
/// backend `path` asks for.
macro_rules! render {
    ($path:expr, $draw:expr) => {{
        let path: &Path = $path;
        let kind = kind(path)?;
        register_font(path)?;
        let drawn = match kind {
            Kind::Svg => ($draw)(SVGBackend::new(path, SIZE).into_drawing_area()),
            Kind::Png => ($draw)(BitMapBackend::new(path, SIZE).into_drawing_area()),
        };
        drawn.map_err(|message| PlotError::Draw {
            path: path.into(),
            message,
        })
    }};
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One line of the power plot: its name and `(seconds since the job began, watts)`.
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A step's run in seconds since the job began.
struct Band {
    name: String,
    from: f64,
    to: f64,
}

/// The job's power per node over time (`series`, from Prometheus), its steps marked.
pub fn power(
    path: &Path,
    report: &JobReport,
    row: &JobRow,
    series: &[NodeSamples],
    now: i64,
) -> Result<(), PlotError> {
    let t0 = row.start as f64;
    let sources: std::collections::BTreeSet<&str> =
        series.iter().map(|s| s.source.as_str()).collect();
    let lines: Vec<Line> = series
        .iter()
        .map(|s| Line {
            name: if sources.len() > 1 {
                format!("{} ({})", s.node, s.source)
            } else {
                s.node.clone()
            },
            points: s.power().into_iter().map(|(t, w)| (t - t0, w)).collect(),
        })
        .collect();
    let end = if row.end > 0 { row.end } else { now } as f64 - t0;
    let bands: Vec<Band> = row
        .steps
        .iter()
        .zip(&report.steps)
        .filter(|(s, _)| s.start > 0)
        .map(|(s, r)| Band {
            name: format!("{}.{}", report.id, r.step),
            from: s.start as f64 - t0,
            to: if s.end > 0 { s.end as f64 } else { now as f64 } - t0,
        })
        .collect();
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max)
        * 1.15;
    let title = format!(
        "job {} ({}): power per node, from Prometheus",
        report.id, report.name
    );
    render!(path, |area: DrawingArea<_, _>| -> Result<(), String> {
        area.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&area)
            .caption(&title, (FONT, 24))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end.max(1.0), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the job began")
            .y_desc("watts")
            .label_style((FONT, 14))
            .draw()
            .map_err(err)?;
        // the steps: a shaded band each, named at its top
        for (k, b) in bands.iter().enumerate() {
            let shade = Palette99::pick(k + 10).mix(0.12);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(b.from, 0.0), (b.to, top)],
                    shade.filled(),
                )))
                .map_err(err)?;
            let y = top * (0.97 - 0.05 * (k % 6) as f64);
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("step {}", b.name),
                    (b.from, y),
                    (FONT, 14),
                )))
                .map_err(err)?;
        }
        for (k, line) in lines.iter().enumerate() {
            let color = Palette99::pick(k);
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(err)?
                .label(&line.name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        area.present().map_err(err)
    })
}

/// The job's steps' energy and its nodes' (where accounting names them), as bars.
pub fn energy_bars(path: &Path, report: &JobReport) -> Result<(), PlotError> {
    let mut bars: Vec<(String, f64)> = report
        .steps
        .iter()
        .filter_map(|s| Some((format!("step {}", s.step), s.energy_j? as f64)))
        .collect();
    for s in &report.steps {
        for n in &s.node_energy {
            if let Some(j) = n.energy_j {
                bars.push((format!("{} on {}", s.step, n.name), j as f64));
            }
        }
    }
    let top = bars.iter().map(|b| b.1).fold(1.0_f64, f64::max) * 1.15;
    let title = format!(
        "job {} ({}): energy per step and node, from accounting",
        report.id, report.name
    );
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    render!(path, |area: DrawingArea<_, _>| -> Result<(), String> {
        area.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&area)
            .caption(&title, (FONT, 24))
            .margin(15)
            .x_label_area_size(60)
            .y_label_area_size(80)
            // segments 0..=n-1: one per bar (a segmented range holds its end too)
            .build_cartesian_2d((0..bars.len().max(1) - 1).into_segmented(), 0.0..top)
            .map_err(err)?;
        // each name under the middle of its bar
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc("joules")
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for (i, (_, joules)) in bars.iter().enumerate() {
            let color = Palette99::pick(i);
            chart
                .draw_series(std::iter::once({
                    let mut bar = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), 0.0),
                            (SegmentValue::Exact(i + 1), *joules),
                        ],
                        color.filled(),
                    );
                    bar.set_margin(0, 0, 4, 4);
                    bar
                }))
                .map_err(err)?;
        }
        area.present().map_err(err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BATCH_STEP, StepRow};
    use crate::report::job_report;
    use crate::site::Tariff;

    fn job() -> JobRow {
        let step = |step_id: u32, start: i64, end: i64, joules: u64| StepRow {
            step_id,
            nodes: "n[1-3]".into(),
            nnodes: 3,
            state: 3,
            start,
            end,
            elapsed_s: (end - start) as u64,
            consumed_energy: joules,
            ..StepRow::default()
        };
        JobRow {
            job_id: 42,
            name: "sim".into(),
            state: 3,
            start: 1000,
            end: 1060,
            elapsed_s: 60,
            alloc_nodes: 3,
            nodes: "n[1-3]".into(),
            tres_alloc: "1=3,3=36000".into(),
            steps: vec![
                step(BATCH_STEP, 1000, 1060, 36000),
                step(0, 1010, 1050, 30000),
            ],
            ..JobRow::default()
        }
    }

    fn series() -> Vec<NodeSamples> {
        (1..=3)
            .map(|n| NodeSamples {
                node: format!("n{n}"),
                source: "rust_rapl".into(),
                points: (0..=30)
                    .map(|k| (1000.0 + 2.0 * f64::from(k), 200.0 * f64::from(n * k)))
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn the_power_plot_names_every_node_and_step() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let row = job();
        let report = job_report(&row, &Tariff::default(), 2000, None);
        let svg = tmp.path().join("job.svg");
        power(&svg, &report, &row, &series(), 2000).expect("drawn");
        let text = std::fs::read_to_string(&svg).expect("svg");
        for want in ["n1", "n2", "n3", "step 42.batch", "step 42.0", "watts"] {
            assert!(text.contains(want), "no {want:?} in the SVG");
        }
        let png = std::env::var_os("SENERGY_PLOT_SAMPLE")
            .map_or_else(|| tmp.path().join("job.png"), PathBuf::from);
        power(&png, &report, &row, &series(), 2000).expect("drawn");
        let bytes = std::fs::read(&png).expect("png");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    }

    #[test]
    fn without_prometheus_the_steps_energy_is_drawn_as_bars() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let report = job_report(&job(), &Tariff::default(), 2000, None);
        let svg = tmp.path().join("bars.svg");
        energy_bars(&svg, &report).expect("drawn");
        let text = std::fs::read_to_string(&svg).expect("svg");
        for want in ["step batch", "step 0", "joules", "from accounting"] {
            assert!(text.contains(want), "no {want:?} in the SVG");
        }
        assert!(matches!(
            check(Path::new("job.pdf")),
            Err(PlotError::Kind { .. })
        ));
    }
}
