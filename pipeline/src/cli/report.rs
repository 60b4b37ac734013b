//! `deltarl report`: forwards to the `deltarl-report` binary, which computes the
//! per-iteration table with polars lazy scans and writes CSV + PNG. It is a separate binary
//! so that `make iterate` never has to build polars (~20 minutes on 2 cores).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run names (repeat for several; they share the plots, one colour each).
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// Output folder for report.csv and report.png (default: runs/<first run>).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `deltarl-report` next to this executable (symlinks resolved), or on PATH.
pub fn report_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let sibling = exe.with_file_name("deltarl-report");
    if sibling.is_file() {
        return Some(sibling);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("deltarl-report"))
            .find(|c| c.is_file())
    })
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let Some(bin) = report_binary() else {
            bail!("{}", missing_tool(&self.runs, runs));
        };
        forward(&bin, runs, &self.runs, self.out.as_deref(), false)
    }
}

/// What to do when the report tool is not built: why it is separate, what building it
/// costs, and the command that builds it and then reports exactly these runs.
///
/// It is not built on first use: a command that silently starts a 20-minute compile is a
/// surprise, and an installed `deltarl` (the wheel) has no sources to build from; the
/// wheel carries the tool instead.
pub fn missing_tool(names: &[String], runs: &Path) -> String {
    let runs_dir = match runs.to_str() {
        Some("runs") => String::new(),
        _ => format!(" RUNS_DIR={}", runs.display()),
    };
    format!(
        "`deltarl report` runs the polars-based `deltarl-report` tool, which this build does \
         not have: polars takes about 20 minutes to compile on 2 cores, so `make iterate` \
         leaves it out. In the source checkout, `make report RUNS=\"{}\"{runs_dir}` builds it \
         once (`make report-tool` builds it alone) and then writes this report; the wheel \
         (`make wheel`) ships it ready-built.",
        names.join(" ")
    )
}

/// Runs the report tool `bin` on `names`; `quiet` drops the printed table (files are still
/// written).
pub fn forward(
    bin: &Path,
    runs: &Path,
    names: &[String],
    out: Option<&Path>,
    quiet: bool,
) -> Result<()> {
    let mut cmd = Command::new(bin);
    cmd.arg("--runs-dir").arg(runs);
    for r in names {
        cmd.arg("--run").arg(r);
    }
    if let Some(out) = out {
        cmd.arg("--out").arg(out);
    }
    if quiet {
        cmd.stdout(std::process::Stdio::null());
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", bin.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_tool_hint_names_every_run_and_the_runs_folder() {
        let hint = missing_tool(&["a".into(), "b".into()], Path::new("/data/runs"));
        assert!(
            hint.contains("make report RUNS=\"a b\" RUNS_DIR=/data/runs"),
            "{hint}"
        );
        assert!(hint.contains("20 minutes"), "{hint}");
        // The default folder needs no RUNS_DIR.
        let hint = missing_tool(&["a".into()], Path::new("runs"));
        assert!(hint.contains("make report RUNS=\"a\"` builds"), "{hint}");
    }
}
