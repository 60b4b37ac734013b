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

mod limits;
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn configs() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs")
    }

    #[test]
    fn every_shipped_config_loads_and_validates() {
        let mut n = 0;
        for e in std::fs::read_dir(configs()).unwrap() {
            let path = e.unwrap().path();
            Resolved::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            n += 1;
        }
        assert!(n >= 7, "{n} configs");
    }

    #[test]
    fn the_8b_config_is_the_authors_run_script() {
        let r = Resolved::load(&configs().join("qwen3-8b-dapo-math.toml")).unwrap();
        let o = &r.opts;
        assert_eq!(o.model.dtype, deltarl_model::Dtype::Bf16);
        assert_eq!(
            (o.rollout.prompts_per_iter, o.rollout.samples_per_prompt),
            (128, 16)
        );
        assert_eq!(
            (o.rollout.max_new_tokens, o.rollout.max_prompt_tokens),
            (20480, 2048)
        );
        assert_eq!(
            (o.rollout.temperature, o.rollout.top_p, o.rollout.top_k),
            (1.0, 1.0, 0)
        );
        assert!(r.overlong_penalty && !o.score.dynamic_sampling);
        assert_eq!(
            (o.score.overlong_buffer, o.score.overlong_factor),
            (4096, 1.0)
        );
        assert_eq!(o.features.project_dim, 0, "full-width features");
        // Validation as the authors run it: every 4 iterations, T = 1, top-p 0.7, n = 1.
        assert_eq!(
            (
                o.eval.every,
                o.eval.samples,
                o.eval.temperature,
                o.eval.top_p
            ),
            (4, 1, 1.0, 0.7)
        );
        assert_eq!(o.eval.benchmarks.len(), 7);
        assert_eq!(
            (
                o.checkpoint.keep_last,
                o.checkpoint.save_every,
                o.checkpoint.keep_features
            ),
            (4, 0, 2)
        );
        assert_eq!(
            r.estimator,
            Estimator::Delta(DeltaSettings {
                refine_steps: 1,
                lam_min: 0.8,
                lam_max: 1.2,
                scope: deltarl_coeffs::Scope::Batch,
            })
        );
        let u = &o.update;
        assert_eq!((u.eps_low, r.eps_high, u.dual_clip), (0.2, 0.28, 10.0));
        assert_eq!(
            (u.lr, u.warmup_steps, u.weight_decay, u.grad_clip),
            (1e-6, 0, 0.1, 1.0)
        );
        assert_eq!(u.optimizer_steps, 4, "mini-batches of 32 of 128 prompts");
        assert_eq!((u.kl_coef, u.entropy_coef), (0.0, 0.0));
        assert_eq!(u.old_logprobs, deltarl_update::OldLogprobs::Recompute);
        assert_eq!(r.aggregation, Aggregation::TokenMean);
        assert!(u.activation_checkpointing);
        assert_eq!(o.rollout.kv_cache_tokens, 655_360);
    }

    #[test]
    fn extraction_policies_and_fallbacks_are_named_values() {
        let base = configs().join("tiny-arith.toml");
        let r = Resolved::load_with(&base, &["score.extract=\"lenient\"".into()]).unwrap();
        assert_eq!(r.opts.score.extract, deltarl_verify::Policy::Lenient);
        let r = Resolved::load(&base).unwrap();
        assert_eq!(r.opts.score.extract, deltarl_verify::Policy::Boxed);
        for bad in [
            "score.extract=\"loose\"",
            "score.extract_fallbacks=[\"answer-is\", \"nope\"]",
        ] {
            let err = format!(
                "{:#}",
                Resolved::load_with(&base, &[bad.into()]).unwrap_err()
            );
            let key = bad.split('=').next().unwrap();
            assert!(
                err.contains(key.trim_start_matches("score.")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_kv_cache_budget_must_hold_one_response() {
        let base = configs().join("tiny-arith.toml");
        let err = format!(
            "{:#}",
            Resolved::load_with(&base, &["rollout.kv_cache_tokens=10".into()]).unwrap_err()
        );
        assert!(
            err.contains("rollout.kv_cache_tokens") && err.contains("41"),
            "{err}"
        );
        Resolved::load_with(&base, &["rollout.kv_cache_tokens=41".into()]).unwrap();
    }
}
