//! `deltarl-report` (also reached as `deltarl report`): prints the per-iteration table of
//! one or more runs and writes `report.csv`, `report_breakdown.csv` and `report.png`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

/// Per-iteration table of one or more runs (polars lazy scans), printed and written as CSV
/// and PNG learning curves.
#[derive(Debug, Parser)]
#[command(name = "deltarl-report", version, about)]
struct Args {
    /// Folder holding the runs.
    #[arg(long, default_value = "runs", env = "DELTARL_RUNS")]
    runs_dir: PathBuf,
    /// Run names (repeat for several; they share the plots, one colour each).
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// Output folder for report.csv and report.png (default: runs/<first run>).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Errors as `deltarl` shows them (this binary is also run under `deltarl report`): the
/// chain on stderr, what failed, then why; never a backtrace, whatever `RUST_BACKTRACE` says.
fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let out = args
        .out
        .unwrap_or_else(|| args.runs_dir.join(&args.runs[0]));
    let (df, by) = deltarl_report::write_report(&args.runs_dir, &args.runs, &out)
        .with_context(|| format!("report of {}", args.runs.join(", ")))?;
    print!("{}", deltarl_report::to_text(&df));
    // Accuracy by benchmark and data_source, when an iteration has more than one.
    if deltarl_report::informative(&by) {
        println!("\naccuracy by benchmark and data_source:");
        print!("{}", deltarl_report::breakdown_text(&by));
    }
    eprintln!(
        "wrote {0}/report.csv, {0}/report_breakdown.csv and {0}/report.png",
        out.display()
    );
    Ok(())
}
