//! `deltarl-report`: the per-iteration table of one or more runs, computed with polars lazy
//! scans over the run directories, printed, written as CSV and drawn as PNG learning
//! curves.
//!
//! This is the only crate that links polars (a cold build takes ~20 minutes on 2 cores), so
//! it is its own binary: `deltarl report` forwards to it, and `make iterate` never builds
//! it.

mod breakdown;
mod error;
mod figure;
mod metric;
mod table;

use std::path::Path;

use polars::prelude::*;

pub use breakdown::{breakdown_table, informative, BREAKDOWN_COLUMNS};
pub use error::{ReportError, Result};
pub use figure::figure;
pub use metric::{Metric, COLUMNS};
pub use table::{iteration_table, value};

/// The table as fixed-width text (the way it is printed).
pub fn to_text(df: &DataFrame) -> String {
    let cell = |c: &str, r: usize| -> String {
        match c {
            "run" => df
                .column("run")
                .ok()
                .and_then(|s| s.str().ok().and_then(|s| s.get(r).map(str::to_string)))
                .unwrap_or_default(),
            "iter" => value(df, c, r).map_or(String::new(), |v| format!("{v:.0}")),
            _ => value(df, c, r).map_or("-".into(), |v| format!("{v:.4}")),
        }
    };
    let rows: Vec<Vec<String>> = (0..df.height())
        .map(|r| COLUMNS.iter().map(|c| cell(c, r)).collect())
        .collect();
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([COLUMNS[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(&COLUMNS) + "\n";
    for r in &rows {
        out += &(line(&r.iter().map(String::as_str).collect::<Vec<_>>()) + "\n");
    }
    out
}

/// The per-source breakdown as fixed-width text.
pub fn breakdown_text(df: &DataFrame) -> String {
    breakdown::to_text(df)
}

/// The table as CSV bytes (polars' writer; empty cells for nulls).
pub fn to_csv(df: &mut DataFrame) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf)
        .include_header(true)
        .finish(df)
        .map_err(|e| ReportError::Polars {
            file: "report.csv".into(),
            message: e.to_string(),
        })?;
    Ok(buf)
}

/// Computes the table of `runs`, writes `report.csv`, `report.png` and
/// `report_breakdown.csv` (accuracy by benchmark and data_source) into `out` (each
/// atomically) and returns the table and the breakdown.
pub fn write_report(
    runs_dir: &Path,
    runs: &[String],
    out: &Path,
) -> Result<(DataFrame, DataFrame)> {
    let mut df = iteration_table(runs_dir, runs)?;
    let mut by = breakdown_table(runs_dir, runs)?;
    std::fs::create_dir_all(out).map_err(|source| deltarl_schemas::Error::Io {
        file: out.display().to_string(),
        source,
    })?;
    deltarl_schemas::atomic_write_bytes(&out.join("report.csv"), &to_csv(&mut df)?)?;
    deltarl_schemas::atomic_write_bytes(&out.join("report_breakdown.csv"), &to_csv(&mut by)?)?;
    let png = deltarl_plot::render_png(&figure(&df, runs))?;
    deltarl_schemas::atomic_write_bytes(&out.join("report.png"), &png)?;
    Ok((df, by))
}
