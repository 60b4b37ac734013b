//! Whether the files a stage reads are there: neither pruned nor missing. A refusal says
//! which file, why it is gone, and what brings it back.

use std::path::PathBuf;

use anyhow::{bail, Result};
use deltarl_schemas::Stage;

use crate::config::CheckpointOptions;
use crate::rundir::RunDir;

/// Where a stage runs, for messages: "the base" or "iteration N".
pub fn where_(iter: u32, stage: Stage) -> String {
    if stage == Stage::Warmstart {
        "the base".into()
    } else {
        format!("iteration {iter}")
    }
}

/// Refuses to run `stage` of `iter` when one of its `inputs` was pruned (the
/// `checkpoint` options say which are kept) or is missing.
pub fn check_inputs(
    run: &RunDir,
    checkpoint: &CheckpointOptions,
    iter: u32,
    stage: Stage,
    inputs: &[PathBuf],
) -> Result<()> {
    for p in inputs {
        // A sharded checkpoint's index stays when its shards are pruned.
        let index_of_pruned = p.ends_with("model.safetensors.index.json")
            && run.pruned_under(p.parent().unwrap_or(p))?;
        if run.is_pruned(p)? || index_of_pruned {
            let c = checkpoint;
            let why = if p.ends_with(Stage::Features.output()) {
                format!(
                    "keep_features = {}); only the last iterations' features can be \
                     reread",
                    c.keep_features
                )
            } else {
                format!(
                    "keep_last = {}, save_every = {}); only the last iterations' \
                     policies can be rerun from",
                    c.keep_last, c.save_every
                )
            };
            bail!(
                "stage {stage} of {} needs {}, which was pruned ([checkpoint] {why}",
                where_(iter, stage),
                p.display(),
            );
        }
        if !p.exists() {
            let hint = if p.starts_with(&run.root) {
                "run the stages before it first"
            } else {
                "a file the configuration names (model.source or data.source)"
            };
            bail!(
                "stage {stage} of {} needs {} ({hint})",
                where_(iter, stage),
                p.display()
            );
        }
    }
    Ok(())
}
