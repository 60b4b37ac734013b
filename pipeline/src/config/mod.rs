//! Configuration in two layers (as ruff does): TOML *options* ([`options`]), every field
//! documented and unknown keys rejected, resolved and validated once here into
//! [`Resolved`]; each stage then takes the part it uses as its own settings (in the
//! stage layer above this one), and that part alone makes up the stage's hash.
//!
//! A file may start with `extends = "other.toml"` (relative to itself) and then state only
//! what differs; tables are merged key by key. Keys whose default depends on the algorithm
//! (`aggregation`, `eps_high`, `advantage`, `estimator`, `overlong_penalty`) take it from
//! `algorithm` unless set.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use deltarl_coeffs::{DeltaSettings, Estimator};
use deltarl_update::Aggregation;

mod code;
mod limits;
mod locate;
mod options;
pub mod overrides;
pub use options::*;

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Reads a TOML file, following `extends`.
fn read_table(path: &Path, depth: usize) -> Result<toml::Table> {
    if depth > 8 {
        bail!("{}: `extends` chain deeper than 8", path.display());
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: malformed TOML", path.display()))?;
    if let Some(parent) = table.remove("extends") {
        let Some(rel) = parent.as_str() else {
            bail!("{}: `extends` must be a string", path.display());
        };
        let ppath = path.parent().unwrap_or(Path::new(".")).join(rel);
        let mut base = read_table(&ppath, depth + 1)?;
        merge(&mut base, table);
        table = base;
    }
    Ok(table)
}

/// Refuses NaN and infinite floats anywhere in the configuration, naming the key: no
/// setting of ours means anything when it is not finite, and a NaN slips through every
/// range check written as a comparison.
fn check_finite(table: &toml::Table, prefix: &str, path: &Path) -> Result<()> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Float(x) if !x.is_finite() => {
                bail!(
                    "{}: config key `{key}` = {x}: must be finite",
                    path.display()
                )
            }
            toml::Value::Table(t) => check_finite(t, &key, path)?,
            _ => {}
        }
    }
    Ok(())
}

impl Options {
    /// Loads and checks a configuration file (unknown keys are errors naming the key).
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, &[])
    }

    /// Loads a configuration file with `--set section.key=value` changes applied first,
    /// so they are checked exactly like the file.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<Self> {
        let path = &locate::locate(path, locate::home().as_deref());
        let mut table = read_table(path, 0)?;
        for set in sets {
            overrides::apply(&mut table, set)?;
        }
        check_finite(&table, "", path)?;
        // serde_path_to_error keeps the key a type error is about (`rollout.top_k`), which
        // the merged table's own errors no longer carry.
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let key = e.path().to_string();
            let message = e.into_inner().message().to_string();
            if key == "." {
                anyhow::anyhow!("{}: {message}", path.display())
            } else {
                anyhow::anyhow!("{}: config key `{key}`: {message}", path.display())
            }
        })
    }
}

/// The resolved, validated configuration every stage reads from.
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub opts: Options,
    pub advantage: AdvantageKind,
    pub overlong_penalty: bool,
    pub estimator: Estimator,
    pub aggregation: Aggregation,
    pub eps_high: f64,
    pub config_path: PathBuf,
}

/// A key where 0 means "off" (no limit, no projection, a free port), as an `Option`.
pub fn zero_is_off<T: Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

fn check(ok: bool, key: &str, value: impl std::fmt::Display, rule: &str) -> Result<()> {
    if !ok {
        bail!("config key `{key}` = {value}: {rule}");
    }
    Ok(())
}

impl Resolved {
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, &[])
    }

    /// [`Resolved::load`] with `--set` changes.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<Self> {
        Self::new(Options::load_with(path, sets)?, path)
    }

    /// Fills algorithm-dependent defaults and validates every value once.
    pub fn new(o: Options, path: &Path) -> Result<Self> {
        let a = o.algorithm;
        let advantage = o.score.advantage.unwrap_or(match a {
            Algorithm::Drgrpo => AdvantageKind::Drgrpo,
            _ => AdvantageKind::Grpo,
        });
        let overlong_penalty = o
            .score
            .overlong_penalty
            .unwrap_or(matches!(a, Algorithm::Dapo | Algorithm::Delta));
        let aggregation = o.update.aggregation.unwrap_or(match a {
            Algorithm::Grpo => Aggregation::SeqMeanTokenMean,
            Algorithm::Drgrpo => Aggregation::SeqMeanTokenSumNorm,
            Algorithm::Dapo | Algorithm::Delta => Aggregation::TokenMean,
        });
        let eps_high = o.update.eps_high.unwrap_or(match a {
            Algorithm::Dapo | Algorithm::Delta => 0.28,
            _ => o.update.eps_low,
        });
        let kind = o.coeffs.estimator.unwrap_or(match a {
            Algorithm::Delta => EstimatorKind::Delta,
            _ => EstimatorKind::Uniform,
        });
        let estimator = match kind {
            EstimatorKind::Uniform => Estimator::Uniform,
            EstimatorKind::TopEntropy => Estimator::TopEntropy {
                keep: o.coeffs.top_entropy_keep,
            },
            EstimatorKind::Delta => Estimator::Delta(DeltaSettings {
                refine_steps: o.coeffs.refine_steps,
                lam_min: o.coeffs.lam_min,
                lam_max: o.coeffs.lam_max,
                scope: o.coeffs.scope,
            }),
        };
        deltarl_coeffs::Settings::new(estimator)
            .map_err(|e| anyhow::anyhow!("config [coeffs]: {e}"))?;
        let r = &o.rollout;
        check(
            r.prompts_per_iter > 0,
            "rollout.prompts_per_iter",
            r.prompts_per_iter,
            "must be positive",
        )?;
        check(
            r.samples_per_prompt > 0,
            "rollout.samples_per_prompt",
            r.samples_per_prompt,
            "must be positive",
        )?;
        check(
            r.max_new_tokens > 0,
            "rollout.max_new_tokens",
            r.max_new_tokens,
            "must be positive",
        )?;
        check(
            r.temperature >= 0.0 && r.temperature.is_finite(),
            "rollout.temperature",
            r.temperature,
            "must be >= 0",
        )?;
        check(
            r.top_p > 0.0 && r.top_p <= 1.0,
            "rollout.top_p",
            r.top_p,
            "must be in (0, 1]",
        )?;
        check(
            r.max_batch_rows > 0,
            "rollout.max_batch_rows",
            r.max_batch_rows,
            "must be positive",
        )?;
        // One response must fit the cache budget: its prompt (at most max_prompt_tokens
        // when that is set, at least one token) and max_new_tokens.
        let one_row = r.max_prompt_tokens.max(1) + r.max_new_tokens;
        check(
            r.kv_cache_tokens == 0 || r.kv_cache_tokens >= one_row,
            "rollout.kv_cache_tokens",
            r.kv_cache_tokens,
            &format!(
                "must be 0 (no limit) or hold one response: max(max_prompt_tokens, 1) + max_new_tokens = {one_row}"
            ),
        )?;
        let u = &o.update;
        // vLLM's log-probs come from another engine: the ratio uses the trainer's.
        check(
            r.engine == options::Engine::Native
                || u.old_logprobs == deltarl_update::OldLogprobs::Recompute,
            "update.old_logprobs",
            "rollout",
            "must be recompute with rollout.engine = vllm (the sampler's numbers are never the old policy)",
        )?;
        check(
            (0.0..1.0).contains(&u.eps_low),
            "update.eps_low",
            u.eps_low,
            "must be in [0, 1)",
        )?;
        check(eps_high >= 0.0, "update.eps_high", eps_high, "must be >= 0")?;
        check(
            u.dual_clip == 0.0 || u.dual_clip > 1.0,
            "update.dual_clip",
            u.dual_clip,
            "must be 0 (off) or > 1",
        )?;
        check(
            u.optimizer_steps > 0,
            "update.optimizer_steps",
            u.optimizer_steps,
            "must be positive",
        )?;
        check(
            u.micro_batch_rows > 0,
            "update.micro_batch_rows",
            u.micro_batch_rows,
            "must be positive",
        )?;
        check(
            u.grad_clip >= 0.0,
            "update.grad_clip",
            u.grad_clip,
            "must be >= 0",
        )?;
        check(
            o.checkpoint.shard_mb > 0,
            "checkpoint.shard_mb",
            o.checkpoint.shard_mb,
            "must be positive",
        )?;
        let s = &o.score;
        check(
            s.overlong_buffer < r.max_new_tokens,
            "score.overlong_buffer",
            s.overlong_buffer,
            "must be smaller than rollout.max_new_tokens",
        )?;
        check(
            o.features.chunk_rows > 0,
            "features.chunk_rows",
            o.features.chunk_rows,
            "must be positive",
        )?;
        check(
            o.data.template.contains("{question}"),
            "data.template",
            format!("{:?}", o.data.template),
            "must contain {question}",
        )?;
        limits::check(&o)?;
        let w = &o.warmstart;
        check(
            (0.0..=1.0).contains(&w.wrong_frac),
            "warmstart.wrong_frac",
            w.wrong_frac,
            "must be in [0, 1]",
        )?;
        check(
            w.batch_size > 0,
            "warmstart.batch_size",
            w.batch_size,
            "must be positive",
        )?;
        check(
            o.eval.samples > 0,
            "eval.samples",
            o.eval.samples,
            "must be positive",
        )?;
        Ok(Resolved {
            advantage,
            overlong_penalty,
            estimator,
            aggregation,
            eps_high,
            opts: o,
            config_path: path.to_path_buf(),
        })
    }

    /// Canonical JSON of everything that affects results (not the file path).
    pub fn canonical_json(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("config_path");
        }
        v.to_string()
    }

    pub fn hash(&self) -> String {
        deltarl_schemas::sha256_hex(self.canonical_json().as_bytes())
    }
}

#[cfg(test)]
mod tests;
