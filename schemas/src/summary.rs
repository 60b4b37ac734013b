//! What each stage reports in its manifest's `summary`: one serde struct a stage, named once
//! here. The console line, `status` and the report read these fields through the types, so
//! renaming one breaks the build, never a reader; `metrics.jsonl` and TensorBoard tag each
//! number by its field's path in the serialised struct.
//!
//! A summary is stored as JSON inside the manifest (`Manifest::summary`), written from the
//! struct; [`Manifest::summary_of`] reads it back as the struct. Fields added after the
//! first manifests were written are `Option`s, absent in those manifests.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Error, Manifest, Result, Stage};

/// A stage's summary: the struct its manifest's `summary` holds.
pub trait StageSummary: Serialize + DeserializeOwned {
    /// The stage that writes it.
    const STAGE: Stage;
}

impl Manifest {
    /// The manifest's summary as `S`, the summary type of the manifest's stage.
    pub fn summary_of<S: StageSummary>(&self) -> Result<S> {
        let fail = |message: String| Error::Summary {
            stage: self.stage.name().to_string(),
            iter: self.iter,
            message,
        };
        if self.stage != S::STAGE {
            return Err(fail(format!("read as the summary of stage {}", S::STAGE)));
        }
        S::deserialize(&self.summary).map_err(|e| fail(e.to_string()))
    }
}

/// The warm start: the tiny base it trained, and its accuracy on held-out problems.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WarmstartSummary {
    pub final_loss: f64,
    pub params: i64,
    pub steps: usize,
    pub train_seconds: f64,
    /// One greedy answer each on the held-out problems.
    pub heldout_greedy_accuracy: f64,
    /// One answer each at temperature 1.
    pub heldout_t1_accuracy: f64,
}

impl StageSummary for WarmstartSummary {
    const STAGE: Stage = Stage::Warmstart;
}

/// Who generates the rollouts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Our KV-cache engine: per-sample seeds, byte-identical reruns.
    #[default]
    Native,
    /// A vLLM server on the iteration's policy folder.
    Vllm,
}

impl Engine {
    pub fn is_native(&self) -> bool {
        *self == Engine::Native
    }
}

/// How a rollout got its vLLM server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "server", rename_all = "snake_case")]
pub enum Acquired {
    /// The user's (`rollout.vllm.url`).
    User,
    /// Started by this rollout; `restarted` says why a kept one was not used.
    Started {
        seconds: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restarted: Option<String>,
    },
    /// The kept server, with this policy loaded in place and probed.
    Reloaded {
        seconds: f64,
        probe_tokens: usize,
        probe_max_abs: f64,
    },
}

impl Acquired {
    /// Seconds spent before the first request could go out.
    pub fn seconds(&self) -> f64 {
        match self {
            Acquired::User => 0.0,
            Acquired::Started { seconds, .. } | Acquired::Reloaded { seconds, .. } => *seconds,
        }
    }
}

/// The rollout: how much was sampled, how fast, and where in the epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutSummary {
    pub prompts: usize,
    /// Response tokens generated.
    pub tokens: usize,
    /// Response tokens per second of sampling (the engine's start-up left out).
    pub tokens_per_s: f64,
    pub mean_response_len: f64,
    /// Share of responses cut off at `max_new_tokens`.
    pub truncated_frac: f64,
    pub engine: Engine,
    /// Seconds before the first request could go out (0 for the native engine).
    pub engine_startup_s: f64,
    /// How the vLLM server was had (none for the native engine).
    pub engine_server: Option<Acquired>,
    /// The epoch this iteration's prompts belong to (absent in older manifests; none when
    /// the data source does not cycle).
    pub epoch: Option<u32>,
    /// The iteration's batch within its epoch, from 1.
    pub epoch_batch: Option<u32>,
    pub batches_per_epoch: Option<u32>,
}

impl StageSummary for RolloutSummary {
    const STAGE: Stage = Stage::Rollout;
}

impl RolloutSummary {
    /// "epoch E (batch b of B)", when the manifest records it.
    pub fn epoch_line(&self) -> Option<String> {
        Some(format!(
            "epoch {} (batch {} of {})",
            self.epoch?, self.epoch_batch?, self.batches_per_epoch?
        ))
    }
}

/// Accuracy over the responses of one `data_source`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceAccuracy {
    pub accuracy: f64,
    pub responses: usize,
}

/// The score stage: batch accuracy and reward, and what dynamic sampling kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreSummary {
    pub accuracy: f64,
    pub reward_mean: f64,
    /// Share of responses in groups dynamic sampling kept.
    pub kept_frac: f64,
    /// Share of responses with an extracted answer.
    pub extracted_frac: f64,
    /// Accuracy per `data_source`, when the prompts mix several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_source: Option<BTreeMap<String, SourceAccuracy>>,
}

impl StageSummary for ScoreSummary {
    const STAGE: Stage = Stage::Score;
}

/// The features pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeaturesSummary {
    /// Response tokens with a vector.
    pub tokens: usize,
    /// The vectors' dimension k.
    pub dim: u32,
    /// Entropy of the policy's next-token distribution, mean over tokens.
    pub entropy_mean: f64,
    /// Under `persist = "projected"`: how the coefficients estimated from the stored sketch
    /// agree with those estimated at full width (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sketch: Option<SketchAgreement>,
}

/// How coefficients estimated from a sketch of the vectors agree with those at full width,
/// over the tokens of responses with a non-zero advantage (the tokens whose coefficient
/// reaches the gradient).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SketchAgreement {
    /// The sketch's dimension.
    pub dim: u32,
    /// Tokens compared.
    pub tokens: usize,
    /// Spearman's rank correlation (ties at their mean rank); 1 when every coefficient is
    /// tied on both sides.
    pub spearman: f64,
    /// The largest |c_sketch - c_full| over those tokens.
    pub max_abs_diff: f64,
}

impl StageSummary for FeaturesSummary {
    const STAGE: Stage = Stage::Features;
}

/// Quantiles of the coefficients of one side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub count: usize,
    pub min: f64,
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
    pub mean: f64,
}

/// One token singled out by the coefficients' summary; `text` and `context` are filled in
/// by whoever has a tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenRef {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub position: usize,
    pub coeff: f32,
    pub advantage: f32,
    pub text: String,
    pub context: String,
}

/// The coefficient stage's diagnostics: centroid cosines, scales, quantiles, extreme tokens
/// (also in coeffs.parquet's metadata).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoeffsSummary {
    /// cos(mu+, mu-) of the advantage-weighted centroids (before reweighting).
    pub cos_before: f64,
    /// cos of the effective centroids weighted by the coefficients (after reweighting).
    pub cos_after: f64,
    pub gamma_pos: f64,
    pub gamma_neg: f64,
    /// Self-normalisation scalar (mean over scopes for `group`).
    pub norm: f64,
    /// Scopes with DelTA statistics (0 for the estimators without them).
    pub scopes: usize,
    pub tokens_pos: usize,
    pub tokens_neg: usize,
    pub tokens_zero: usize,
    pub tokens_excluded: usize,
    pub coeff_pos: Quantiles,
    pub coeff_neg: Quantiles,
    /// Σ c (1 − p) |A| / Σ (1 − p) |A| over the positive side's tokens: the coefficients'
    /// mean where the gradient is (a token predicted with p ≈ 1 carries none, so the plain
    /// per-token mean is dominated by tokens no weight can move). 0 without such tokens.
    pub grad_coeff_pos: f64,
    /// The same over the negative side.
    pub grad_coeff_neg: f64,
    /// Highest-coefficient tokens of non-zero-advantage responses, highest first.
    pub top: Vec<TokenRef>,
    /// Lowest-coefficient tokens of non-zero-advantage responses, lowest first.
    pub bottom: Vec<TokenRef>,
}

impl StageSummary for CoeffsSummary {
    const STAGE: Stage = Stage::Coeffs;
}

/// How far the sampler's log-probs are from the trainer's on the trained tokens
/// (`d = logp_rollout - logp_trainer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub tokens: u64,
    /// Mean and maximum of |d|.
    pub mean_abs: f64,
    pub max_abs: f64,
    /// k3 estimate of KL(rollout || trainer): mean of exp(-d) + d - 1 (>= 0).
    pub k3: f64,
    /// Fraction of tokens with |d| > 0.1.
    pub frac_over_0_1: f64,
}

/// The update: its last optimizer step's metrics (none without a step), and the
/// sampler/trainer mismatch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateSummary {
    /// Responses trained on (those dynamic sampling kept).
    pub responses: usize,
    /// Steps skipped for a non-finite gradient norm.
    pub skipped_steps: usize,
    pub loss: Option<f64>,
    pub grad_norm: Option<f64>,
    pub clip_frac: Option<f64>,
    pub entropy: Option<f64>,
    /// k3 KL to the reference policy.
    pub kl: Option<f64>,
    pub approx_kl_old: Option<f64>,
    pub mismatch: Mismatch,
}

impl StageSummary for UpdateSummary {
    const STAGE: Stage = Stage::Update;
}

/// One benchmark of an evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkSummary {
    pub problems: usize,
    /// Samples per problem.
    pub k: usize,
    #[serde(rename = "avg@k")]
    pub avg_at_k: f64,
    #[serde(rename = "pass@k")]
    pub pass_at_k: f64,
    /// Problems left out because they do not fit the model's context.
    pub skipped: usize,
    /// Accuracy per `data_source`, when the benchmark mixes several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_source: Option<BTreeMap<String, SourceAccuracy>>,
}

/// The evaluation: held-out accuracy, and each benchmark's when `eval.benchmarks` names any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    /// Accuracy on the task's held-out problems (on every benchmark without a task).
    pub accuracy: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmarks: Option<BTreeMap<String, BenchmarkSummary>>,
    /// The engine that drew the answers (the rollout's).
    #[serde(default, skip_serializing_if = "Engine::is_native")]
    pub engine: Engine,
    /// How the vLLM server was had (none for the native engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_server: Option<Acquired>,
}

impl StageSummary for EvalSummary {
    const STAGE: Stage = Stage::Eval;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn manifest(stage: Stage, summary: serde_json::Value) -> Manifest {
        Manifest {
            stage,
            iter: 3,
            config_hash: String::new(),
            seed: 0,
            inputs: BTreeMap::new(),
            outputs: BTreeMap::new(),
            rows: 0,
            seconds: 0.0,
            version: String::new(),
            summary,
            settings: serde_json::Value::Null,
            compute: None,
        }
    }

    #[test]
    fn a_summary_reads_back_as_its_type_and_names_what_is_wrong() {
        let s = FeaturesSummary {
            tokens: 12,
            dim: 4,
            entropy_mean: 0.5,
            sketch: None,
        };
        let m = manifest(Stage::Features, serde_json::to_value(&s).unwrap());
        assert_eq!(m.summary_of::<FeaturesSummary>().unwrap(), s);
        // Another stage's type is refused, by name.
        let e = m.summary_of::<ScoreSummary>().unwrap_err().to_string();
        assert!(e.contains("stage features") && e.contains("score"), "{e}");
        // A missing field is named.
        let m = manifest(Stage::Features, serde_json::json!({"tokens": 1, "dim": 2}));
        let e = m.summary_of::<FeaturesSummary>().unwrap_err().to_string();
        assert!(
            e.contains("entropy_mean") && e.contains("iteration 3"),
            "{e}"
        );
    }

    #[test]
    fn optional_fields_are_absent_in_older_manifests() {
        // A rollout manifest from before epochs and kept servers were recorded.
        let v = serde_json::json!({
            "prompts": 2, "tokens": 10, "tokens_per_s": 5.0, "mean_response_len": 2.5,
            "truncated_frac": 0.0, "engine": "native", "engine_startup_s": 0.0,
        });
        let s: RolloutSummary = manifest(Stage::Rollout, v).summary_of().unwrap();
        assert_eq!((s.epoch, &s.engine_server), (None, &None));
        assert_eq!(s.epoch_line(), None);
        // The JSON keys are the ones manifests have always had (`avg@k`, `server`).
        let b = BenchmarkSummary {
            problems: 1,
            k: 2,
            avg_at_k: 0.5,
            pass_at_k: 1.0,
            skipped: 0,
            by_source: None,
        };
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v["avg@k"], 0.5);
        assert_eq!(v["pass@k"], 1.0);
        assert!(v.get("by_source").is_none());
        let a = serde_json::to_value(Acquired::Started {
            seconds: 1.0,
            restarted: None,
        })
        .unwrap();
        assert_eq!(a, serde_json::json!({"server": "started", "seconds": 1.0}));
    }
}
