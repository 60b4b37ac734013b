//! The features stage: a teacher-forced pass of the previous policy over every response,
//! giving the per-token gradient proxy `v = (1 - p) h`, log-probs and entropies; writes
//! features.parquet. When the file is to keep not every vector (`[features] persist`), the
//! stage holds the iteration's vectors and estimates the coefficients where they are, as
//! the authors' code does, writing them beside the file for the coeffs stage.

use std::path::PathBuf;

use anyhow::{Context, Result};

use deltarl_features::Stored;
use deltarl_schemas::layout::in_stage_coeffs_path;
use deltarl_schemas::{encode_piece, read_path, FeaturesSummary, RolloutRow, Stage};

mod file;
mod held;

use super::contract::Contract;
use super::env::{load_policy, Env};
use super::ran::Ran;
use crate::config::Resolved;
use crate::progress::Progress;

/// The features stage's contract.
pub struct Features;

impl Contract for Features {
    const STAGE: Stage = Stage::Features;
    type Settings = Settings;
    type Summary = FeaturesSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.features
    }

    /// The scores, when the stage estimates the coefficients.
    fn extra_inputs(s: &Settings, env: &Env) -> Result<Vec<PathBuf>> {
        Ok(match s.coeffs {
            Some(_) => vec![env.file(Stage::Score)],
            None => Vec::new(),
        })
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<FeaturesSummary>>> {
        match &s.coeffs {
            None => pass(env, &s.pass),
            Some(c) => held::held(env, &s.pass, s.persist, c),
        }
    }

    fn line(s: &FeaturesSummary) -> String {
        let sketch = s.sketch.as_ref().map_or(String::new(), |a| {
            format!(
                ", sketch Spearman {:.4} max |dc| {:.3e}",
                a.spearman, a.max_abs_diff
            )
        });
        format!(
            "{} tokens, k = {}, entropy {:.3}{sketch}",
            s.tokens, s.dim, s.entropy_mean
        )
    }
}

/// The features stage's settings (the pass's, and what the file keeps of the vectors).
pub type Settings = crate::config::FeaturesSettings;

/// The pass with every vector written as it comes (`persist = "full"`).
fn pass(env: &Env, s: &deltarl_features::Settings) -> Result<Option<Ran<FeaturesSummary>>> {
    let (rollouts, _) = read_path::<RolloutRow>(&env.file(Stage::Rollout))?;
    let dir = env.previous_policy();
    let policy = load_policy(&dir, env.device, s.dtype)?;
    let job = deltarl_features::Job {
        iter: env.iter,
        shard: env.shard(),
    };
    let progress = Progress::new("features", rollouts.len() as u64);
    let hidden = policy.model.config.hidden_size;
    let failed = || format!("teacher-forced pass of the policy in {}", dir.display());
    let stats = match env.ranks {
        // One process: each pass's rows go to the file as they come, encoded as a piece.
        None => Some(file::write_file(env, s, hidden, Stored::Full, |sink| {
            let mut c = 0;
            deltarl_features::run_each(
                s,
                job,
                &policy.model,
                &rollouts,
                &mut |rows| {
                    sink(encode_piece(&rows)?, &format!("pass {c}"))?;
                    c += 1;
                    Ok(())
                },
                &mut |n| progress.inc(n as u64),
            )
            .with_context(failed)
        })?),
        // Several processes: each computes its share of the passes (pass c on rank
        // c % world), encoding each pass into its spill file as it comes; then, pass by
        // pass in order, rank 0 takes each from its owner and copies its bytes into the
        // file (decoding only its scalars for the summary), so no rank holds more than a
        // pass or two in memory and the encoding is spread over the ranks.
        Some(g) => {
            let passes = deltarl_features::passes(s, &rollouts).len();
            let output = env.file(Stage::Features);
            if env.writes() {
                crate::ranks::Spill::remove_stale(&output, g.shard().world.max(1));
            }
            let mut spill = crate::ranks::Spill::create(&output, g.rank())?;
            deltarl_features::run_each(
                s,
                job,
                &policy.model,
                &rollouts,
                &mut |rows| Ok(spill.push(&rows)?),
                &mut |n| progress.inc(n as u64),
            )
            .with_context(failed)?;
            file::write_pieces(env, s, hidden, Stored::Full, passes, spill.pieces())?
        }
    };
    progress.finish();
    let Some(stats) = stats else {
        return Ok(None);
    };
    // Coefficients an earlier configuration estimated here, with the vectors held, are no
    // longer this iteration's (removed once the new file is in place): the coeffs stage
    // estimates from the file now.
    let stale = in_stage_coeffs_path(&env.run.root, env.iter);
    if stale.exists() {
        std::fs::remove_file(&stale)
            .with_context(|| format!("cannot remove {}", stale.display()))?;
    }
    Ok(Some(Ran::new(stats.rows, stats.summary(None))))
}
