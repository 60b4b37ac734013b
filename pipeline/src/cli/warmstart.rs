use std::path::{Path, PathBuf};

use anyhow::Result;
use deltarl_schemas::Stage;

use crate::context::Ctx;
use crate::rundir::RunLock;
use crate::runner::{summary_line, Runner};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Run name.
    #[arg(long, default_value = "tiny-arith")]
    run: String,
    /// Redo the warm start even if the run's base is complete.
    #[arg(long)]
    force: bool,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let ctx = Ctx::open(&self.config, runs, &self.run)?;
        let lock = RunLock::acquire(&ctx.run)?;
        ctx.adopt_config(&lock, false)?;
        let outcome = Runner::new(&ctx).run_stage(0, Stage::Warmstart, self.force)?;
        eprintln!("{}", summary_line(Stage::Warmstart, &outcome));
        Ok(())
    }
}
