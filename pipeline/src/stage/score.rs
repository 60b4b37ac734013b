//! The score stage: verify each response, rewards (with the DAPO overlong penalty), group
//! advantages and the dynamic-sampling flag; write scores.parquet.

use anyhow::{Context, Result};

use deltarl_schemas::{ScoreSummary, Stage};

use super::contract::Contract;
use super::env::Env;
use super::ran::Ran;
use crate::config::Resolved;
use crate::progress::Progress;

/// The score stage's contract.
pub struct Score;

impl Contract for Score {
    const STAGE: Stage = Stage::Score;
    type Settings = Settings;
    type Summary = ScoreSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.score
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<ScoreSummary>>> {
        score(env, s).map(Some)
    }

    fn line(s: &ScoreSummary) -> String {
        format!(
            "accuracy {:.3}, reward {:.3}, kept {:.2}",
            s.accuracy, s.reward_mean, s.kept_frac
        )
    }
}

/// The score stage's settings (the score crate's own).
pub type Settings = deltarl_score::Settings;

fn score(env: &Env, s: &Settings) -> Result<Ran<ScoreSummary>> {
    let src = env.file(Stage::Rollout);
    let bytes = std::fs::read(&src).with_context(|| format!("cannot read {}", src.display()))?;
    // The bar's length is the file's row count, from its footer (nothing decoded twice).
    let rows = deltarl_schemas::TableReader::<deltarl_schemas::RolloutRow>::open(&src, 1)
        .map(|r| r.rows())
        .unwrap_or(0);
    let progress = Progress::new("score", rows as u64);
    let mut scores = Vec::new();
    env.write_output(Stage::Score, |w| -> Result<()> {
        scores = deltarl_score::run_io(
            s,
            (bytes.as_slice(), &src.display().to_string()),
            &|| {
                // Checked when the configuration was recorded; checked again here, as the
                // machine may have changed since.
                let settings = s.code.settings().map_err(deltarl_code::Error::Settings)?;
                deltarl_code::Grader::new(settings)
            },
            w,
            env.meta(),
            &|k| progress.inc(k as u64),
        )?;
        Ok(())
    })?;
    progress.finish();
    let n = scores.len().max(1) as f64;
    let frac = |f: &dyn Fn(&deltarl_schemas::ScoreRow) -> bool| {
        scores.iter().filter(|r| f(r)).count() as f64 / n
    };
    // Training accuracy per `data_source` when the prompts mix several (metrics.jsonl and
    // TensorBoard get `score/by_source/<source>/accuracy`).
    let by_source = deltarl_eval::accuracy_by_source(
        scores.iter().map(|r| (r.data_source.as_deref(), r.correct)),
    );
    let summary = ScoreSummary {
        accuracy: frac(&|r| r.correct),
        reward_mean: scores.iter().map(|r| f64::from(r.reward)).sum::<f64>() / n,
        kept_frac: frac(&|r| r.kept),
        extracted_frac: frac(&|r| r.extracted.is_some()),
        by_source: (by_source.len() > 1).then_some(by_source),
    };
    Ok(Ran::new(scores.len(), summary))
}
