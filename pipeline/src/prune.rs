//! Pruning old policies (`[checkpoint] keep_last`, `save_every`) and features files
//! (`keep_features`): an 8B run writes ~16 GB of weights, ~100 GB of optimizer state and
//! ~84 GB of features an iteration. After an iteration completes, the weights and optimizer
//! state of iterations older than the last `keep_last` go (every `save_every`-th
//! iteration's stay), and the features of iterations older than the last `keep_features`. The run's record of completion does not: each removed
//! file's hash is kept in `runs/<run>/pruned.json`, written before anything is deleted, and
//! the run's hashing answers from it for a file that is gone — so `status` and `iterate`
//! still see those iterations done, and a rerun that needs a pruned policy is refused by
//! name instead of silently redoing the run. The record itself is [`crate::pruned`].

use std::path::PathBuf;

use anyhow::{Context, Result};

use deltarl_schemas::Stage;

use crate::config::CheckpointOptions;
use crate::rundir::RunDir;

/// The weights and optimizer files of iteration `iter`'s update.
fn checkpoint_files(run: &RunDir, iter: u32) -> Vec<PathBuf> {
    let dir = run.iter_dir(iter);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("policy"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.push(dir.join("optimizer/optimizer.safetensors"));
    files.retain(|p| p.exists());
    files
}

/// Prunes what `c` lets go once iteration `done` is complete; returns the files removed.
/// `keep_last = 0` keeps every checkpoint, `keep_features = 0` every features file.
pub fn prune(run: &RunDir, done: u32, c: &CheckpointOptions) -> Result<Vec<String>> {
    let mut rec = crate::pruned::Entries::new();
    let mut doomed = Vec::new();
    let mut drop = |f: PathBuf| -> Result<()> {
        rec.insert(run.rel(&f), run.hash(&f)?);
        doomed.push(f);
        Ok(())
    };
    if c.keep_last > 0 {
        for iter in 1..=done.saturating_sub(c.keep_last) {
            if c.save_every > 0 && iter % c.save_every == 0 {
                continue;
            }
            for f in checkpoint_files(run, iter) {
                drop(f)?;
            }
        }
    }
    if c.keep_features > 0 {
        for iter in 1..=done.saturating_sub(c.keep_features) {
            let f = run.iter_dir(iter).join(Stage::Features.output());
            if f.exists() {
                drop(f)?;
            }
        }
    }
    if doomed.is_empty() {
        return Ok(Vec::new());
    }
    // The record first: a crash after it leaves files that are merely still there.
    run.record_pruned(rec)?;
    for f in &doomed {
        std::fs::remove_file(f).with_context(|| format!("cannot prune {}", f.display()))?;
    }
    Ok(doomed.iter().map(|f| run.rel(f)).collect())
}
