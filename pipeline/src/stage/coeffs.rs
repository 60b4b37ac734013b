//! The coeffs stage: DelTA (or uniform / top-entropy / oracle-tokens / KTAE) token
//! coefficients from the features, advantages and kept flags (KTAE: advantage shifts from
//! the token ids and rewards); writes coeffs.parquet with the diagnostics in its metadata.

use anyhow::Result;

use deltarl_schemas::{CoeffsSummary, Stage};

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
    fn settings(cfg: &Resolved) -> Result<Settings> {
        Ok(cfg.coeffs.clone())
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

fn estimate(env: &Env, s: &Settings) -> Result<Ran<CoeffsSummary>> {
    let tok_path = env.previous_policy().join("tokenizer.json");
    let tokenizer = deltarl_model::Tokenizer::from_file(&tok_path)?;
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
    let s = &s;
    let decode = |ids: &[u32]| {
        tokenizer
            .decode(ids)
            .map_err(|e| deltarl_coeffs::Error::Input(e.to_string()))
    };
    let mut written = (0, Default::default());
    env.write_output(Stage::Coeffs, |w| -> Result<()> {
        written = deltarl_coeffs::shell::run_io(
            s,
            &env.file(Stage::Rollout),
            &env.file(Stage::Score),
            &env.file(Stage::Features),
            w,
            env.meta(),
            &decode,
        )?;
        Ok(())
    })?;
    let (rows, summary) = written;
    Ok(Ran::new(rows, summary))
}
