//! Batched sampling with a preallocated KV cache and continuous batching.
//!
//! The requests (one prompt, G samples each) are cut, in request order, into sessions of
//! at most `session_rows` samples ([`crate::sessions`]). Processes share sessions out (session i to process
//! i mod N) and one process runs them one after another, so N processes draw exactly the
//! samples one process draws. A session decodes through `slots` rows of a preallocated
//! cache ([`SlotCache`]): every row in flight advances one token a step, in one batch
//! whatever its prompt's length (each row at its own position), so the weights are read
//! once a step for all of them; when a row finishes, its slot goes to the next waiting
//! sample at once. A group's prompt is prefilled once, before its first sample enters
//! (prompts of one length entering together share a pass), and copied into its samples'
//! slots.
//!
//! The schedule (which sample sits in which slot at which step) is a function of the
//! requests, the settings and the sampled tokens only, never of timing, so reruns are
//! byte-identical. Every row draws from its own generator, seeded by the caller from (run
//! seed, iteration, prompt id, sample index), so which other rows share its steps changes
//! a sample only through float round-off of the batched arithmetic. Log-probabilities are
//! recorded under the full distribution at the sampling temperature (before top-k / top-p
//! truncation), which is what the update's ratio uses.
//!
//! Sampling itself (temperature, top-k, top-p, the draw): see [`crate::sample`].

use std::collections::{BTreeMap, VecDeque};

use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FinishReason, Shard};
use tch::{Device, Kind, Tensor};

pub use crate::sample::{logprob_temperature, sample_on_device, SampleSettings, Sampler};
pub use crate::sessions::Request;
use crate::sessions::{plan_sessions, Session};
use crate::slots::{KvCache, SlotCache};
use crate::{Error, Qwen3, RequestProblem, Result, StopScanner, Tokenizer};

/// One generated response.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
}

/// A sample in flight; row r of a decoding step sits in slot r.
struct Row {
    /// Index of its slice in the session.
    slice: usize,
    /// Its sample index within the request.
    sample: usize,
    rng: Rng,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    finish: Option<FinishReason>,
    stop: StopScanner,
}

fn ids_tensor(ids: &[Vec<u32>], device: Device) -> Tensor {
    let flat: Vec<i64> = ids.iter().flatten().map(|&x| i64::from(x)).collect();
    Tensor::from_slice(&flat)
        .view([ids.len() as i64, ids.first().map_or(0, Vec::len) as i64])
        .to_device(device)
}

/// Last-position logits of a [R, T] batch: [R, V] f32, on the model's device.
fn last_logits(model: &Qwen3, hidden: &Tensor) -> Tensor {
    let t = hidden.size()[1];
    model
        .logits(&hidden.narrow(1, t - 1, 1).squeeze_dim(1))
        .to_kind(Kind::Float)
}

/// Prefills the prompts of the slices among `entering` (the waiting samples the free
/// slots take next) that have none yet, into `prefilled`. Prompts of one length share a
/// pass, of at most max(slots / length, 1) prompts, so no pass holds more positions than a
/// decoding step has rows. Which prompts share a pass follows from the schedule alone, so
/// reruns are byte-identical; a prompt's cache from a shared pass differs from its own
/// pass's by float round-off of the batched matrix products at most.
fn prefill_entering<'a>(
    model: &Qwen3,
    requests: &[Request],
    session: &Session,
    entering: impl Iterator<Item = &'a (usize, usize)>,
    prefilled: &mut BTreeMap<usize, (KvCache, Tensor)>,
) {
    let device = model.lm_head_weight().device();
    // 1. The slices to prefill, by prompt length, each length in order of entry.
    let mut by_len: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(si, _) in entering {
        let len = requests[session.slices[si].request].prompt_ids.len();
        let same = by_len.entry(len).or_default();
        if !prefilled.contains_key(&si) && !same.contains(&si) {
            same.push(si);
        }
    }
    // 2. One pass per chunk: [B, L] -> caches [B, kv_heads, L, d] a layer and last logits
    //    [B, V], cut into one row per slice.
    for (len, slices) in by_len {
        for chunk in slices.chunks((session.slots / len.max(1)).max(1)) {
            let prompts: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&si| requests[session.slices[si].request].prompt_ids.clone())
                .collect();
            let mut kv = KvCache::new(model.config.num_hidden_layers);
            let hidden = model.hidden(&ids_tensor(&prompts, device), Some(&mut kv));
            let first = last_logits(model, &hidden);
            for (b, &si) in (0i64..).zip(chunk) {
                prefilled.insert(si, (kv.row(b), first.narrow(0, b, 1)));
            }
        }
    }
}

/// Generates `seeds.len()` samples for every request. `progress(rows_done, tokens)` is
/// called as rows finish.
pub fn generate(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    s: &SampleSettings,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Sample>>> {
    let part = generate_part(model, tokenizer, requests, s, Shard::WHOLE, progress)?;
    // One process makes every sample of a request, in sample order.
    Ok(part
        .into_iter()
        .map(|g| g.into_iter().map(|(_, smp)| smp).collect())
        .collect())
}

/// [`generate`]'s share of one of several processes: the sessions `shard` owns, cut as
/// one process cuts them (so each sample is bit for bit the one a single process draws).
/// Per request, the samples made here with their sample indices, in order.
pub fn generate_part(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    s: &SampleSettings,
    shard: Shard,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<(usize, Sample)>>> {
    let device = model.lm_head_weight().device();
    let ctx = model.max_positions() as usize;
    for (i, r) in requests.iter().enumerate() {
        if r.prompt_ids.is_empty() {
            return Err(Error::Request {
                request: i,
                problem: RequestProblem::EmptyPrompt,
            });
        }
        if r.prompt_ids.len() + s.max_new_tokens > ctx {
            return Err(Error::Request {
                request: i,
                problem: RequestProblem::TooLong {
                    prompt: r.prompt_ids.len(),
                    max_new_tokens: s.max_new_tokens,
                    context: ctx,
                },
            });
        }
    }
    if s.max_new_tokens == 0 {
        // Nothing to sample: every sample is empty, cut at its length (made by the process
        // that owns the first session).
        return Ok(requests
            .iter()
            .map(|r| {
                (0..r.seeds.len())
                    .filter(|_| shard.owns(0))
                    .map(|k| {
                        let empty = Sample {
                            tokens: Vec::new(),
                            logprobs: Vec::new(),
                            finish: FinishReason::Length,
                        };
                        (k, empty)
                    })
                    .collect()
            })
            .collect());
    }
    let sessions = plan_sessions(requests, s)?;
    let mut out: Vec<Vec<(usize, Sample)>> = requests.iter().map(|_| Vec::new()).collect();
    let (mut done_rows, mut tokens) = (0, 0);
    for (i, session) in sessions.iter().enumerate() {
        if !shard.owns(i) {
            continue;
        }
        let mut emit = |request: usize, sample: usize, smp: Sample| {
            done_rows += 1;
            tokens += smp.tokens.len();
            out[request].push((sample, smp));
            progress(done_rows, tokens);
        };
        tch::no_grad(|| run_session(model, tokenizer, requests, session, s, device, &mut emit))?;
    }
    // Rows finish in any order: each request's samples in sample order.
    for group in &mut out {
        group.sort_by_key(|(k, _)| *k);
    }
    Ok(out)
}

/// Decodes every sample of `session`, handing each to `emit(request, sample, _)` as it
/// finishes.
fn run_session(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    session: &Session,
    s: &SampleSettings,
    device: Device,
    emit: &mut dyn FnMut(usize, usize, Sample),
) -> Result<()> {
    let w = model.lm_head_weight();
    let mut cache = SlotCache::new(
        &model.config,
        (w.kind(), w.device()),
        session.slots,
        session.capacity,
    );
    let mut waiting: VecDeque<(usize, usize)> = session
        .slices
        .iter()
        .enumerate()
        .flat_map(|(si, x)| x.samples.clone().map(move |k| (si, k)))
        .collect();
    // Rows in flight (row r in slot r), each row's position (its cached length), the
    // token each will feed next, and the logits of each row's next draw (row r in row r of
    // a buffer allocated once).
    let mut rows: Vec<Row> = Vec::with_capacity(session.slots);
    let mut pos: Vec<i64> = Vec::with_capacity(session.slots);
    let mut next: Vec<i64> = Vec::with_capacity(session.slots);
    let vocab = model.lm_head_weight().size()[0];
    let logits = Tensor::zeros([session.slots as i64, vocab], (Kind::Float, device));
    let mut sampler = Sampler::default();
    // The weights packed for this session's steps (CPU f32), decided by the model alone.
    let packed = model.pack();
    // The prompts prefilled and not yet copied into every one of their samples' slots:
    // slice -> (its cache, its last logits [1, V]).
    let mut prefilled: BTreeMap<usize, (KvCache, Tensor)> = BTreeMap::new();
    loop {
        // 1. Free slots take waiting samples; a group's prompt is prefilled once, before
        //    its first sample enters (the prompts entering together in shared passes), and
        //    copied into its samples' slots (those entering together in one copy).
        prefill_entering(
            model,
            requests,
            session,
            waiting.iter().take(session.slots - rows.len()),
            &mut prefilled,
        );
        while rows.len() < session.slots {
            let Some(&(si, _)) = waiting.front() else {
                break;
            };
            // The samples of slice si entering now: consecutive in `waiting`, as many as
            // the free slots take.
            let n = waiting
                .iter()
                .take(session.slots - rows.len())
                .take_while(|(s, _)| *s == si)
                .count();
            let request = session.slices[si].request;
            let prompt = &requests[request].prompt_ids;
            let Some((kv, first)) = prefilled.get(&si) else {
                return Err(Error::Generate(format!(
                    "request {request}: no prefill for its prompt"
                )));
            };
            let at = rows.len();
            cache.fill(at..at + n, kv);
            logits
                .narrow(0, at as i64, n as i64)
                .f_copy_(&first.expand([n as i64, -1], false))?;
            for (si, k) in waiting.drain(..n) {
                pos.push(prompt.len() as i64);
                next.push(0);
                rows.push(Row {
                    slice: si,
                    sample: k,
                    rng: Rng::new(requests[request].seeds[k]),
                    tokens: Vec::new(),
                    logprobs: Vec::new(),
                    finish: None,
                    stop: StopScanner::default(),
                });
            }
            // Every sample of the slice has a slot: its prefill is no longer needed.
            if waiting.front().map(|w| w.0) != Some(si) {
                prefilled.remove(&si);
            }
        }
        // Nothing in flight and nothing waiting: the session is done.
        if rows.is_empty() {
            break;
        }
        let step_logits = logits.narrow(0, 0, rows.len() as i64);
        // 2. One token per row (on the host for CPU logits without truncation, else on the
        //    device: see [`Sampler`]).
        let uniforms: Vec<f64> = rows
            .iter_mut()
            .map(|row| {
                if s.temperature > 0.0 {
                    row.rng.uniform()
                } else {
                    0.0
                }
            })
            .collect();
        let (toks, lps) = sampler
            .sample(&step_logits, s, &uniforms)
            .map_err(|e| match e {
                // Name the request (the caller maps it to a prompt).
                Error::NonFiniteLogits { row } => {
                    let (request, step) = rows.get(row).map_or((0, 0), |r| {
                        (session.slices[r.slice].request, r.tokens.len())
                    });
                    Error::Request {
                        request,
                        problem: RequestProblem::NonFiniteLogits { step },
                    }
                }
                e => e,
            })?;
        for (((row, tok), lp), nx) in rows.iter_mut().zip(toks).zip(lps).zip(next.iter_mut()) {
            row.tokens.push(tok);
            row.logprobs.push(lp);
            if s.eos_ids.contains(&tok) || row.stop.push(tokenizer, &row.tokens, &s.stop_strings)? {
                row.finish = Some(FinishReason::Stop);
            }
            if row.finish.is_none() && row.tokens.len() == s.max_new_tokens {
                row.finish = Some(FinishReason::Length);
            }
            *nx = i64::from(tok);
        }
        // 3. Finished rows leave; the last row moves into each gap (its cache with it), so
        //    the rows in flight stay in slots 0..R.
        let mut r = 0;
        while r < rows.len() {
            let Some(finish) = rows[r].finish else {
                r += 1;
                continue;
            };
            let last = rows.len() - 1;
            if last != r && rows[last].finish.is_none() {
                cache.move_row(last, r, pos[last]);
            }
            let row = rows.swap_remove(r);
            pos.swap_remove(r);
            next.swap_remove(r);
            emit(
                session.slices[row.slice].request,
                row.sample,
                Sample {
                    tokens: row.tokens,
                    logprobs: row.logprobs,
                    finish,
                },
            );
        }
        if rows.is_empty() {
            continue;
        }
        // 4. One decoding step of every row in flight: [R, 1] -> logits [R, V].
        let ids = Tensor::from_slice(&next)
            .view([next.len() as i64, 1])
            .to_device(device);
        let hidden = model.hidden_step(&ids, &mut cache, &pos, packed.as_ref());
        model.logits_into(
            &hidden.squeeze_dim(1),
            &logits.narrow(0, 0, rows.len() as i64),
            packed.as_ref(),
        )?;
        for p in &mut pos {
            *p += 1;
        }
    }
    Ok(())
}
