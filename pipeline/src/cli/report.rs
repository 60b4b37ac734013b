//! `deltarl report`: the per-iteration table of one or more runs, from the stage
//! manifests (which hold each stage's metrics), printed and written as CSV.

use std::path::Path;

use anyhow::{Context, Result};
use deltarl_schemas::Manifest;

use crate::rundir::RunDir;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run names (repeat for several).
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// CSV output (default: runs/<first run>/report.csv).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// The columns of the report, in order.
pub const COLUMNS: [&str; 13] = [
    "run",
    "iter",
    "reward_mean",
    "accuracy",
    "response_len",
    "truncated",
    "clip_frac",
    "kl",
    "entropy",
    "cos_before",
    "cos_after",
    "coeff_spread",
    "eval_accuracy",
];

fn get(m: &Option<Manifest>, path: &[&str]) -> String {
    let Some(m) = m else { return String::new() };
    let mut v = &m.summary;
    for k in path {
        v = &v[*k];
    }
    v.as_f64().map(|x| format!("{x:.4}")).unwrap_or_default()
}

/// One row per iteration of a run.
pub fn rows(runs: &Path, name: &str) -> Result<Vec<Vec<String>>> {
    let run = RunDir::new(runs, name)?;
    let mut out = Vec::new();
    for it in run.iterations() {
        let m = |s: &str| Manifest::read(&run.manifest_path(it, s)).ok().flatten();
        let (ro, sc, fe, co, up, ev) = (
            m("rollout"),
            m("score"),
            m("features"),
            m("coeffs"),
            m("update"),
            m("eval"),
        );
        let spread = co.as_ref().map_or(String::new(), |c| {
            let q = |side: &str, k: &str| {
                c.summary[format!("coeff_{side}")][k]
                    .as_f64()
                    .unwrap_or(f64::NAN)
            };
            let s = (q("pos", "p90") - q("pos", "p10")).max(q("neg", "p90") - q("neg", "p10"));
            if s.is_finite() {
                format!("{s:.4}")
            } else {
                String::new()
            }
        });
        out.push(vec![
            name.to_string(),
            it.to_string(),
            get(&sc, &["reward_mean"]),
            get(&sc, &["accuracy"]),
            get(&ro, &["mean_response_len"]),
            get(&ro, &["truncated_frac"]),
            get(&up, &["clip_frac"]),
            get(&up, &["kl"]),
            get(&fe, &["entropy_mean"]),
            get(&co, &["cos_before"]),
            get(&co, &["cos_after"]),
            spread,
            get(&ev, &["accuracy"]),
        ]);
    }
    Ok(out)
}

pub fn write_csv(path: &Path, table: &[Vec<String>]) -> Result<()> {
    let mut text = COLUMNS.join(",") + "\n";
    for r in table {
        text += &(r.join(",") + "\n");
    }
    deltarl_schemas::atomic_write_bytes(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let mut table = Vec::new();
        for name in &self.runs {
            table.extend(rows(runs, name)?);
        }
        let widths: Vec<usize> = (0..COLUMNS.len())
            .map(|c| {
                table
                    .iter()
                    .map(|r| r[c].len())
                    .chain([COLUMNS[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        println!("{}", line(COLUMNS.to_vec()));
        for r in &table {
            println!("{}", line(r.iter().map(String::as_str).collect()));
        }
        let out = self
            .out
            .unwrap_or_else(|| runs.join(&self.runs[0]).join("report.csv"));
        write_csv(&out, &table)?;
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}
