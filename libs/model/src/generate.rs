//! Batched sampling with a preallocated KV cache and continuous batching.
//!
//! The requests (one prompt, G samples each) are cut, in request order, into sessions of
//! at most `session_rows` samples. Processes share sessions out (session i to process
//! i mod N) and one process runs them one after another, so N processes draw exactly the
//! samples one process draws. A session decodes through `slots` rows of a preallocated
//! cache ([`SlotCache`]): every row in flight advances one token a step, in one batch
//! whatever its prompt's length (each row at its own position), so the weights are read
//! once a step for all of them; when a row finishes, its slot goes to the next waiting
//! sample at once. A group's prompt is prefilled once, when its first sample enters, and
//! copied into its samples' slots.
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

use std::collections::VecDeque;
use std::ops::Range;

use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FinishReason, Shard};
use tch::{Device, Kind, Tensor};

pub use crate::sample::{logprob_temperature, sample_on_device, SampleSettings, Sampler};
use crate::slots::SlotCache;
use crate::{Error, KvCache, Qwen3, RequestProblem, Result, StopScanner, Tokenizer};

/// One prompt and the seeds of its samples (one per sample).
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub seeds: Vec<u64>,
}

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

/// Samples `samples` of request `request`.
#[derive(Clone, Debug, PartialEq)]
struct Slice {
    request: usize,
    samples: Range<usize>,
}

/// Requests decoded through one set of slots.
#[derive(Clone, Debug, PartialEq)]
struct Session {
    /// In request order; each request at most once.
    slices: Vec<Slice>,
    /// Rows decoded together at most.
    slots: usize,
    /// Positions a slot holds: the session's longest prompt + max_new_tokens.
    capacity: usize,
}

/// Cuts the requests, in order, into sessions of at most `session_rows` samples (a
/// request whose samples do not fit the room left continues in the next session, its
/// samples in order), each decoded through `max_batch_rows` slots or, with a cache
/// budget, at most `max_cache_tokens / capacity`.
fn plan_sessions(requests: &[Request], s: &SampleSettings) -> Result<Vec<Session>> {
    if let Some(budget) = s.max_cache_tokens {
        for (i, r) in requests.iter().enumerate() {
            if r.prompt_ids.len() + s.max_new_tokens > budget {
                return Err(Error::Request {
                    request: i,
                    problem: RequestProblem::OverCacheBudget {
                        prompt: r.prompt_ids.len(),
                        max_new_tokens: s.max_new_tokens,
                        budget,
                    },
                });
            }
        }
    }
    let per = s.session_rows.unwrap_or(usize::MAX).max(1);
    let mut cuts: Vec<Vec<Slice>> = Vec::new();
    let mut room = 0;
    for (i, r) in requests.iter().enumerate() {
        let n = r.seeds.len();
        let mut next = 0;
        while next < n {
            if room == 0 {
                cuts.push(Vec::new());
                room = per;
            }
            let take = (n - next).min(room);
            if let Some(c) = cuts.last_mut() {
                c.push(Slice {
                    request: i,
                    samples: next..next + take,
                });
            }
            room -= take;
            next += take;
        }
    }
    Ok(cuts
        .into_iter()
        .map(|slices| {
            let rows: usize = slices.iter().map(|x| x.samples.len()).sum();
            let longest = slices
                .iter()
                .map(|x| requests[x.request].prompt_ids.len())
                .max()
                .unwrap_or(0);
            let capacity = longest + s.max_new_tokens;
            let mut slots = s.max_batch_rows.max(1).min(rows);
            if let Some(budget) = s.max_cache_tokens {
                // Every request fits the budget (checked above), so at least one slot.
                slots = slots.min(budget / capacity).max(1);
            }
            Session {
                slices,
                slots,
                capacity,
            }
        })
        .collect())
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
    let mut cache = SlotCache::new(model, session.slots, session.capacity);
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
    // The prompt prefilled last: (slice, its cache, its last logits [1, V]).
    let mut prefilled: Option<(usize, KvCache, Tensor)> = None;
    loop {
        // 1. Free slots take waiting samples; a group's prompt is prefilled once, when its
        //    first sample enters, and copied into each of its samples' slots.
        while rows.len() < session.slots {
            let Some((si, k)) = waiting.pop_front() else {
                break;
            };
            let request = session.slices[si].request;
            let prompt = &requests[request].prompt_ids;
            let (kv, first) = match prefilled.take() {
                Some((p, kv, first)) if p == si => (kv, first),
                _ => {
                    let mut kv = KvCache::new(model.config.num_hidden_layers);
                    let hidden = model.hidden(
                        &ids_tensor(std::slice::from_ref(prompt), device),
                        Some(&mut kv),
                    );
                    (kv, last_logits(model, &hidden))
                }
            };
            cache.fill(rows.len(), &kv);
            logits.narrow(0, rows.len() as i64, 1).f_copy_(&first)?;
            prefilled = Some((si, kv, first));
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
            if s.eos_ids.contains(&tok) || row.stop.push(tokenizer, &row.tokens, &s.stop_strings) {
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
        let hidden = model.hidden_step(&ids, &mut cache, &pos);
        model.logits_into(
            &hidden.squeeze_dim(1),
            &logits.narrow(0, 0, rows.len() as i64),
        )?;
        for p in &mut pos {
            *p += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(
        max_batch_rows: usize,
        max_cache_tokens: Option<usize>,
        session_rows: Option<usize>,
    ) -> SampleSettings {
        SampleSettings {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 6,
            eos_ids: vec![],
            stop_strings: vec![],
            max_batch_rows,
            max_cache_tokens,
            session_rows,
        }
    }

    fn req(len: usize, g: u64) -> Request {
        Request {
            prompt_ids: vec![1; len],
            seeds: (0..g).collect(),
        }
    }

    /// (slices as (request, first, end), slots, capacity) per session.
    type Shape = (Vec<(usize, usize, usize)>, usize, usize);

    fn shape(sessions: &[Session]) -> Vec<Shape> {
        sessions
            .iter()
            .map(|x| {
                let slices = x
                    .slices
                    .iter()
                    .map(|s| (s.request, s.samples.start, s.samples.end))
                    .collect();
                (slices, x.slots, x.capacity)
            })
            .collect()
    }

    #[test]
    fn sessions_mix_prompt_lengths_and_split_groups_in_request_order() {
        // Prompts of 4, 2, 4 tokens, G = 3 each; max_new_tokens = 6.
        let requests = [req(4, 3), req(2, 3), req(4, 3)];
        // One session of every sample, whatever the lengths: 8 slots for 9 rows, each of
        // the longest prompt + 6 = 10 positions.
        let b = plan_sessions(&requests, &settings(8, None, None)).unwrap();
        assert_eq!(
            shape(&b),
            vec![(vec![(0, 0, 3), (1, 0, 3), (2, 0, 3)], 8, 10)]
        );
        // Sessions of 4 samples: groups split in sample order; a session never has more
        // slots than rows; the short prompt's session is as wide as its longest prompt.
        let b = plan_sessions(&requests, &settings(8, None, Some(4))).unwrap();
        assert_eq!(
            shape(&b),
            vec![
                (vec![(0, 0, 3), (1, 0, 1)], 4, 10),
                (vec![(1, 1, 3), (2, 0, 2)], 4, 10),
                (vec![(2, 2, 3)], 1, 10),
            ]
        );
        // A budget of 25 positions: 25 / 10 = 2 slots of 10 positions.
        let b = plan_sessions(&requests, &settings(8, Some(25), None)).unwrap();
        assert_eq!(
            shape(&b),
            vec![(vec![(0, 0, 3), (1, 0, 3), (2, 0, 3)], 2, 10)]
        );
        for x in &b {
            assert!(x.slots * x.capacity <= 25);
        }
    }

    #[test]
    fn a_response_longer_than_the_cache_budget_is_refused_by_name() {
        let err = plan_sessions(&[req(4, 2)], &settings(8, Some(9), None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rollout.kv_cache_tokens"), "{err}");
        assert!(err.contains("10 cache positions"), "{err}");
    }
}
