//! The tables of one iteration: one row per response, keyed by (`prompt_id`, `sample_idx`),
//! except `update` (one row per optimizer step) and `eval` (one row per benchmark sample).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::arrays::{self, list_of, vectors_of, Columns};
use crate::{Error, Result};

/// A table with a fixed Arrow schema and a typed row.
pub trait Table: Sized + Send + Sync {
    /// The table's name, also the file stem (`rollouts` -> `rollouts.parquet`).
    const NAME: &'static str;

    /// The columns this table writes and every reader requires. `dim` is the vector
    /// dimension of `fixed_size_list` columns; readers accept any dimension.
    fn fields(dim: i32) -> Vec<Field>;

    /// Nullable columns added after files of this table were first written: a deltarl file
    /// without one reads as nulls there (every other column stays required).
    const ADDED: &'static [&'static str] = &[];

    /// The vector dimension of these rows (0 for tables without vectors).
    fn dim(_rows: &[Self]) -> Result<i32> {
        Ok(0)
    }

    fn schema(dim: i32) -> Schema {
        Schema::new(Self::fields(dim))
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch>;

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>>;
}

pub(crate) fn batch(
    name: &str,
    schema: Schema,
    cols: Vec<arrow::array::ArrayRef>,
) -> Result<RecordBatch> {
    RecordBatch::try_new(Arc::new(schema), cols).map_err(|e| Error::Build {
        table: name.to_string(),
        message: e.to_string(),
    })
}

pub(crate) fn f(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, false)
}

fn nullable(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, true)
}

/// Why generation of a response ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// Stopped on the end-of-sequence token or a stop string.
    Stop,
    /// Hit the maximum number of new tokens.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }

    fn parse(s: &str, file: &str, row: usize) -> Result<Self> {
        match s {
            "stop" => Ok(FinishReason::Stop),
            "length" => Ok(FinishReason::Length),
            other => Err(Error::Value {
                file: file.to_string(),
                column: "finish_reason".into(),
                row,
                message: format!("unknown finish reason {other:?} (expected stop or length)"),
            }),
        }
    }
}

/// One input problem.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRow {
    pub id: String,
    pub problem: String,
    pub answer: String,
    pub data_source: Option<String>,
    /// The system turn of a chat-format prompt (verl's and TRL's message lists), passed to
    /// the chat template before the question when one is applied.
    pub system: Option<String>,
}

impl Table for PromptRow {
    const NAME: &'static str = "prompts";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("id", DataType::Utf8),
            f("problem", DataType::Utf8),
            f("answer", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
            nullable("system", DataType::Utf8),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.id.as_str())),
                arrays::strings(rows.iter().map(|r| r.problem.as_str())),
                arrays::strings(rows.iter().map(|r| r.answer.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
                arrays::opt_strings(rows.iter().map(|r| r.system.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let (id, problem, answer) = (c.str("id")?, c.str("problem")?, c.str("answer")?);
        let (source, system) = (c.opt_str("data_source")?, c.opt_str("system")?);
        Ok(id
            .into_iter()
            .zip(problem)
            .zip(answer)
            .zip(source)
            .zip(system)
            .map(
                |((((id, problem), answer), data_source), system)| PromptRow {
                    id,
                    problem,
                    answer,
                    data_source,
                    system,
                },
            )
            .collect())
    }
}

/// One sampled response (rollouts.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub prompt: String,
    pub prompt_token_ids: Vec<u32>,
    pub response_token_ids: Vec<u32>,
    pub response_text: String,
    /// Log-probability of each response token under the sampling policy at the
    /// sampling temperature.
    pub old_logprobs: Vec<f32>,
    pub finish_reason: FinishReason,
    /// The iteration whose policy sampled this response (0 = base).
    pub policy_iter: u32,
    /// The gold answer, carried so that `score` needs only this file.
    pub gold: String,
    /// The prompt's `data_source` (verl's column), carried for per-source breakdowns.
    pub data_source: Option<String>,
}

impl Table for RolloutRow {
    const NAME: &'static str = "rollouts";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("prompt", DataType::Utf8),
            f("prompt_token_ids", list_of(DataType::UInt32)),
            f("response_token_ids", list_of(DataType::UInt32)),
            f("response_text", DataType::Utf8),
            f("old_logprobs", list_of(DataType::Float32)),
            f("finish_reason", DataType::Utf8),
            f("policy_iter", DataType::UInt32),
            f("gold", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["data_source"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        for (i, r) in rows.iter().enumerate() {
            if r.old_logprobs.len() != r.response_token_ids.len() {
                return Err(Error::Build {
                    table: Self::NAME.into(),
                    message: format!(
                        "row {i}: {} old_logprobs for {} response tokens",
                        r.old_logprobs.len(),
                        r.response_token_ids.len()
                    ),
                });
            }
        }
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::strings(rows.iter().map(|r| r.prompt.as_str())),
                arrays::list_u32(rows.iter().map(|r| r.prompt_token_ids.as_slice())),
                arrays::list_u32(rows.iter().map(|r| r.response_token_ids.as_slice())),
                arrays::strings(rows.iter().map(|r| r.response_text.as_str())),
                arrays::list_f32(rows.iter().map(|r| r.old_logprobs.as_slice())),
                arrays::strings(rows.iter().map(|r| r.finish_reason.as_str())),
                arrays::u32s(rows.iter().map(|r| r.policy_iter)),
                arrays::strings(rows.iter().map(|r| r.gold.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let mut prompt = c.str("prompt")?;
        let mut prompt_ids = c.list_u32("prompt_token_ids")?;
        let mut response_ids = c.list_u32("response_token_ids")?;
        let mut text = c.str("response_text")?;
        let mut logprobs = c.list_f32("old_logprobs")?;
        let finish = c.str("finish_reason")?;
        let policy_iter = c.u32("policy_iter")?;
        let mut gold = c.str("gold")?;
        let mut source = c.opt_str("data_source")?;
        let mut out = Vec::with_capacity(prompt_id.len());
        for (i, pid) in prompt_id.into_iter().enumerate() {
            if logprobs[i].len() != response_ids[i].len() {
                return Err(Error::Value {
                    file: file.into(),
                    column: "old_logprobs".into(),
                    row: i,
                    message: format!(
                        "{} values for {} response tokens",
                        logprobs[i].len(),
                        response_ids[i].len()
                    ),
                });
            }
            out.push(RolloutRow {
                prompt_id: pid,
                sample_idx: sample_idx[i],
                prompt: std::mem::take(&mut prompt[i]),
                prompt_token_ids: std::mem::take(&mut prompt_ids[i]),
                response_token_ids: std::mem::take(&mut response_ids[i]),
                response_text: std::mem::take(&mut text[i]),
                old_logprobs: std::mem::take(&mut logprobs[i]),
                finish_reason: FinishReason::parse(&finish[i], file, i)?,
                policy_iter: policy_iter[i],
                gold: std::mem::take(&mut gold[i]),
                data_source: source[i].take(),
            });
        }
        Ok(out)
    }
}

/// The verdict, reward and advantage of one response (scores.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub gold: String,
    /// The answer extracted from the response; null when none was found.
    pub extracted: Option<String>,
    pub correct: bool,
    /// Correctness reward plus the overlong penalty.
    pub reward: f32,
    /// The sequence advantage broadcast to every token of the response.
    pub advantage: f32,
    /// False when dynamic sampling dropped the response's group.
    pub kept: bool,
    pub response_len: u32,
    pub overlong_penalty: f32,
    /// The prompt's `data_source`, from the rollout.
    pub data_source: Option<String>,
}

impl Table for ScoreRow {
    const NAME: &'static str = "scores";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("gold", DataType::Utf8),
            nullable("extracted", DataType::Utf8),
            f("correct", DataType::Boolean),
            f("reward", DataType::Float32),
            f("advantage", DataType::Float32),
            f("kept", DataType::Boolean),
            f("response_len", DataType::UInt32),
            f("overlong_penalty", DataType::Float32),
            nullable("data_source", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["data_source"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::strings(rows.iter().map(|r| r.gold.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.extracted.as_deref())),
                arrays::bools(rows.iter().map(|r| r.correct)),
                arrays::f32s(rows.iter().map(|r| r.reward)),
                arrays::f32s(rows.iter().map(|r| r.advantage)),
                arrays::bools(rows.iter().map(|r| r.kept)),
                arrays::u32s(rows.iter().map(|r| r.response_len)),
                arrays::f32s(rows.iter().map(|r| r.overlong_penalty)),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let gold = c.str("gold")?;
        let extracted = c.opt_str("extracted")?;
        let correct = c.bool("correct")?;
        let reward = c.f32("reward")?;
        let advantage = c.f32("advantage")?;
        let kept = c.bool("kept")?;
        let response_len = c.u32("response_len")?;
        let penalty = c.f32("overlong_penalty")?;
        let source = c.opt_str("data_source")?;
        Ok(prompt_id
            .into_iter()
            .zip(gold)
            .zip(extracted)
            .zip(source)
            .enumerate()
            .map(
                |(i, (((prompt_id, gold), extracted), data_source))| ScoreRow {
                    prompt_id,
                    sample_idx: sample_idx[i],
                    gold,
                    extracted,
                    correct: correct[i],
                    reward: reward[i],
                    advantage: advantage[i],
                    kept: kept[i],
                    response_len: response_len[i],
                    overlong_penalty: penalty[i],
                    data_source,
                },
            )
            .collect())
    }
}

/// Per-token gradient proxies of one response (features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    /// The vector dimension `k` (after any projection).
    pub dim: u32,
    /// `tokens * dim` floats, token-major.
    pub features: Vec<f32>,
    /// Probability of each response token at the rollout temperature.
    pub token_prob: Vec<f32>,
    /// Log-probability of each response token at the rollout temperature.
    pub logprob: Vec<f32>,
    /// Entropy of the next-token distribution at each response position.
    pub entropy: Vec<f32>,
}

impl FeatureRow {
    pub fn tokens(&self) -> usize {
        self.token_prob.len()
    }

    pub fn vector(&self, t: usize) -> &[f32] {
        let d = self.dim as usize;
        &self.features[t * d..(t + 1) * d]
    }
}

impl Table for FeatureRow {
    const NAME: &'static str = "features";

    fn fields(dim: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("features", vectors_of(dim)),
            f("token_prob", list_of(DataType::Float32)),
            f("logprob", list_of(DataType::Float32)),
            f("entropy", list_of(DataType::Float32)),
        ]
    }

    fn dim(rows: &[Self]) -> Result<i32> {
        let dim = rows.first().map_or(0, |r| r.dim);
        for (i, r) in rows.iter().enumerate() {
            let n = r.token_prob.len();
            if r.dim != dim
                || r.features.len() != n * dim as usize
                || r.logprob.len() != n
                || r.entropy.len() != n
            {
                return Err(Error::Build {
                    table: Self::NAME.into(),
                    message: format!(
                        "row {i}: dim {} (table dim {dim}), {} floats, {} probs, {} logprobs, {} entropies",
                        r.dim,
                        r.features.len(),
                        n,
                        r.logprob.len(),
                        r.entropy.len()
                    ),
                });
            }
        }
        i32::try_from(dim).map_err(|_| Error::Build {
            table: Self::NAME.into(),
            message: format!("dimension {dim} too large"),
        })
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        let dim = Self::dim(rows)?;
        batch(
            Self::NAME,
            Self::schema(dim),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_vectors(dim as usize, rows.iter().map(|r| r.features.as_slice()))?,
                arrays::list_f32(rows.iter().map(|r| r.token_prob.as_slice())),
                arrays::list_f32(rows.iter().map(|r| r.logprob.as_slice())),
                arrays::list_f32(rows.iter().map(|r| r.entropy.as_slice())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let (dim, features) = c.list_vectors("features")?;
        let probs = c.list_f32("token_prob")?;
        let logprob = c.list_f32("logprob")?;
        let entropy = c.list_f32("entropy")?;
        let mut out = Vec::with_capacity(prompt_id.len());
        for (i, ((pid, feats), ((p, lp), e))) in prompt_id
            .into_iter()
            .zip(features)
            .zip(probs.into_iter().zip(logprob).zip(entropy))
            .enumerate()
        {
            if feats.len() != p.len() * dim || lp.len() != p.len() || e.len() != p.len() {
                return Err(Error::Value {
                    file: file.into(),
                    column: "features".into(),
                    row: i,
                    message: format!(
                        "{} vectors, {} probs, {} logprobs, {} entropies: lengths differ",
                        feats.len() / dim.max(1),
                        p.len(),
                        lp.len(),
                        e.len()
                    ),
                });
            }
            out.push(FeatureRow {
                prompt_id: pid,
                sample_idx: sample_idx[i],
                dim: dim as u32,
                features: feats,
                token_prob: p,
                logprob: lp,
                entropy: e,
            });
        }
        Ok(out)
    }
}

/// The final, normalised token coefficients of one response (coeffs.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct CoeffRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    /// One coefficient per response token (same length as `response_token_ids`).
    pub coeff: Vec<f32>,
    /// The sequence advantage the coefficients multiply.
    pub advantage: f32,
}

impl Table for CoeffRow {
    const NAME: &'static str = "coeffs";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("coeff", list_of(DataType::Float32)),
            f("advantage", DataType::Float32),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_f32(rows.iter().map(|r| r.coeff.as_slice())),
                arrays::f32s(rows.iter().map(|r| r.advantage)),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let coeff = c.list_f32("coeff")?;
        let adv = c.f32("advantage")?;
        Ok(prompt_id
            .into_iter()
            .zip(coeff)
            .enumerate()
            .map(|(i, (prompt_id, coeff))| CoeffRow {
                prompt_id,
                sample_idx: sample_idx[i],
                coeff,
                advantage: adv[i],
            })
            .collect())
    }
}

/// One optimizer step (update.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateRow {
    pub step: u32,
    pub loss: f64,
    /// Fraction of tokens whose ratio was clipped.
    pub clip_frac: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Mean token entropy of the current policy on the mini-batch.
    pub entropy: f64,
    pub tokens: u64,
    pub lr: f64,
    /// Mean k3 KL to the base policy (0 when KL is off).
    pub kl: f64,
    /// Mean |log pi - log pi_old| over tokens.
    pub approx_kl_old: f64,
}

impl Table for UpdateRow {
    const NAME: &'static str = "update";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("step", DataType::UInt32),
            f("loss", DataType::Float64),
            f("clip_frac", DataType::Float64),
            f("grad_norm", DataType::Float64),
            f("entropy", DataType::Float64),
            f("tokens", DataType::UInt64),
            f("lr", DataType::Float64),
            f("kl", DataType::Float64),
            f("approx_kl_old", DataType::Float64),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::u32s(rows.iter().map(|r| r.step)),
                arrays::f64s(rows.iter().map(|r| r.loss)),
                arrays::f64s(rows.iter().map(|r| r.clip_frac)),
                arrays::f64s(rows.iter().map(|r| r.grad_norm)),
                arrays::f64s(rows.iter().map(|r| r.entropy)),
                arrays::u64s(rows.iter().map(|r| r.tokens)),
                arrays::f64s(rows.iter().map(|r| r.lr)),
                arrays::f64s(rows.iter().map(|r| r.kl)),
                arrays::f64s(rows.iter().map(|r| r.approx_kl_old)),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let step = c.u32("step")?;
        let loss = c.f64("loss")?;
        let clip = c.f64("clip_frac")?;
        let gn = c.f64("grad_norm")?;
        let ent = c.f64("entropy")?;
        let tokens = c.u64("tokens")?;
        let lr = c.f64("lr")?;
        let kl = c.f64("kl")?;
        let akl = c.f64("approx_kl_old")?;
        Ok((0..step.len())
            .map(|i| UpdateRow {
                step: step[i],
                loss: loss[i],
                clip_frac: clip[i],
                grad_norm: gn[i],
                entropy: ent[i],
                tokens: tokens[i],
                lr: lr[i],
                kl: kl[i],
                approx_kl_old: akl[i],
            })
            .collect())
    }
}

/// One sampled answer to one benchmark problem (eval.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct EvalRow {
    pub benchmark: String,
    pub problem_id: String,
    pub sample_idx: u32,
    pub correct: bool,
    pub response_len: u32,
    pub extracted: Option<String>,
    pub finish_reason: FinishReason,
    /// The problem's `data_source`, for per-source breakdowns of a benchmark.
    pub data_source: Option<String>,
}

impl Table for EvalRow {
    const NAME: &'static str = "eval";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("benchmark", DataType::Utf8),
            f("problem_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("correct", DataType::Boolean),
            f("response_len", DataType::UInt32),
            nullable("extracted", DataType::Utf8),
            f("finish_reason", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["data_source"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.benchmark.as_str())),
                arrays::strings(rows.iter().map(|r| r.problem_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::bools(rows.iter().map(|r| r.correct)),
                arrays::u32s(rows.iter().map(|r| r.response_len)),
                arrays::opt_strings(rows.iter().map(|r| r.extracted.as_deref())),
                arrays::strings(rows.iter().map(|r| r.finish_reason.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let bench = c.str("benchmark")?;
        let mut source = c.opt_str("data_source")?;
        let pid = c.str("problem_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let correct = c.bool("correct")?;
        let len = c.u32("response_len")?;
        let extracted = c.opt_str("extracted")?;
        let finish = c.str("finish_reason")?;
        let mut out = Vec::with_capacity(bench.len());
        for (i, ((benchmark, problem_id), extracted)) in
            bench.into_iter().zip(pid).zip(extracted).enumerate()
        {
            out.push(EvalRow {
                benchmark,
                problem_id,
                sample_idx: sample_idx[i],
                correct: correct[i],
                response_len: len[i],
                extracted,
                finish_reason: FinishReason::parse(&finish[i], file, i)?,
                data_source: source[i].take(),
            });
        }
        Ok(out)
    }
}
