use std::path::Path;

use anyhow::Result;

use crate::run::{summary_line, Ctx};
use crate::rundir::RunLock;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// rollout | score | features | coeffs | update | eval
    name: String,
    /// Run name.
    #[arg(long)]
    run: String,
    /// Iteration (1-based).
    #[arg(long)]
    iter: u32,
    /// Rerun even if complete; marks the later stages of the iteration stale.
    #[arg(long)]
    force: bool,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let ctx = Ctx::open_existing(runs, &self.run)?;
        let _lock = RunLock::acquire(&ctx.run)?;
        crate::warmstart::ensure_base(&ctx)?;
        let outcome = ctx.run_stage(self.iter, &self.name, self.force)?;
        eprintln!("{}", summary_line(&self.name, &outcome));
        Ok(())
    }
}
