//! The eval stage: held-out accuracy of the policy this iteration's update wrote, on the
//! built-in task's test split; writes eval.parquet.

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::json;

use deltarl_model::Dtype;
use deltarl_schemas::{atomic_write, write_table, Stage};

use super::{load_policy, num, Env, Ran};
use crate::config::Resolved;
use crate::eval::{evaluate, EvalSettings};

/// The name of the held-out benchmark in eval.parquet.
pub const BENCHMARK: &str = "tiny-arith-test";

/// How held-out answers are sampled: the rollout's prompt and length limits.
#[derive(Clone, Debug, Serialize)]
pub struct Sampling {
    pub seed: u64,
    pub template: String,
    pub max_new_tokens: usize,
    pub stop: Vec<String>,
    pub max_batch_rows: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cache_tokens: Option<usize>,
}

impl Sampling {
    pub fn new(cfg: &Resolved) -> Self {
        let o = &cfg.opts;
        Sampling {
            seed: o.seed,
            template: o.data.template.clone(),
            max_new_tokens: o.rollout.max_new_tokens,
            stop: o.rollout.stop.clone(),
            max_batch_rows: o.rollout.max_batch_rows,
            max_cache_tokens: (o.rollout.kv_cache_tokens > 0).then_some(o.rollout.kv_cache_tokens),
        }
    }

    /// Evaluation settings for `samples` answers per problem at `temperature` with the
    /// policy of iteration `iter` (0 = the base).
    pub fn at(&self, samples: u32, temperature: f64, iter: u32) -> EvalSettings {
        EvalSettings {
            template: self.template.clone(),
            samples,
            temperature,
            top_p: 1.0,
            max_new_tokens: self.max_new_tokens,
            stop: self.stop.clone(),
            max_batch_rows: self.max_batch_rows,
            max_cache_tokens: self.max_cache_tokens,
            // Held-out accuracy is graded as training rewards are: strictly.
            extract: deltarl_verify::Policy::Boxed,
            seed: self.seed,
            iter,
        }
    }
}

/// Everything the eval stage reads from the configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// The training data source: held-out problems exist for the built-in task only.
    pub data_source: String,
    pub problems: usize,
    pub samples: u32,
    pub temperature: f64,
    pub sampling: Sampling,
    pub dtype: Dtype,
}

impl Settings {
    pub fn new(cfg: &Resolved) -> Self {
        let o = &cfg.opts;
        Settings {
            data_source: o.data.source.clone(),
            problems: o.eval.problems,
            samples: o.eval.samples,
            temperature: o.eval.temperature,
            sampling: Sampling::new(cfg),
            dtype: o.model.dtype,
        }
    }
}

pub fn run(env: &Env, s: &Settings) -> Result<Ran> {
    if s.data_source != "tiny-arith" {
        bail!(
            "the eval stage needs data.source = tiny-arith (use `deltarl eval --bench` for files)"
        );
    }
    let policy = load_policy(&env.this_policy(), env.device, s.dtype)?;
    let prompts = crate::data::tiny_test_prompts(s.problems);
    let settings = s.sampling.at(s.samples, s.temperature, env.iter);
    let rows = evaluate(&policy, BENCHMARK, &prompts, &settings)?;
    let meta = env
        .meta()
        .with("settings", serde_json::to_string(s).unwrap_or_default());
    atomic_write(&env.file(Stage::Eval), |w| write_table(w, &rows, &meta))?;
    let acc = rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64;
    Ok(Ran {
        rows: rows.len(),
        summary: json!({"accuracy": acc}),
        outputs: Vec::new(),
    })
}

pub fn summary(s: &serde_json::Value) -> String {
    format!("held-out accuracy {:.3}", num(s, "accuracy"))
}
