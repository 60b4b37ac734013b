//! The coeffs stage: DelTA (or uniform / top-entropy / oracle-tokens / KTAE) token
//! coefficients from the features, advantages and kept flags (KTAE: advantage shifts from
//! the token ids and rewards); writes coeffs.parquet with the diagnostics in its metadata.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use deltarl_coeffs::shell::{self, Source};
use deltarl_model::Tokenizer;
use deltarl_schemas::layout::in_stage_coeffs_path;
use deltarl_schemas::{
    read_meta, read_path, CoeffRow, CoeffsSummary, FeatureProbs, FeatureRow, FeatureScalars,
    Persist, RolloutRow, ScoreRow, Stage, PERSIST_KEY,
};

use super::contract::Contract;
use super::env::Env;
use super::ran::Ran;
use crate::config::Resolved;

/// The coeffs stage's contract.
pub struct Coeffs;

impl Contract for Coeffs {
    const STAGE: Stage = Stage::Coeffs;
    type Settings = Settings;
    type Summary = CoeffsSummary;

    /// Validated when the configuration was resolved.
    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.coeffs
    }

    /// The coefficients the features stage estimated, when it did (its file keeps not
    /// every vector).
    fn extra_inputs(_: &Settings, env: &Env) -> Result<Vec<PathBuf>> {
        let held = in_stage_coeffs_path(&env.run.root, env.iter);
        Ok(if held.exists() {
            vec![held]
        } else {
            Vec::new()
        })
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<CoeffsSummary>>> {
        estimate(env, s).map(Some)
    }

    fn line(s: &CoeffsSummary) -> String {
        if s.scopes == 0 {
            return format!(
                "cos(mu+, mu-) {:.4} (no DelTA statistics); gradient-weighted c {:.3} / {:.3}",
                s.cos_before, s.grad_coeff_pos, s.grad_coeff_neg
            );
        }
        format!(
            "cos(mu+, mu-) {:.4} -> {:.4}, gamma+ {:.3e} gamma- {:.3e}, g {:.4}, \
             gradient-weighted c {:.3} / {:.3}",
            s.cos_before,
            s.cos_after,
            s.gamma_pos,
            s.gamma_neg,
            s.norm,
            s.grad_coeff_pos,
            s.grad_coeff_neg
        )
    }
}

/// The estimator and its validated parameters (the coeffs crate's own settings).
pub type Settings = deltarl_coeffs::Settings;

/// The settings an estimate of this iteration runs under (KTAE's with the policy's end
/// tokens) and the tokenizer that decodes its tokens.
fn prepared(env: &Env, s: &Settings) -> Result<(Settings, Tokenizer)> {
    let tok_path = env.previous_policy().join("tokenizer.json");
    let tokenizer = Tokenizer::from_file(&tok_path)?;
    // KTAE scores the model's end-of-sequence tokens 0: they close every finished response,
    // so their presence tells finished from cut off, not right from wrong.
    let s = match s.estimator {
        deltarl_coeffs::Estimator::Ktae(_) => {
            let cfg = deltarl_model::read_config(&env.previous_policy())?;
            s.clone()
                .with_end_ids(deltarl_model::eos_ids(&cfg, &tokenizer))
        }
        deltarl_coeffs::Estimator::Uniform
        | deltarl_coeffs::Estimator::TopEntropy { .. }
        | deltarl_coeffs::Estimator::Delta(_)
        | deltarl_coeffs::Estimator::OracleTokens { .. }
        | deltarl_coeffs::Estimator::OraclePrefix { .. }
        | deltarl_coeffs::Estimator::OracleFiller { .. } => s.clone(),
    };
    Ok((s, tokenizer))
}

/// Token ids to text, for the extreme-token table and the oracles' labels.
fn decoder(tokenizer: &Tokenizer) -> impl Fn(&[u32]) -> deltarl_coeffs::Result<String> + '_ {
    |ids: &[u32]| {
        tokenizer
            .decode(ids)
            .map_err(|e| deltarl_coeffs::Error::Input(e.to_string()))
    }
}

/// The coefficients of this iteration's `rollouts` from feature vectors in memory of
/// dimension `dim` (the features stage's, when its file keeps not every vector; `source`
/// says whose), every response's per-token scalars in `scalars`, as the stage computes
/// them from a file: the settings they ran under, the rows, the summary.
pub fn estimate_rows(
    env: &Env,
    s: &Settings,
    rollouts: &[RolloutRow],
    scalars: &[FeatureRow],
    source: Source<'_, '_>,
    dim: usize,
) -> Result<(Settings, Vec<CoeffRow>, CoeffsSummary)> {
    let (s, tokenizer) = prepared(env, s)?;
    let scores: Vec<ScoreRow> = read_path(&env.file(Stage::Score))?.0;
    let entropies: Vec<FeatureScalars> = scalars.iter().map(FeatureScalars::from).collect();
    let probs: Vec<FeatureProbs> = scalars.iter().map(FeatureProbs::from).collect();
    let (out, summary) = shell::run(
        &s,
        rollouts,
        &scores,
        &entropies,
        &probs,
        dim,
        source,
        &decoder(&tokenizer),
    )?;
    Ok((s, out, summary))
}

/// What features.parquet at `path` keeps of the vectors (its metadata's [`PERSIST_KEY`];
/// every vector when the key is absent).
fn persisted(path: &std::path::Path) -> Result<Persist> {
    let meta = read_meta(path)?;
    match meta.extra.get(PERSIST_KEY) {
        None => Ok(Persist::Full),
        Some(v) => Persist::parse(v).with_context(|| {
            format!(
                "{}: metadata {PERSIST_KEY} = {v:?} is not full, projected or none",
                path.display()
            )
        }),
    }
}

fn estimate(env: &Env, s: &Settings) -> Result<Ran<CoeffsSummary>> {
    let (s, tokenizer) = prepared(env, s)?;
    let features = env.file(Stage::Features);
    let persist = persisted(&features)?;
    let (rows, summary) = if persist.is_full() {
        let mut written = (0, Default::default());
        env.write_output(Stage::Coeffs, |w| -> Result<()> {
            written = shell::run_io(
                &s,
                &env.file(Stage::Rollout),
                &env.file(Stage::Score),
                &features,
                w,
                env.meta(),
                &decoder(&tokenizer),
            )?;
            Ok(())
        })?;
        written
    } else {
        // The file keeps not every vector: the features stage estimated the coefficients
        // where the vectors were, and they are taken over when under these settings.
        let held = in_stage_coeffs_path(&env.run.root, env.iter);
        let (rows, summary) = match shell::read_back(&held, &s)? {
            Ok(read) => read,
            Err(recorded) => bail!(
                "{} keeps {persist} vectors (features.persist = \"{persist}\"), so the \
                 coefficients come from the features stage, which estimated them in {} \
                 with the settings {recorded}, not this configuration's {}: rerun the \
                 features stage under this configuration (with features.persist = \"full\" \
                 to estimate from the file)",
                features.display(),
                held.display(),
                serde_json::to_string(&s).unwrap_or_default()
            ),
        };
        env.write_output(Stage::Coeffs, |w| -> Result<()> {
            Ok(shell::write(w, &s, &rows, &summary, env.meta())?)
        })?;
        (rows.len(), summary)
    };
    Ok(Ran::new(rows, summary))
}
