//! Batched sampling with a KV cache.
//!
//! Groups (one prompt, G samples) are bucketed by prompt length so a batch never needs
//! padding; each prompt is prefilled once and its cache fanned out to its G rows. Every
//! row draws from its own generator, seeded by the caller from (run seed, iteration,
//! prompt id, sample index), so a sample does not depend on which other rows share its
//! batch. Log-probabilities are recorded under the full distribution at the sampling
//! temperature (before top-k / top-p truncation), which is what the update's ratio uses.
//!
//! Sampling itself (temperature, top-k, top-p, the draw) happens on the model's device:
//! see [`crate::sample`].

use std::ops::Range;

use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FinishReason, Shard};
use tch::{Device, Kind, Tensor};

pub use crate::sample::{logprob_temperature, sample_on_device, SampleSettings};
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

struct Row {
    group: usize,
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
/// called after each batch.
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

/// [`generate`]'s share of one of several processes: the batches `shard` owns, cut as one
/// process cuts them (so each sample is bit for bit the one a single process draws). Per
/// request, the samples made here with their sample indices, in order.
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
    let batches = plan_batches(requests, s)?;
    let mut out: Vec<Vec<(usize, Sample)>> = requests.iter().map(|_| Vec::new()).collect();
    let (mut done_rows, mut tokens) = (0, 0);
    for (b, batch) in batches.iter().enumerate() {
        if !shard.owns(b) {
            continue;
        }
        let samples =
            tch::no_grad(|| generate_batch(model, tokenizer, requests, batch, s, device))?;
        for (slice, group) in batch.iter().zip(samples) {
            done_rows += group.len();
            tokens += group.iter().map(|x| x.tokens.len()).sum::<usize>();
            // Slices of one request come in sample order.
            out[slice.request].extend(slice.samples.clone().zip(group));
        }
        progress(done_rows, tokens);
    }
    Ok(out)
}

/// Samples `samples` of request `request`, decoded together with the other slices of
/// their batch.
#[derive(Clone, Debug, PartialEq)]
struct Slice {
    request: usize,
    samples: Range<usize>,
}

/// Cuts the requests into batches: buckets of equal prompt length (so no batch needs
/// padding), in a fixed order, each of at most `max_batch_rows` rows and, with a cache
/// budget, at most `max_cache_tokens / (L + max_new_tokens)` rows. A request whose
/// samples do not fit the room left is split across batches, its samples in order.
fn plan_batches(requests: &[Request], s: &SampleSettings) -> Result<Vec<Vec<Slice>>> {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (requests[i].prompt_ids.len(), i));
    let mut batches: Vec<Vec<Slice>> = Vec::new();
    let mut rows_in_last = 0;
    for &i in &order {
        let len = requests[i].prompt_ids.len();
        let mut cap = s.max_batch_rows.max(1);
        if let Some(budget) = s.max_cache_tokens {
            let per_row = len + s.max_new_tokens;
            if per_row > budget {
                return Err(Error::Request {
                    request: i,
                    problem: RequestProblem::OverCacheBudget {
                        prompt: len,
                        max_new_tokens: s.max_new_tokens,
                        budget,
                    },
                });
            }
            cap = cap.min(budget / per_row);
        }
        let mut next = 0;
        let n = requests[i].seeds.len();
        while next < n {
            let joins = batches.last().is_some_and(|b: &Vec<Slice>| {
                requests[b[0].request].prompt_ids.len() == len && rows_in_last < cap
            });
            if !joins {
                batches.push(Vec::new());
                rows_in_last = 0;
            }
            let take = (n - next).min(cap - rows_in_last);
            if let Some(b) = batches.last_mut() {
                b.push(Slice {
                    request: i,
                    samples: next..next + take,
                });
            }
            rows_in_last += take;
            next += take;
        }
    }
    Ok(batches)
}

fn generate_batch(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    batch: &[Slice],
    s: &SampleSettings,
    device: Device,
) -> Result<Vec<Vec<Sample>>> {
    let prompts: Vec<Vec<u32>> = batch
        .iter()
        .map(|slice| requests[slice.request].prompt_ids.clone())
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut fan: Vec<i64> = Vec::new();
    for (gi, slice) in batch.iter().enumerate() {
        let seeds = &requests[slice.request].seeds[slice.samples.clone()];
        for (k, &seed) in seeds.iter().enumerate() {
            rows.push(Row {
                group: gi,
                sample: k,
                rng: Rng::new(seed),
                tokens: Vec::new(),
                logprobs: Vec::new(),
                finish: None,
                stop: StopScanner::default(),
            });
            fan.push(gi as i64);
        }
    }
    // 1. Prefill each prompt once: [groups, L] -> cache, last logits [groups, V].
    let mut cache = KvCache::new(model.config.num_hidden_layers);
    let hidden = model.hidden(&ids_tensor(&prompts, device), Some(&mut cache));
    let group_logits = last_logits(model, &hidden);
    // 2. Fan the cache and the logits out to the G rows of each group.
    let fan = Tensor::from_slice(&fan).to_device(device);
    cache.select(&fan);
    let mut active: Vec<usize> = (0..rows.len()).collect();
    let mut logits = group_logits.index_select(0, &fan);
    for step in 0..s.max_new_tokens {
        // 3. Sample one token per active row, on the device.
        let uniforms: Vec<f64> = active
            .iter()
            .map(|&ri| {
                if s.temperature > 0.0 {
                    rows[ri].rng.uniform()
                } else {
                    0.0
                }
            })
            .collect();
        let (toks, lps) = sample_on_device(&logits, s, &uniforms).map_err(|e| match e {
            // Name the request (the caller maps it to a prompt).
            Error::NonFiniteLogits { row } => Error::Request {
                request: active
                    .get(row)
                    .map_or(0, |&ri| batch[rows[ri].group].request),
                problem: RequestProblem::NonFiniteLogits { step },
            },
            e => e,
        })?;
        let mut next = Vec::with_capacity(active.len());
        for ((&ri, tok), lp) in active.iter().zip(toks).zip(lps) {
            let row = &mut rows[ri];
            row.tokens.push(tok);
            row.logprobs.push(lp);
            if s.eos_ids.contains(&tok) || row.stop.push(tokenizer, &row.tokens, &s.stop_strings) {
                row.finish = Some(FinishReason::Stop);
            }
            if row.finish.is_none() && step + 1 == s.max_new_tokens {
                row.finish = Some(FinishReason::Length);
            }
            next.push(i64::from(tok));
        }
        // 4. Drop finished rows from the batch (and the cache).
        let keep: Vec<usize> = (0..active.len())
            .filter(|&a| rows[active[a]].finish.is_none())
            .collect();
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            let idx: Vec<i64> = keep.iter().map(|&a| a as i64).collect();
            cache.select(&Tensor::from_slice(&idx).to_device(device));
            next = keep.iter().map(|&a| next[a]).collect();
            active = keep.iter().map(|&a| active[a]).collect();
        }
        // 5. One decoding step: [R, 1] -> logits [R, V].
        let hidden = if s.use_cache {
            model.hidden(
                &Tensor::from_slice(&next)
                    .view([next.len() as i64, 1])
                    .to_device(device),
                Some(&mut cache),
            )
        } else {
            let seqs: Vec<Vec<u32>> = active
                .iter()
                .map(|&ri| {
                    let mut v = prompts[rows[ri].group].clone();
                    v.extend(&rows[ri].tokens);
                    v
                })
                .collect();
            model.hidden(&ids_tensor(&seqs, device), None)
        };
        logits = last_logits(model, &hidden);
    }
    let mut out: Vec<Vec<Sample>> = batch
        .iter()
        .map(|slice| Vec::with_capacity(slice.samples.len()))
        .collect();
    for r in rows {
        out[r.group].push(Sample {
            tokens: r.tokens,
            logprobs: r.logprobs,
            finish: r.finish.unwrap_or(FinishReason::Length),
        });
        debug_assert_eq!(out[r.group].len(), r.sample + 1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(max_batch_rows: usize, max_cache_tokens: Option<usize>) -> SampleSettings {
        SampleSettings {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 6,
            eos_ids: vec![],
            stop_strings: vec![],
            max_batch_rows,
            max_cache_tokens,
            use_cache: true,
        }
    }

    fn req(len: usize, g: u64) -> Request {
        Request {
            prompt_ids: vec![1; len],
            seeds: (0..g).collect(),
        }
    }

    fn shape(b: &[Vec<Slice>]) -> Vec<Vec<(usize, usize, usize)>> {
        b.iter()
            .map(|b| {
                b.iter()
                    .map(|s| (s.request, s.samples.start, s.samples.end))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn batches_keep_prompt_lengths_apart_and_split_groups_to_the_cache_budget() {
        // Prompts of 4, 2, 4 tokens, G = 3 each; max_new_tokens = 6.
        let requests = [req(4, 3), req(2, 3), req(4, 3)];
        // No budget, 8 rows: one batch a prompt length, requests whole.
        let b = plan_batches(&requests, &settings(8, None)).unwrap();
        assert_eq!(shape(&b), vec![vec![(1, 0, 3)], vec![(0, 0, 3), (2, 0, 3)]]);
        // A budget of 25 positions: 25 / (2 + 6) = 3 rows of the short prompt, 25 / (4 +
        // 6) = 2 rows of the long ones, so their groups are split in sample order.
        let b = plan_batches(&requests, &settings(8, Some(25))).unwrap();
        assert_eq!(
            shape(&b),
            vec![
                vec![(1, 0, 3)],
                vec![(0, 0, 2)],
                vec![(0, 2, 3), (2, 0, 1)],
                vec![(2, 1, 3)],
            ]
        );
        for batch in &b {
            let rows: usize = batch.iter().map(|s| s.samples.len()).sum();
            let len = requests[batch[0].request].prompt_ids.len();
            assert!(rows * (len + 6) <= 25);
        }
    }

    #[test]
    fn a_response_longer_than_the_cache_budget_is_refused_by_name() {
        let err = plan_batches(&[req(4, 2)], &settings(8, Some(9)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rollout.kv_cache_tokens"), "{err}");
        assert!(err.contains("10 cache positions"), "{err}");
    }
}
