use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::context::Ctx;
use crate::rundir::RunLock;
use crate::runner::{Runner, Until};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Run name (a folder under the runs directory).
    #[arg(long, default_value = "tiny-arith")]
    run: String,
    /// Iterations to run.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["until", "epochs"])]
    iters: u32,
    /// Instead of --iters: run until iteration N is complete (a no-op when it is).
    #[arg(long, conflicts_with = "epochs")]
    until: Option<u32>,
    /// Instead of --iters: run until N epochs over the training prompts are complete (an
    /// epoch is `training prompts / rollout.prompts_per_iter` iterations, the remainder
    /// dropped; `status` shows each iteration's epoch).
    #[arg(long)]
    epochs: Option<u32>,
    /// Continue a run made with another configuration (changed stages rerun).
    #[arg(long)]
    force: bool,
    /// Change one configuration key (repeatable), checked like the file and recorded in
    /// the run's run.toml.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// Re-read every file to check its hash before trusting a finished stage, instead of
    /// the hash cache's size and modification-time stamps.
    #[arg(long)]
    verify: bool,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let mut ctx = Ctx::open_with(&self.config, runs, &self.run, &self.sets)?;
        if self.verify {
            ctx.run.verify_every_file();
        }
        ctx.join_ranks()?;
        let until = match (self.until, self.epochs) {
            (Some(n), _) => Until::Iteration(n),
            (None, Some(epochs)) => {
                let o = &ctx.cfg.opts;
                let n = crate::data::load_prompts(
                    &o.data.source,
                    o.data.train_size,
                    &crate::rewards::Routing::of(&o.data),
                )?
                .len();
                let per_epoch = crate::epochs::batches_per_epoch(n, o.rollout.prompts_per_iter);
                Until::Iteration(epochs.saturating_mul(per_epoch))
            }
            (None, None) => Until::Count(self.iters),
        };
        // Under torchrun only rank 0 takes the lock and records the configuration.
        Runner::new(&ctx).lead_or_follow(|runner| {
            let lock = RunLock::acquire(&ctx.run)?;
            ctx.adopt_config(&lock, self.force)?;
            runner.iterate(&lock, until)
        })
    }
}
