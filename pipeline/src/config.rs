//! Configuration in two layers (as ruff does): TOML *options*, every field documented and
//! unknown keys rejected, resolved once into validated *settings* for each stage.
//!
//! A file may start with `extends = "other.toml"` (relative to itself) and then state only
//! what differs; tables are merged key by key. Keys whose default depends on the algorithm
//! (`aggregation`, `eps_high`, `advantage`, `estimator`, `overlong_penalty`) take it from
//! `algorithm` unless set.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use deltarl_coeffs::{DeltaSettings, Estimator, Scope};
use deltarl_features::Proxy;
use deltarl_update::Aggregation;

/// The policy-gradient variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    Grpo,
    Dapo,
    Drgrpo,
    Delta,
}

/// How group advantages are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdvantageKind {
    /// (R - mean) / (std + 1e-6), unbiased std.
    Grpo,
    /// R - mean (Dr.GRPO).
    Drgrpo,
}

/// Coefficient estimator name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EstimatorKind {
    Uniform,
    TopEntropy,
    Delta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Auto,
    Cpu,
    Cuda,
}

/// Top-level options.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Run seed: every random draw derives from it.
    pub seed: u64,
    /// grpo | dapo | drgrpo | delta.
    pub algorithm: Algorithm,
    pub model: ModelOptions,
    pub warmstart: WarmstartOptions,
    pub data: DataOptions,
    pub rollout: RolloutOptions,
    pub score: ScoreOptions,
    pub features: FeatureOptions,
    pub coeffs: CoeffOptions,
    pub update: UpdateOptions,
    pub eval: EvalOptions,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOptions {
    /// "tiny" (built and warm-started here) or a Hugging Face model folder.
    pub source: String,
    /// f32 | bf16.
    pub dtype: deltarl_model::Dtype,
    /// auto (CUDA when present) | cpu | cuda.
    pub device: DeviceKind,
    /// CPU threads for libtorch and rayon (0 = all cores).
    pub threads: usize,
    /// Shape of the tiny model (used when source = "tiny").
    pub tiny: TinyOptions,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TinyOptions {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU layer.
    pub intermediate_size: usize,
    /// Decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Context length.
    pub max_position_embeddings: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WarmstartOptions {
    /// Optimizer steps of the supervised warm start.
    pub steps: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Peak learning rate (linear warm-up, cosine decay).
    pub lr: f64,
    /// Warm-up steps.
    pub warmup_steps: usize,
    /// Fraction of worked solutions with one wrong step.
    pub wrong_frac: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataOptions {
    /// "tiny-arith" (generated) or a JSONL / Parquet file of prompts.
    pub source: String,
    /// Number of generated training problems (tiny-arith).
    pub train_size: usize,
    /// Prompt template; `{question}` is replaced by the problem.
    pub template: String,
    /// Wrap the rendered template as the user message of the model's chat template
    /// (`tokenizer_config.json`), as `apply_chat_template(add_generation_prompt=True)`.
    #[serde(default)]
    pub chat_template: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutOptions {
    /// Prompts drawn per iteration.
    pub prompts_per_iter: usize,
    /// Responses per prompt (G).
    pub samples_per_prompt: u32,
    /// Maximum response length in tokens.
    pub max_new_tokens: usize,
    /// Sampling temperature (0 = greedy).
    pub temperature: f64,
    /// Nucleus sampling mass (1 = off).
    pub top_p: f64,
    /// Top-k (0 = off).
    pub top_k: usize,
    /// Stop strings (besides EOS).
    pub stop: Vec<String>,
    /// Rows decoded together at most.
    pub max_batch_rows: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreOptions {
    /// grpo | drgrpo (default from algorithm).
    pub advantage: Option<AdvantageKind>,
    /// DAPO overlong penalty (default from algorithm).
    pub overlong_penalty: Option<bool>,
    /// Penalty buffer Lbuf in tokens.
    pub overlong_buffer: usize,
    /// Penalty factor.
    pub overlong_factor: f64,
    /// Drop groups whose rewards are all equal (DAPO dynamic sampling).
    pub dynamic_sampling: bool,
    /// Extraction fallbacks besides \boxed: "answer-is", "hashes", "last-number".
    pub extract_fallbacks: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureOptions {
    /// lm-head-row ((1 - p) h, reference) | hidden.
    pub proxy: Proxy,
    /// Project to this many dimensions when the hidden size is larger (0 = never).
    pub project_dim: usize,
    /// Responses per forward pass.
    pub chunk_rows: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CoeffOptions {
    /// uniform | top-entropy | delta (default from algorithm).
    pub estimator: Option<EstimatorKind>,
    /// DelTA refinement passes K.
    pub refine_steps: u32,
    /// Smallest coefficient before normalisation.
    pub lam_min: f64,
    /// Largest coefficient before normalisation.
    pub lam_max: f64,
    /// batch | group.
    pub scope: Scope,
    /// Kept fraction of the top-entropy estimator.
    pub top_entropy_keep: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateOptions {
    /// token-mean | seq-mean-token-mean | seq-mean-token-sum-norm (default from algorithm).
    pub aggregation: Option<Aggregation>,
    /// Lower clip range.
    pub eps_low: f64,
    /// Upper clip range (default from algorithm: 0.28 with clip-higher, else eps_low).
    pub eps_high: Option<f64>,
    /// Dual-clip constant for negative advantages (0 = off).
    pub dual_clip: f64,
    /// AdamW learning rate.
    pub lr: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// Linear warm-up in optimizer steps.
    pub warmup_steps: u64,
    /// Global gradient-norm clip (0 = off).
    pub grad_clip: f64,
    /// Optimizer steps (mini-batches) per iteration.
    pub optimizer_steps: usize,
    /// Responses per forward/backward pass.
    pub micro_batch_rows: usize,
    /// k3 KL-to-base coefficient (0 = off).
    pub kl_coef: f64,
    /// Entropy bonus coefficient (0 = off).
    pub entropy_coef: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// Evaluate every this many iterations (0 = never inside iterate).
    pub every: u32,
    /// Held-out problems (tiny-arith) evaluated.
    pub problems: usize,
    /// Samples per problem.
    pub samples: u32,
    /// Sampling temperature (0 = greedy).
    pub temperature: f64,
}

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

impl Options {
    /// Loads and checks a configuration file (unknown keys are errors naming the key).
    pub fn load(path: &Path) -> Result<Self> {
        let table = read_table(path, 0)?;
        let opts: Options = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| anyhow::anyhow!("{}: {}", path.display(), e.message()))?;
        Ok(opts)
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

fn check(ok: bool, key: &str, value: impl std::fmt::Display, rule: &str) -> Result<()> {
    if !ok {
        bail!("config key `{key}` = {value}: {rule}");
    }
    Ok(())
}

impl Resolved {
    pub fn load(path: &Path) -> Result<Self> {
        Self::new(Options::load(path)?, path)
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
        let u = &o.update;
        check(
            u.lr > 0.0 && u.lr.is_finite(),
            "update.lr",
            u.lr,
            "must be positive",
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
            u.weight_decay >= 0.0,
            "update.weight_decay",
            u.weight_decay,
            "must be >= 0",
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
        let s = &o.score;
        check(
            s.overlong_buffer < r.max_new_tokens,
            "score.overlong_buffer",
            s.overlong_buffer,
            "must be smaller than rollout.max_new_tokens",
        )?;
        for f in &s.extract_fallbacks {
            check(
                matches!(f.as_str(), "answer-is" | "hashes" | "last-number"),
                "score.extract_fallbacks",
                format!("{f:?}"),
                "each must be answer-is, hashes or last-number",
            )?;
        }
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

    /// Hash of one part of the configuration (what one stage depends on).
    pub fn part_hash(&self, parts: &[&dyn erased::Part]) -> String {
        let joined: Vec<String> = parts.iter().map(|p| p.json()).collect();
        deltarl_schemas::sha256_hex(joined.join("|").as_bytes())
    }
}

/// Serialisable configuration parts for per-stage hashes.
pub mod erased {
    pub trait Part {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Part for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}
