//! The range of every numeric key, in one table: its least and greatest value, what 0
//! means where 0 is outside the range, and why the bounds are where they are. The
//! configuration check walks this table; `deltarl config ranges` prints it; `config show`
//! fills in the keys it lists that serialisation skips at their default; and the sweep test
//! reads it, so a numeric key with no row here fails that test.
//!
//! Bounds come from what the method and the numbers allow, not from inputs seen: a float
//! must be a normal number or exactly 0 (a subnormal such as 1e-320 passes "> 0" yet
//! overflows to infinity when divided into, or rounds to 0 in f32), and every value must
//! keep the quantities computed from it finite in the f32 the trainer computes in
//! (greatest finite f32: 3.4e38).

use super::options::Options;

/// A number as the configuration holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(u64),
    Float(f64),
}

/// Which end of a float range excludes its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    Neither,
    Below,
    Above,
}

/// A key's accepted values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// Whole numbers in `[least, greatest]`.
    Int { least: u64, greatest: u64 },
    /// Normal floats between `least` and `greatest` (ends as `open` says), and exactly 0
    /// as well when `zero_off` (0 then means "off", or "the default", as the key says).
    Float {
        least: f64,
        greatest: f64,
        open: Open,
        zero_off: bool,
    },
}

/// One numeric key.
pub struct Range {
    /// Dotted key, as in the TOML file and `--set`.
    pub key: &'static str,
    /// Its value in a configuration; `None` when it is unset and takes a default that
    /// depends on another key (`update.eps_high`), which `Resolved` checks once resolved.
    pub get: fn(&Options) -> Option<Number>,
    pub bound: Bound,
    /// Why the bounds are these.
    pub why: &'static str,
}

pub use deltarl_schemas::number::show;

impl Bound {
    /// Whether `value` is accepted.
    pub fn admits(&self, value: Number) -> bool {
        match (*self, value) {
            (Bound::Int { least, greatest }, Number::Int(v)) => (least..=greatest).contains(&v),
            (
                Bound::Float {
                    least,
                    greatest,
                    open,
                    zero_off,
                },
                Number::Float(v),
            ) => {
                if v == 0.0 && zero_off {
                    return true;
                }
                let above = match open {
                    Open::Below => v > least,
                    Open::Neither | Open::Above => v >= least,
                };
                let below = match open {
                    Open::Above => v < greatest,
                    Open::Neither | Open::Below => v <= greatest,
                };
                // A subnormal is refused even where the range reaches 0: it is what a
                // mistyped exponent gives, and it underflows to 0 in f32.
                (v == 0.0 || v.is_normal()) && above && below
            }
            // A whole number where a float is expected reads as that float.
            (b @ Bound::Float { .. }, Number::Int(v)) => b.admits(Number::Float(v as f64)),
            (Bound::Int { .. }, Number::Float(_)) => false,
        }
    }

    /// The accepted values in words: "1 to 1048576", "0 or [0.001, 100]".
    pub fn describe(&self) -> String {
        match *self {
            Bound::Int { least, greatest } => format!("{least} to {greatest}"),
            Bound::Float {
                least,
                greatest,
                open,
                zero_off,
            } => {
                let lo = match open {
                    Open::Below => "(",
                    Open::Neither | Open::Above => "[",
                };
                let hi = match open {
                    Open::Above => ")",
                    Open::Neither | Open::Below => "]",
                };
                let range = format!("{lo}{}, {}{hi}", show(least), show(greatest));
                if zero_off {
                    format!("0 or {range}")
                } else {
                    range
                }
            }
        }
    }
}

fn int(v: impl TryInto<u64>) -> Option<Number> {
    // usize, u32 and u16 always fit u64.
    Some(Number::Int(v.try_into().unwrap_or(u64::MAX)))
}

fn float(v: f64) -> Option<Number> {
    Some(Number::Float(v))
}

const fn ints(least: u64, greatest: u64) -> Bound {
    Bound::Int { least, greatest }
}

const fn floats(least: f64, greatest: f64) -> Bound {
    Bound::Float {
        least,
        greatest,
        open: Open::Neither,
        zero_off: false,
    }
}

/// `floats` where 0 is accepted and means off.
const fn off_or(least: f64, greatest: f64) -> Bound {
    Bound::Float {
        least,
        greatest,
        open: Open::Neither,
        zero_off: true,
    }
}

/// Sizes of one iteration's batch: past these an allocation fails, after the run is
/// recorded, instead of the key being named at load.
const SIZE: u64 = 1 << 20;
const TOKENS: u64 = 1 << 30;
const MAX_SEED: u64 = i64::MAX as u64;
/// Temperatures: below 1e-3 logits of f32 models (|logit| < 1e2) divided by T exceed
/// 1e5 and the draw is greedy to f32's precision anyway (write 0 for greedy); above 100
/// every token of a vocabulary under 1e5 is drawn within 1 % of uniformly.
const TEMPERATURE: Bound = off_or(1e-3, 100.0);
/// Nucleus mass: any p at or below the top token's probability keeps that token alone,
/// and the top token of a vocabulary under 1e6 has probability above 1e-6.
const TOP_P: Bound = floats(1e-6, 1.0);
/// Learning rates: AdamW moves each weight by about lr a step; below 1e-12 that is under
/// f32's resolution of any weight above 1e-5, above 1 the weights leave any trained scale.
const LR: Bound = floats(1e-12, 1.0);
/// DelTA's coefficient bounds: within [1e-3, 1e3] the normalised coefficients differ by at
/// most lam_max / lam_min = 1e6 (kept to 6 digits in f32), and the normalisation's sum over
/// at most 2^44 tokens (2^24 responses x 2^20 tokens) stays below 1.8e16, far from
/// overflow; at 1e308 that sum overflowed and every coefficient became 0.
const LAMBDA: Bound = floats(1e-3, 1e3);
/// Coefficients of a loss term (KL, entropy): each multiplies per-token terms of the
/// f32 loss; the field uses 1e-4..1e-1, and past 100 the term alone decides the update.
const LOSS_COEF: Bound = floats(0.0, 100.0);

/// Every numeric key. Keep in the order of `config show`.
pub const RANGES: &[Range] = &[
    Range {
        key: "seed",
        get: |o| int(o.seed),
        bound: ints(0, MAX_SEED),
        why: "TOML's largest integer",
    },
    Range {
        key: "checkpoint.shard_mb",
        get: |o| int(o.checkpoint.shard_mb),
        bound: ints(1, 1 << 30),
        why: "a shard of at most 1 PB",
    },
    Range {
        key: "checkpoint.keep_last",
        get: |o| int(o.checkpoint.keep_last),
        bound: ints(0, SIZE),
        why: "0 = all; iterations of one run",
    },
    Range {
        key: "checkpoint.save_every",
        get: |o| int(o.checkpoint.save_every),
        bound: ints(0, SIZE),
        why: "0 = none beyond keep_last; iterations of one run",
    },
    Range {
        key: "checkpoint.keep_features",
        get: |o| int(o.checkpoint.keep_features),
        bound: ints(0, SIZE),
        why: "0 = all; iterations of one run",
    },
    Range {
        key: "coeffs.ktae.alpha",
        get: |o| float(o.coeffs.ktae.alpha),
        bound: floats(0.0, 1e3),
        why: "a weight; with beta_ig it is normalised away, so only their ratio matters",
    },
    Range {
        key: "coeffs.ktae.beta_ig",
        get: |o| float(o.coeffs.ktae.beta_ig),
        bound: floats(0.0, 1e3),
        why: "as alpha; and alpha + beta_ig > 0",
    },
    Range {
        key: "coeffs.ktae.top",
        get: |o| float(o.coeffs.ktae.top),
        bound: floats(0.0, 100.0),
        why: "the largest score added to an advantage (0 = DAPO); group advantages are O(1)",
    },
    Range {
        key: "coeffs.lam_max",
        get: |o| float(o.coeffs.lam_max),
        bound: LAMBDA,
        why: "normalised coefficients within 1e6 of each other; the normalising sum finite",
    },
    Range {
        key: "coeffs.lam_min",
        get: |o| float(o.coeffs.lam_min),
        bound: LAMBDA,
        why: "as lam_max; and lam_min <= lam_max",
    },
    Range {
        key: "coeffs.oracle_value",
        get: |o| float(o.coeffs.oracle_value),
        bound: floats(0.0, 1e3),
        why: "0 removes the phrases' gradient; at most lam_max's bound relative to 1",
    },
    Range {
        key: "coeffs.refine_steps",
        get: |o| int(o.coeffs.refine_steps),
        bound: ints(0, 100),
        why: "the paper uses K = 1; each pass reads the features once more",
    },
    Range {
        key: "coeffs.top_entropy_keep",
        get: |o| float(o.coeffs.top_entropy_keep),
        bound: floats(1e-6, 1.0),
        why: "a fraction of the tokens; 1e-6 keeps one token of a million",
    },
    Range {
        key: "data.train_size",
        get: |o| int(o.data.train_size),
        bound: ints(0, 1 << 26),
        why: "generated problems; every built-in set is smaller",
    },
    Range {
        key: "eval.every",
        get: |o| int(o.eval.every),
        bound: ints(0, SIZE),
        why: "0 = never; iterations of one run",
    },
    Range {
        key: "eval.problems",
        get: |o| int(o.eval.problems),
        bound: ints(0, 1 << 24),
        why: "0 = all",
    },
    Range {
        key: "eval.samples",
        get: |o| int(o.eval.samples),
        bound: ints(1, 1 << 12),
        why: "samples per problem, as rollout.samples_per_prompt",
    },
    Range {
        key: "eval.temperature",
        get: |o| float(o.eval.temperature),
        bound: TEMPERATURE,
        why: "0 = greedy; as rollout.temperature",
    },
    Range {
        key: "eval.top_k",
        get: |o| int(o.eval.top_k),
        bound: ints(0, 1 << 24),
        why: "0 = off; a vocabulary is smaller",
    },
    Range {
        key: "eval.top_p",
        get: |o| float(o.eval.top_p),
        bound: TOP_P,
        why: "as rollout.top_p",
    },
    Range {
        key: "features.chunk_rows",
        get: |o| int(o.features.chunk_rows),
        bound: ints(1, SIZE),
        why: "responses per forward pass",
    },
    Range {
        key: "features.chunk_tokens",
        get: |o| int(o.features.chunk_tokens),
        bound: ints(0, TOKENS),
        why: "0 = no limit",
    },
    Range {
        key: "features.project_dim",
        get: |o| int(o.features.project_dim),
        bound: ints(0, SIZE),
        why: "0 = never; a model's width is smaller",
    },
    Range {
        key: "features.persist_dim",
        get: |o| int(o.features.persist_dim),
        bound: ints(1, SIZE),
        why: "the sketch's dimensions",
    },
    Range {
        key: "model.head_chunk_mb",
        get: |o| int(o.model.head_chunk_mb),
        bound: ints(0, 1 << 24),
        why: "0 = the whole pass; at most 16 TB",
    },
    Range {
        key: "model.threads",
        get: |o| int(o.model.threads),
        bound: ints(0, 1 << 12),
        why: "0 = all cores",
    },
    Range {
        key: "model.tiny.hidden_size",
        get: |o| int(o.model.tiny.hidden_size),
        bound: ints(1, 1 << 16),
        why: "wider than any published model",
    },
    Range {
        key: "model.tiny.intermediate_size",
        get: |o| int(o.model.tiny.intermediate_size),
        bound: ints(1, 1 << 18),
        why: "as hidden_size",
    },
    Range {
        key: "model.tiny.max_position_embeddings",
        get: |o| int(o.model.tiny.max_position_embeddings),
        bound: ints(1, SIZE),
        why: "context length",
    },
    Range {
        key: "model.tiny.num_attention_heads",
        get: |o| int(o.model.tiny.num_attention_heads),
        bound: ints(1, 1 << 10),
        why: "and dividing hidden_size",
    },
    Range {
        key: "model.tiny.num_hidden_layers",
        get: |o| int(o.model.tiny.num_hidden_layers),
        bound: ints(1, 1 << 10),
        why: "deeper than any published model",
    },
    Range {
        key: "model.tiny.num_key_value_heads",
        get: |o| int(o.model.tiny.num_key_value_heads),
        bound: ints(1, 1 << 10),
        why: "and dividing num_attention_heads",
    },
    Range {
        key: "rollout.kv_cache_tokens",
        get: |o| int(o.rollout.kv_cache_tokens),
        bound: ints(0, 1 << 40),
        why: "0 = no limit; and holding one response",
    },
    Range {
        key: "rollout.max_batch_rows",
        get: |o| int(o.rollout.max_batch_rows),
        bound: ints(1, SIZE),
        why: "rows decoded together",
    },
    Range {
        key: "rollout.max_new_tokens",
        get: |o| int(o.rollout.max_new_tokens),
        bound: ints(1, SIZE),
        why: "a response's length",
    },
    Range {
        key: "rollout.max_prompt_tokens",
        get: |o| int(o.rollout.max_prompt_tokens),
        bound: ints(0, SIZE),
        why: "0 = no limit",
    },
    Range {
        key: "rollout.prompts_per_iter",
        get: |o| int(o.rollout.prompts_per_iter),
        bound: ints(1, SIZE),
        why: "and prompts x samples at most 2^24 responses",
    },
    Range {
        key: "rollout.samples_per_prompt",
        get: |o| int(o.rollout.samples_per_prompt),
        bound: ints(1, 1 << 12),
        why: "the group size G",
    },
    Range {
        key: "rollout.session_rows",
        get: |o| int(o.rollout.session_rows),
        bound: ints(0, TOKENS),
        why: "0 = one session",
    },
    Range {
        key: "rollout.temperature",
        get: |o| float(o.rollout.temperature),
        bound: TEMPERATURE,
        why: "0 = greedy; below 1e-3 f32 logits / T pass 1e5 and the draw is greedy anyway; \
              above 100 it is uniform to 1 %",
    },
    Range {
        key: "rollout.top_k",
        get: |o| int(o.rollout.top_k),
        bound: ints(0, 1 << 24),
        why: "0 = off; a vocabulary is smaller",
    },
    Range {
        key: "rollout.top_p",
        get: |o| float(o.rollout.top_p),
        bound: TOP_P,
        why: "1 = off; below 1e-6 it keeps the top token of any vocabulary under 1e6, as 1e-6 does",
    },
    Range {
        key: "rollout.vllm.concurrency",
        get: |o| int(o.rollout.vllm.concurrency),
        bound: ints(0, SIZE),
        why: "0 = every prompt at once",
    },
    Range {
        key: "rollout.vllm.port",
        get: |o| int(o.rollout.vllm.port),
        bound: ints(0, 65535),
        why: "0 = a free one",
    },
    Range {
        key: "rollout.vllm.probe_tolerance",
        get: |o| float(o.rollout.vllm.probe_tolerance),
        bound: off_or(1e-9, 10.0),
        why: "0 = the dtype's default; a log-prob difference above 10 checks nothing",
    },
    Range {
        key: "rollout.vllm.start_timeout_s",
        get: |o| int(o.rollout.vllm.start_timeout_s),
        bound: ints(0, 86_400),
        why: "0 = 600; at most a day",
    },
    Range {
        key: "score.overlong_buffer",
        get: |o| int(o.score.overlong_buffer),
        bound: ints(0, SIZE),
        why: "and smaller than rollout.max_new_tokens",
    },
    Range {
        key: "score.overlong_factor",
        get: |o| float(o.score.overlong_factor),
        bound: floats(0.0, 100.0),
        why: "DAPO uses 1, the scale of the correctness reward; past 100 the penalty alone \
              decides every advantage (at 1e308 the group's mean overflowed to NaN)",
    },
    Range {
        key: "score.code.case_timeout_s",
        get: |o| float(o.score.code.case_timeout_s),
        bound: floats(0.01, 3600.0),
        why: "seconds; no program starts in under 10 ms, so every case would time out",
    },
    Range {
        key: "score.code.memory_mb",
        get: |o| int(o.score.code.memory_mb),
        bound: ints(64, 1 << 20),
        why: "MiB; and at most this machine's memory, where the limit would never bind",
    },
    Range {
        key: "score.code.run_timeout_s",
        get: |o| float(o.score.code.run_timeout_s),
        bound: floats(0.01, 3600.0),
        why: "seconds, as case_timeout_s",
    },
    Range {
        key: "score.code.workers",
        get: |o| int(o.score.code.workers),
        bound: ints(1, deltarl_sandbox::SLOTS as u64),
        why: "the sandbox's user ids per process",
    },
    Range {
        key: "update.cispo_cap",
        get: |o| float(o.update.cispo_cap),
        bound: floats(1.0, 1e3),
        why: "CISPO's cap on the ratio: below 1 it would shrink on-policy tokens' gradient",
    },
    Range {
        key: "update.dual_clip",
        get: |o| float(o.update.dual_clip),
        bound: Bound::Float {
            least: 1.0,
            greatest: 1e3,
            open: Open::Below,
            zero_off: true,
        },
        why: "0 = off; the bound on -ratio x A for A < 0 must exceed 1 (the paper's 3, verl's 3)",
    },
    Range {
        key: "update.entropy_coef",
        get: |o| float(o.update.entropy_coef),
        bound: LOSS_COEF,
        why: "0 = off; a loss term's coefficient in f32",
    },
    Range {
        key: "update.eps_high",
        get: |o| o.update.eps_high.value().map(Number::Float),
        bound: floats(0.0, 10.0),
        why: "unset = 0.28 with clip-higher, else eps_low; beyond 10 the clip never binds",
    },
    Range {
        key: "update.eps_low",
        get: |o| float(o.update.eps_low),
        bound: Bound::Float {
            least: 0.0,
            greatest: 1.0,
            open: Open::Above,
            zero_off: false,
        },
        why: "the ratio's floor 1 - eps_low must stay positive",
    },
    Range {
        key: "update.fipo.clip_range",
        get: |o| float(o.update.fipo.clip_range),
        bound: Bound::Float {
            least: 0.0,
            greatest: 1.0,
            open: Open::Above,
            zero_off: false,
        },
        why: "the weight's clip [1 - r, 1 + r], 0 = none (as FIPO reads 0): below 1, > 0",
    },
    Range {
        key: "update.fipo.decay_rate",
        get: |o| float(o.update.fipo.decay_rate),
        bound: Bound::Float {
            least: 1e-2,
            greatest: 1e7,
            open: Open::Neither,
            zero_off: true,
        },
        why: "0 = off; tokens at which a later one counts half: from the next token to any length",
    },
    Range {
        key: "update.fipo.safety_threshold",
        get: |o| float(o.update.fipo.safety_threshold),
        bound: Bound::Float {
            least: 1.0,
            greatest: 1e3,
            open: Open::Neither,
            zero_off: true,
        },
        why: "0 = off; a ratio: below 1 it would clamp on-policy tokens",
    },
    Range {
        key: "update.grad_clip",
        get: |o| float(o.update.grad_clip),
        bound: off_or(1e-6, 1e6),
        why: "0 = off; the scale clip / norm stays finite in f32 for any norm above 1e-32",
    },
    Range {
        key: "update.kl_coef",
        get: |o| float(o.update.kl_coef),
        bound: LOSS_COEF,
        why: "0 = off; a loss term's coefficient in f32",
    },
    Range {
        key: "update.lr",
        get: |o| float(o.update.lr),
        bound: LR,
        why: "below 1e-12 a step is under f32's resolution of the weights",
    },
    Range {
        key: "update.micro_batch_rows",
        get: |o| int(o.update.micro_batch_rows),
        bound: ints(1, SIZE),
        why: "responses per pass",
    },
    Range {
        key: "update.micro_batch_tokens",
        get: |o| int(o.update.micro_batch_tokens),
        bound: ints(0, TOKENS),
        why: "0 = no limit",
    },
    Range {
        key: "update.optimizer_steps",
        get: |o| int(o.update.optimizer_steps),
        bound: ints(1, SIZE),
        why: "mini-batches per iteration",
    },
    Range {
        key: "update.sapo_temperature_neg",
        get: |o| float(o.update.sapo_temperature_neg),
        bound: floats(1e-2, 100.0),
        why: "SAPO's gate is sigmoid(tau (rho - 1)) 4 / tau: the papers' values are near 1",
    },
    Range {
        key: "update.sapo_temperature_pos",
        get: |o| float(o.update.sapo_temperature_pos),
        bound: floats(1e-2, 100.0),
        why: "as sapo_temperature_neg",
    },
    Range {
        key: "update.tis_cap",
        get: |o| float(o.update.tis_cap),
        bound: off_or(1.0, 1e3),
        why: "0 = off; a cap below 1 would down-weight tokens where sampler and trainer agree",
    },
    Range {
        key: "update.warmup_steps",
        get: |o| int(o.update.warmup_steps),
        bound: ints(0, 1 << 40),
        why: "optimizer steps",
    },
    Range {
        key: "update.weight_decay",
        get: |o| float(o.update.weight_decay),
        bound: floats(0.0, 1.0),
        why: "a step shrinks the weights by lr x weight_decay (AdamW's 0.01, DAPO's 0.1)",
    },
    Range {
        key: "warmstart.batch_size",
        get: |o| int(o.warmstart.batch_size),
        bound: ints(1, SIZE),
        why: "examples per step",
    },
    Range {
        key: "warmstart.digit_weight",
        get: |o| float(o.warmstart.digit_weight),
        bound: floats(1e-3, 1e3),
        why: "relative to 1 on other tokens, within 1e3 either way as coefficients are",
    },
    Range {
        key: "warmstart.lr",
        get: |o| float(o.warmstart.lr),
        bound: LR,
        why: "as update.lr",
    },
    Range {
        key: "warmstart.steps",
        get: |o| int(o.warmstart.steps),
        bound: ints(0, TOKENS),
        why: "0 = no warm start",
    },
    Range {
        key: "warmstart.warmup_steps",
        get: |o| int(o.warmstart.warmup_steps),
        bound: ints(0, TOKENS),
        why: "optimizer steps",
    },
    Range {
        key: "warmstart.wrong_frac",
        get: |o| float(o.warmstart.wrong_frac),
        bound: floats(0.0, 1.0),
        why: "a fraction",
    },
];

/// A command-line float in `bound`, the message saying the accepted values.
fn arg_in(bound: Bound, text: &str) -> Result<f64, String> {
    let x: f64 = text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
    if bound.admits(Number::Float(x)) {
        Ok(x)
    } else {
        Err(format!("{}: must be {}", show(x), bound.describe()))
    }
}

/// `--temperature` of `eval` and `generate`: the range of `rollout.temperature`.
pub fn temperature_arg(text: &str) -> Result<f64, String> {
    arg_in(TEMPERATURE, text)
}

/// `--top-p` of `eval` and `generate`: the range of `rollout.top_p`.
pub fn top_p_arg(text: &str) -> Result<f64, String> {
    arg_in(TOP_P, text)
}

/// The row of `key`.
pub fn range(key: &str) -> Option<&'static Range> {
    RANGES.iter().find(|r| r.key == key)
}

/// A value outside its key's range.
#[derive(Debug)]
pub struct OutOfRange {
    pub key: &'static str,
    message: String,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OutOfRange {}

/// Checks every numeric key of `o` against its row; the error names the key, its value
/// and the range.
pub fn check(o: &Options) -> Result<(), OutOfRange> {
    for r in RANGES {
        let Some(value) = (r.get)(o) else { continue };
        if !r.bound.admits(value) {
            let shown = match value {
                Number::Int(v) => v.to_string(),
                Number::Float(v) if v != 0.0 && !v.is_normal() && v.is_finite() => {
                    format!("{} (subnormal)", show(v))
                }
                Number::Float(v) => show(v),
            };
            return Err(OutOfRange {
                key: r.key,
                message: format!(
                    "config key `{}` = {shown}: must be {} ({})",
                    r.key,
                    r.bound.describe(),
                    r.why
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
