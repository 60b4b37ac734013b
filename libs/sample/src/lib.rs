//! Sampling G responses per prompt with a policy, as the rollout draws its training samples
//! and the evaluation its held-out answers: each prompt rendered from a template, encoded
//! (left-truncated when asked) and each sample seeded by (run seed, iteration, stage,
//! prompt, sample), so a sample never depends on which other prompts share its batch; drawn
//! by our KV-cache decoder or a vLLM server ([`Engine`]), one [`RolloutRow`] per sample with
//! what the update needs (token ids, old log-probs, finish reason).
//!
//! [`evaluation`]: how a held-out evaluation samples ([`Sampling`], [`Draw`]).

pub mod evaluation;

pub use evaluation::{Draw, Sampling};

use deltarl_model::generate::{generate_part, Request, Sample, SampleSettings};
use deltarl_model::{Policy, Qwen3, Tokenizer};
use deltarl_schemas::seed::seed_for;
use deltarl_schemas::{render_template, PromptRow, RolloutRow, Shard, Stage};

/// What one iteration's rollout samples with: the prompt template (rendered with the
/// policy's chat template when asked), the sampling settings with the policy's end tokens,
/// and the seeds. Built each iteration from the stage's settings — the configuration's
/// `[data]` and `[rollout]` tables, which the application resolves and hashes — and the
/// policy folder; recorded in rollouts.parquet.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// Responses per prompt (G).
    pub samples_per_prompt: u32,
    /// Prompt template with a `{question}` placeholder.
    pub template: String,
    pub sampling: SampleSettings,
    pub run_seed: u64,
    pub iter: u32,
    /// The iteration whose policy samples (iter - 1; 0 = base).
    pub policy_iter: u32,
    /// The stage whose seeds the samples draw from: `Rollout` for training samples, `Eval`
    /// for held-out evaluation (so the two never share random streams).
    pub seed_stage: Stage,
    /// Longer prompts keep their last this many tokens (left truncation); None = no limit.
    pub max_prompt_tokens: Option<usize>,
    /// The part of the samples this process draws (our engine: batches r, r + N, ...;
    /// vLLM: prompts r, r + N, ...): which process does what changes no sample, so it is
    /// not a setting of the file.
    #[serde(skip)]
    pub shard: Shard,
}

/// Who generates the responses.
#[derive(Clone, Copy)]
pub enum Engine<'a> {
    /// Our KV-cache decoder on the policy's weights: per-sample seeds, byte-identical reruns.
    Native(&'a Qwen3),
    /// A vLLM server serving the policy's folder: `n = G` samples per request with one seed
    /// per prompt, `concurrency` requests in flight (None = every prompt at once).
    Vllm {
        client: &'a deltarl_vllm::Client,
        concurrency: Option<usize>,
    },
}

/// Errors of sampling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] deltarl_model::Error),
    #[error(transparent)]
    Vllm(#[from] deltarl_vllm::Error),
    #[error("prompt {id:?}: {message}")]
    Prompt { id: String, message: String },
    /// Our engine cannot serve the request of prompt `id` (too long, over the cache budget).
    #[error("prompt {id:?}: request {request}: {problem}")]
    Request {
        id: String,
        request: usize,
        problem: deltarl_model::RequestProblem,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Pure core with our own engine: prompts in, one row per (prompt, sample) out, in prompt
/// order (with a [`Shard`], the rows of its samples only, in the same order).
pub fn run(
    s: &Plan,
    policy: &Policy,
    prompts: &[PromptRow],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<RolloutRow>> {
    run_with(
        s,
        &policy.tokenizer,
        Engine::Native(&policy.model),
        prompts,
        progress,
    )
}

/// [`run`] with any engine; the tokenizer encodes the prompts and decodes the responses.
pub fn run_with(
    s: &Plan,
    tokenizer: &Tokenizer,
    engine: Engine<'_>,
    prompts: &[PromptRow],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<RolloutRow>> {
    let mut texts = Vec::with_capacity(prompts.len());
    let mut requests = Vec::with_capacity(prompts.len());
    for p in prompts {
        let text = render_template(&s.template, &p.problem);
        let mut ids = tokenizer.encode(&text).map_err(Error::from)?;
        if let Some(max) = s.max_prompt_tokens {
            // The end of a prompt (the question and the cue to answer) is what the
            // response continues, so the start goes.
            let cut = ids.len().saturating_sub(max);
            ids.drain(..cut);
        }
        if ids.is_empty() {
            return Err(Error::Prompt {
                id: p.id.clone(),
                message: "encodes to no tokens".into(),
            });
        }
        let seeds = (0..s.samples_per_prompt)
            .map(|k| seed_for(s.run_seed, s.iter, s.seed_stage.name(), &p.id, k))
            .collect();
        requests.push(Request {
            prompt_ids: ids,
            seeds,
        });
        texts.push(text);
    }
    let samples = match engine {
        Engine::Native(model) => native(model, tokenizer, &requests, s, prompts, progress)?,
        Engine::Vllm {
            client,
            concurrency,
        } => vllm(client, concurrency, &requests, s, prompts, progress)?,
    };
    let mut rows = Vec::with_capacity(prompts.len() * s.samples_per_prompt as usize);
    for ((p, req), (text, group)) in prompts
        .iter()
        .zip(&requests)
        .zip(texts.into_iter().zip(samples))
    {
        for (k, smp) in group {
            rows.push(RolloutRow {
                prompt_id: p.id.clone(),
                sample_idx: k as u32,
                prompt: text.clone(),
                prompt_token_ids: req.prompt_ids.clone(),
                response_text: tokenizer.decode(&smp.tokens)?,
                response_token_ids: smp.tokens,
                old_logprobs: smp.logprobs,
                finish_reason: smp.finish,
                policy_iter: s.policy_iter,
                gold: p.answer.clone(),
                data_source: p.data_source.clone(),
                reward_kind: p.reward_kind,
            });
        }
    }
    Ok(rows)
}

/// Our engine: every sample its own seed.
fn native(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    s: &Plan,
    prompts: &[PromptRow],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<(usize, Sample)>>> {
    generate_part(model, tokenizer, requests, &s.sampling, s.shard, progress).map_err(|e| match e {
        deltarl_model::Error::Request { request, problem } => Error::Request {
            // The engine names the request: the prompt of the same index.
            id: prompts
                .get(request)
                .map(|p| p.id.clone())
                .unwrap_or_default(),
            request,
            problem,
        },
        e => Error::Model(e),
    })
}

/// vLLM: one request of `n = G` samples per prompt of this shard, seeded by the prompt's
/// first sample seed (vLLM draws the G samples of a request from one seeded stream); the
/// other shards' prompts get no samples here.
fn vllm(
    client: &deltarl_vllm::Client,
    concurrency: Option<usize>,
    requests: &[Request],
    s: &Plan,
    prompts: &[PromptRow],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<(usize, Sample)>>> {
    let mine: Vec<usize> = (0..requests.len()).filter(|&i| s.shard.owns(i)).collect();
    let vllm_prompts: Vec<deltarl_vllm::Prompt> = mine
        .iter()
        .map(|&i| deltarl_vllm::Prompt {
            ids: requests[i].prompt_ids.clone(),
            seed: requests[i].seeds.first().copied().unwrap_or(0),
        })
        .collect();
    let sampling = deltarl_vllm::Sampling {
        temperature: s.sampling.temperature,
        top_p: s.sampling.top_p,
        top_k: s.sampling.top_k,
        max_tokens: s.sampling.max_new_tokens,
        stop_token_ids: s.sampling.eos_ids.clone(),
        stop: s.sampling.stop_strings.clone(),
        ignore_eos: false,
    };
    let done = std::sync::atomic::AtomicUsize::new(0);
    let out = deltarl_vllm::generate(
        client,
        &vllm_prompts,
        s.samples_per_prompt,
        &sampling,
        concurrency.unwrap_or(vllm_prompts.len()),
        &|k| {
            done.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
        },
    )
    .map_err(|e| match e {
        deltarl_vllm::Error::Request { prompt, message } => Error::Prompt {
            id: mine
                .get(prompt)
                .and_then(|&i| prompts.get(i))
                .map(|p| p.id.clone())
                .unwrap_or_default(),
            message,
        },
        e => Error::Vllm(e),
    })?;
    let rows = done.into_inner();
    progress(rows, 0);
    let mut groups: Vec<Vec<(usize, Sample)>> = vec![Vec::new(); requests.len()];
    for (&i, group) in mine.iter().zip(out) {
        groups[i] = group
            .into_iter()
            .map(|c| Sample {
                tokens: c.tokens,
                logprobs: c.logprobs,
                finish: c.finish,
            })
            .enumerate()
            .collect();
    }
    Ok(groups)
}
