//! `deltarl prune`: what `[checkpoint] keep_last`, `save_every` and `keep_features` prune
//! after each iteration, applied now to a run made without them (a real model writes
//! its weights and optimizer state, 1.6 GB for SmolLM2-135M, every iteration). The files go;
//! their hashes stay in the run's `pruned.json`, so `status` and `iterate` still see every
//! iteration done (`crate::prune`).

use std::path::Path;

use anyhow::{bail, Result};
use deltarl_schemas::Stage;

use crate::config::CheckpointOptions;
use crate::context::Ctx;
use crate::rundir::RunLock;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run name.
    #[arg(long)]
    run: String,
    /// Keep the weights and optimizer state of only the last this many complete iterations.
    #[arg(long)]
    keep_last: u32,
    /// And every this-many-th iteration's (0 = none beyond --keep-last).
    #[arg(long, default_value_t = 0)]
    save_every: u32,
    /// Keep the features file of only the last this many iterations (0 = all).
    #[arg(long, default_value_t = 0)]
    keep_features: u32,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        if self.keep_last == 0 {
            bail!("--keep-last 0 would keep every checkpoint: give how many to keep (1 or more)");
        }
        let ctx = Ctx::open_existing(runs, &self.run)?;
        // Not while an iteration is being written.
        let _lock = RunLock::acquire(&ctx.run)?;
        let Some(done) = ctx
            .run
            .iterations()
            .into_iter()
            .filter(|&it| ctx.run.manifest_path(it, Stage::Update).exists())
            .max()
        else {
            bail!("run {}: no iteration has completed its update", self.run);
        };
        let opts = CheckpointOptions {
            keep_last: self.keep_last,
            save_every: self.save_every,
            keep_features: self.keep_features,
            ..ctx.cfg.opts.checkpoint.clone()
        };
        let before = bytes_under(&ctx.run.root);
        let pruned = crate::prune::prune(&ctx.run, done, &opts)?;
        println!(
            "run {}: pruned {} files ({:.1} GB) of iterations 1-{}, keeping {}; hashes kept in {}",
            self.run,
            pruned.len(),
            before.saturating_sub(bytes_under(&ctx.run.root)) as f64 / 1e9,
            done.saturating_sub(self.keep_last),
            match self.save_every {
                0 => "none of them".to_string(),
                k => format!("every {k}th"),
            },
            crate::pruned::path(&ctx.run.root).display()
        );
        for f in &pruned {
            println!("  {f}");
        }
        Ok(())
    }
}

/// The bytes of the files under `dir`, every level.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
