//! The features stage: a teacher-forced pass of the previous policy over every response,
//! giving the per-token gradient proxy `v = (1 - p) h`, log-probs and entropies; writes
//! features.parquet.

use anyhow::{Context, Result};

use deltarl_model::generate::logprob_temperature;
use deltarl_schemas::{read_path, FeatureRow, FeaturesSummary, RolloutRow, Stage};

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

    fn settings(cfg: &Resolved) -> Result<Settings> {
        Ok(settings(cfg))
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<FeaturesSummary>>> {
        pass(env, s)
    }

    fn line(s: &FeaturesSummary) -> String {
        format!(
            "{} tokens, k = {}, entropy {:.3}",
            s.tokens, s.dim, s.entropy_mean
        )
    }
}

/// The features stage's settings (the features crate's own).
pub type Settings = deltarl_features::Settings;

/// The features pass's settings under this configuration (its [`deltarl_features::Job`] is
/// the run's: iteration and shard).
pub fn settings(cfg: &Resolved) -> Settings {
    let o = &cfg.opts;
    Settings {
        seed: o.seed,
        proxy: o.features.proxy,
        project_dim: crate::config::zero_is_off(o.features.project_dim),
        temperature: logprob_temperature(o.rollout.temperature),
        chunk_rows: o.features.chunk_rows,
        chunk_tokens: crate::config::zero_is_off(o.features.chunk_tokens),
        head_chunk_bytes: o.model.head_chunk_bytes(),
        layout: o.model.layout,
        dtype: o.model.dtype,
    }
}

fn pass(env: &Env, s: &Settings) -> Result<Option<Ran<FeaturesSummary>>> {
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
    let mut stats = Stats::default();
    match env.ranks {
        // One process: each pass's rows go to the file as they come (one row group held).
        None => {
            env.write_output(Stage::Features, |w| -> Result<()> {
                let mut out = deltarl_features::writer(s, env.iter, hidden, w, env.meta());
                deltarl_features::run_each(
                    s,
                    job,
                    &policy.model,
                    &rollouts,
                    &mut |rows| {
                        stats.add(&rows);
                        out.write_owned(rows)?;
                        Ok(())
                    },
                    &mut |n| progress.inc(n as u64),
                )
                .with_context(failed)?;
                out.finish()?;
                Ok(())
            })?;
        }
        // Several processes: each computes its share of the passes (pass c on rank
        // c % world), encoding each pass into its spill file as it comes; then, pass by
        // pass in order, rank 0 takes each from its owner and writes it, so no rank holds
        // more than a pass or two in memory.
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
                &mut |rows| Ok(spill.push(rows)?),
                &mut |n| progress.inc(n as u64),
            )
            .with_context(failed)?;
            let own = spill.pieces::<FeatureRow>();
            if env.writes() {
                env.write_output(Stage::Features, |w| -> Result<()> {
                    let mut out = deltarl_features::writer(s, env.iter, hidden, w, env.meta());
                    crate::ranks::stream_to_rank0(g, passes, own, &mut |rows| {
                        stats.add(&rows);
                        out.write_owned(rows)?;
                        Ok(())
                    })?;
                    out.finish()?;
                    Ok(())
                })?;
            } else {
                crate::ranks::stream_to_rank0(g, passes, own, &mut |_| Ok(()))?;
            }
        }
    }
    progress.finish();
    if !env.writes() {
        return Ok(None);
    }
    let summary = FeaturesSummary {
        tokens: stats.tokens,
        dim: stats.dim,
        entropy_mean: stats.entropy / stats.tokens.max(1) as f64,
    };
    Ok(Some(Ran::new(stats.rows, summary)))
}

/// The manifest summary's sums, taken as rows pass by.
#[derive(Default)]
struct Stats {
    rows: usize,
    tokens: usize,
    dim: u32,
    entropy: f64,
}

impl Stats {
    fn add(&mut self, rows: &[FeatureRow]) {
        for r in rows {
            self.rows += 1;
            self.tokens += r.tokens();
            self.dim = r.dim;
            // Token by token, in file order: the sum the summary always took.
            for &e in &r.entropy {
                self.entropy += f64::from(e);
            }
        }
    }
}
