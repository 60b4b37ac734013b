use std::path::Path;

use anyhow::{bail, Result};
use deltarl_schemas::Stage;

use crate::context::Ctx;
use crate::rundir::RunLock;
use crate::runner::{summary_line, Runner};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stage.
    #[arg(value_enum)]
    name: Stage,
    /// Run name.
    #[arg(long)]
    run: String,
    /// Iteration (1-based; not used by warmstart).
    #[arg(long)]
    iter: Option<u32>,
    /// Rerun even if complete; marks the later stages of the iteration stale.
    #[arg(long)]
    force: bool,
    /// Change one key of the run's configuration (repeatable): recorded in run.toml, and
    /// the stages it changes go stale.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let recorded = Ctx::open_existing(runs, &self.run)?;
        // With --set: the recorded configuration with the changes asked for, adopted
        // explicitly (under the lock).
        let mut ctx = if self.sets.is_empty() {
            recorded
        } else {
            Ctx::open_with(
                &recorded.run.root.join("run.toml"),
                runs,
                &self.run,
                &self.sets,
            )?
        };
        ctx.join_ranks()?;
        // Under torchrun only rank 0 takes the lock and decides; the others follow.
        Runner::new(&ctx).lead_or_follow(|runner| {
            let lock = RunLock::acquire(&ctx.run)?;
            if !self.sets.is_empty() {
                ctx.adopt_config(&lock, true)?;
            }
            let iter = match (self.name, self.iter) {
                (Stage::Warmstart, _) => 0,
                (_, Some(i)) => {
                    runner.ensure_base()?;
                    i
                }
                (s, None) => bail!("stage {s} needs --iter N"),
            };
            let outcome = runner.run_stage(iter, self.name, self.force)?;
            eprintln!("{}", summary_line(self.name, &outcome));
            Ok(())
        })
    }
}
