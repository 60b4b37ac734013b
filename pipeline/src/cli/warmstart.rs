use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::run::Ctx;
use crate::rundir::RunLock;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Run name.
    #[arg(long, default_value = "tiny-arith")]
    run: String,
    /// Redo the warm start even if the run has a base policy.
    #[arg(long)]
    force: bool,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let ctx = Ctx::open(&self.config, runs, &self.run, false)?;
        let _lock = RunLock::acquire(&ctx.run)?;
        if self.force {
            crate::warmstart::warmstart(&ctx)
        } else {
            crate::warmstart::ensure_base(&ctx)
        }
    }
}
