//! Every stage's settings under one configuration, built from the options once, when the
//! configuration is resolved ([`super::Resolved::new`]): the part of the configuration each
//! stage runs with, whose serialisation is the stage's hash. Each stage crate owns its
//! settings type; this is the one place options become settings.

use serde::Serialize;

use deltarl_eval::Sampling;
use deltarl_features::Stored;
use deltarl_model::generate::logprob_temperature;
use deltarl_optim::Sharding;
use deltarl_schemas::{Engine, Persist};
use deltarl_update::{Aggregation, JoinSettings, LossSettings, Surrogate};

use super::options::{zero_is_off, AdvantageKind, Options, SurrogateKind};

/// Each stage's settings (the coefficient estimator's are [`super::Resolved::coeffs`]).
#[derive(Clone, Debug)]
pub struct Stages {
    pub warmstart: deltarl_warmstart::Settings,
    pub rollout: deltarl_rollout::Settings,
    pub score: deltarl_score::Settings,
    pub features: FeaturesSettings,
    pub update: deltarl_update::Settings,
    pub eval: deltarl_eval::Settings,
}

/// What the settings take besides the options: the values resolved from `algorithm`.
pub(super) struct ByAlgorithmValues<'a> {
    pub advantage: AdvantageKind,
    pub overlong_penalty: bool,
    pub aggregation: Aggregation,
    pub eps_high: f64,
    pub coeffs: &'a deltarl_coeffs::Settings,
}

impl Stages {
    pub(super) fn new(o: &Options, r: &ByAlgorithmValues<'_>) -> Self {
        Stages {
            warmstart: warmstart(o),
            rollout: rollout(o),
            score: score(o, r),
            features: features(o, r.coeffs),
            update: update(o, r),
            eval: eval(o),
        }
    }
}

/// The features stage's settings: the pass's, what the file keeps of the vectors, and when
/// that is not every vector the coefficient settings the stage estimates with. Serialised
/// flat, the last two only when the file keeps not every vector, so every configuration
/// that keeps them all hashes as it always did.
#[derive(Clone, Debug, Serialize)]
pub struct FeaturesSettings {
    #[serde(flatten)]
    pub pass: deltarl_features::Settings,
    #[serde(skip_serializing_if = "Stored::is_full")]
    pub persist: Stored,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coeffs: Option<deltarl_coeffs::Settings>,
}

/// Everything the warm start reads: the tiny model is warm-started on the built-in task
/// `data.source` names, else the compact one.
fn warmstart(o: &Options) -> deltarl_warmstart::Settings {
    deltarl_warmstart::Settings {
        seed: o.seed,
        warmstart: o.warmstart.clone(),
        tiny: o.model.tiny,
        template: o.data.template.clone(),
        dtype: o.model.dtype,
        heldout: sampling(o),
        task: o.data.source.task().unwrap_or_default(),
    }
}

/// The `[data]` and `[rollout]` tables; the vLLM options apart, of which only the server's
/// extra arguments change what is sampled (the rest is where the server runs).
fn rollout(o: &Options) -> deltarl_rollout::Settings {
    let mut rollout = o.rollout.clone();
    let vllm = std::mem::take(&mut rollout.vllm);
    rollout.vllm.extra_args = vllm.extra_args.clone();
    deltarl_rollout::Settings {
        seed: o.seed,
        data: o.data.clone(),
        rollout,
        dtype: o.model.dtype,
        vllm,
    }
}

fn score(o: &Options, r: &ByAlgorithmValues<'_>) -> deltarl_score::Settings {
    deltarl_score::Settings {
        advantage: r.advantage,
        overlong: r.overlong_penalty.then_some((
            o.rollout.max_new_tokens,
            o.score.overlong_buffer,
            o.score.overlong_factor,
        )),
        dynamic_sampling: o.score.dynamic_sampling,
        extract: o.score.extract,
        extract_fallbacks: o.score.extract_fallbacks.clone(),
        code: o.score.code.clone(),
    }
}

fn features(o: &Options, coeffs: &deltarl_coeffs::Settings) -> FeaturesSettings {
    let persist = match o.features.persist {
        Persist::Full => Stored::Full,
        Persist::Projected => Stored::Projected {
            dim: o.features.persist_dim,
        },
        Persist::None => Stored::None,
    };
    FeaturesSettings {
        pass: deltarl_features::Settings {
            seed: o.seed,
            proxy: o.features.proxy,
            project_dim: zero_is_off(o.features.project_dim),
            temperature: logprob_temperature(o.rollout.temperature),
            chunk_rows: o.features.chunk_rows,
            chunk_tokens: zero_is_off(o.features.chunk_tokens),
            head_chunk_bytes: o.model.head_chunk_bytes(),
            layout: o.model.layout,
            dtype: o.model.dtype,
        },
        persist,
        coeffs: (!persist.is_full()).then(|| coeffs.clone()),
    }
}

fn update(o: &Options, r: &ByAlgorithmValues<'_>) -> deltarl_update::Settings {
    let u = &o.update;
    deltarl_update::Settings {
        seed: o.seed,
        join: JoinSettings {
            old_logprobs: u.old_logprobs,
            tis_cap: (u.tis_cap > 0.0).then_some(u.tis_cap),
        },
        loss: LossSettings {
            surrogate: match u.surrogate {
                SurrogateKind::Clip => Surrogate::Clip,
                SurrogateKind::Cispo => Surrogate::Cispo { cap: u.cispo_cap },
                SurrogateKind::Sapo => Surrogate::Sapo {
                    tau_pos: u.sapo_temperature_pos,
                    tau_neg: u.sapo_temperature_neg,
                },
            },
            ratio: u.ratio,
            eps_low: u.eps_low,
            eps_high: r.eps_high,
            dual_clip: (u.dual_clip > 0.0).then_some(u.dual_clip),
            aggregation: r.aggregation,
            norm_len: o.rollout.max_new_tokens as f64,
            kl_coef: u.kl_coef,
            entropy_coef: u.entropy_coef,
            future_kl: u.fipo.settings(u.dual_clip),
        },
        optimizer_steps: u.optimizer_steps,
        micro_batch_rows: u.micro_batch_rows,
        micro_batch_tokens: zero_is_off(u.micro_batch_tokens),
        activation_checkpointing: u.activation_checkpointing,
        sharding: match (u.shard_optimizer, u.shard_gradients) {
            (false, _) => Sharding::Replicated,
            (true, false) => Sharding::Optimizer,
            (true, true) => Sharding::Gradients,
        },
        warmup_steps: u.warmup_steps,
        lr: u.lr,
        weight_decay: u.weight_decay,
        grad_clip: u.grad_clip,
        temperature: logprob_temperature(o.rollout.temperature),
        head_chunk_bytes: o.model.head_chunk_bytes(),
        layout: o.model.layout,
        dtype: o.model.dtype,
        shard_bytes: o.checkpoint.shard_mb.saturating_mul(1_000_000),
    }
}

/// How held-out answers are sampled: the rollout's prompt and length limits.
fn sampling(o: &Options) -> Sampling {
    Sampling {
        seed: o.seed,
        template: o.data.template.clone(),
        max_new_tokens: o.rollout.max_new_tokens,
        stop: o.rollout.stop.clone(),
        max_batch_rows: o.rollout.max_batch_rows,
        max_cache_tokens: zero_is_off(o.rollout.kv_cache_tokens),
        session_rows: zero_is_off(o.rollout.session_rows),
        extract: o.score.extract,
        extract_fallbacks: o.score.extract_fallbacks.clone(),
    }
}

fn eval(o: &Options) -> deltarl_eval::Settings {
    deltarl_eval::Settings {
        data_source: o.data.source.clone(),
        problems: o.eval.problems,
        samples: o.eval.samples,
        temperature: o.eval.temperature,
        top_p: o.eval.top_p,
        top_k: o.eval.top_k,
        sampling: sampling(o),
        dtype: o.model.dtype,
        benchmarks: o.eval.benchmarks.clone(),
        chat_template: o.data.chat_template,
        code: o.score.code.clone(),
        engine: o.rollout.engine,
        // Only with vLLM: our engine's hash has no server arguments.
        vllm: match o.rollout.engine {
            Engine::Native => Default::default(),
            Engine::Vllm => o.rollout.vllm.clone(),
        },
    }
}
