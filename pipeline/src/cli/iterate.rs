use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::context::Ctx;
use crate::runner::Runner;
use crate::rundir::RunLock;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Run name (a folder under the runs directory).
    #[arg(long, default_value = "tiny-arith")]
    run: String,
    /// Iterations to run.
    #[arg(long, default_value_t = 1, conflicts_with = "until")]
    iters: u32,
    /// Instead of --iters: run until iteration N is complete (a no-op when it is).
    #[arg(long)]
    until: Option<u32>,
    /// Continue a run made with another configuration (changed stages rerun).
    #[arg(long)]
    force: bool,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let ctx = Ctx::open(&self.config, runs, &self.run)?;
        let lock = RunLock::acquire(&ctx.run)?;
        ctx.adopt_config(&lock, self.force)?;
        let runner = Runner::new(&ctx);
        let iters = match self.until {
            Some(n) => (n + 1).saturating_sub(runner.next_iteration()?),
            None => self.iters,
        };
        runner.iterate(&lock, iters)
    }
}
