//! Batched sampling with a KV cache.
//!
//! Groups (one prompt, G samples) are bucketed by prompt length so a batch never needs
//! padding; each prompt is prefilled once and its cache fanned out to its G rows. Every
//! row draws from its own generator, seeded by the caller from (run seed, iteration,
//! prompt id, sample index), so a sample does not depend on which other rows share its
//! batch. Log-probabilities are recorded under the full distribution at the sampling
//! temperature (before top-k / top-p truncation), which is what the update's ratio uses.
//!
//! Sampling happens on the model's device ([`sample_on_device`]): temperature, top-k,
//! top-p and the draw are tensor operations over the [rows, vocabulary] logits, and each
//! row's draw inverts its cumulative distribution at one uniform taken from the row's own
//! generator. Per step only the uniforms go to the device and the tokens and their
//! log-probs come back (3 numbers a row), not the 152k-wide logits. The arithmetic is the
//! host sampler's (f64 log-softmax of the f32 logits, the same candidate order and the same
//! inverse-CDF rule), so the same seeds give the same tokens, except where a uniform falls
//! within rounding (~1e-16) of a boundary between two tokens' cumulative probabilities.

use deltarl_schemas::seed::Rng;
use deltarl_schemas::FinishReason;
use tch::{Device, Kind, Tensor};

use crate::{Error, KvCache, Qwen3, Result, StopScanner, Tokenizer};

/// Sampling settings, validated by the caller's configuration layer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SampleSettings {
    /// 0 means greedy.
    pub temperature: f64,
    /// 1.0 disables nucleus sampling.
    pub top_p: f64,
    /// 0 disables top-k.
    pub top_k: usize,
    pub max_new_tokens: usize,
    /// Token ids that end a response (kept as its last token).
    pub eos_ids: Vec<u32>,
    /// Strings that end a response once they appear in its decoded text.
    pub stop_strings: Vec<String>,
    /// Rows decoded together at most.
    pub max_batch_rows: usize,
    /// Recompute the whole sequence each step instead of using the cache (benchmarks).
    pub use_cache: bool,
}

/// One prompt and the seeds of its samples (one per sample).
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub seeds: Vec<u64>,
}

/// The temperature log-probabilities are measured at: the sampling temperature, or 1 for
/// greedy decoding (temperature 0), whose log-probs are those of the plain softmax. The
/// features and update stages measure at the same temperature as the rollout.
pub fn logprob_temperature(temperature: f64) -> f64 {
    if temperature > 0.0 {
        temperature
    } else {
        1.0
    }
}

/// One generated response.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
}

/// Samples one token per row of `logits` ([R, V], on the model's device) and returns the
/// tokens and their log-probs at the temperature. `uniforms[r]` in [0, 1) is row r's draw
/// (unused when greedy). Errors name the first row whose logits are NaN or +inf.
pub fn sample_on_device(
    logits: &Tensor,
    s: &SampleSettings,
    uniforms: &[f64],
) -> Result<(Vec<u32>, Vec<f32>)> {
    let device = logits.device();
    let (rows, vocab) = (logits.size()[0], logits.size()[1]);
    // 1. Log-probs of the full distribution at the temperature, in f64 as the host
    //    sampler computed them: [R, V]. A NaN or +inf logit makes its whole row NaN.
    let z = logits.to_kind(Kind::Double) / logprob_temperature(s.temperature);
    let logp = z.log_softmax(-1, Kind::Double);
    // A model with NaN or +inf logits has no distribution to sample: name the row (one
    // number a row crosses to tell).
    let first = Vec::<f64>::try_from(logp.select(1, 0).to_device(Device::Cpu))?;
    if let Some(r) = first.iter().position(|x| x.is_nan()) {
        return Err(Error::Generate(format!(
            "row {r}: the model's logits are not finite"
        )));
    }
    let tokens = if s.temperature <= 0.0 {
        // 2a. Greedy: the first maximal index, as torch.argmax gives it.
        z.argmax(-1, false)
    } else {
        // 2b. Candidates: the whole vocabulary in index order, or, with top-k / top-p,
        //     sorted by probability (ties by index: a stable sort) and cut. `cdf` is the
        //     cumulative mass of the candidates in that order, `last` the last kept one.
        let p = logp.exp();
        let (cdf, order, last) = if s.top_k > 0 || s.top_p < 1.0 {
            let (sorted, order) = p.sort_stable(true, -1, true);
            let pos = Tensor::arange(vocab, (Kind::Int64, device)).unsqueeze(0);
            let mut keep = pos.lt(if s.top_k > 0 { s.top_k as i64 } else { vocab });
            let mut kept = &sorted * &keep.to_kind(Kind::Double);
            if s.top_p < 1.0 {
                // A candidate stays while the mass before it is below top_p (so the one
                // that crosses top_p stays too), counted over the top-k candidates.
                let before = kept.cumsum(-1, Kind::Double) - &kept;
                keep = keep.logical_and(&before.lt(s.top_p));
                kept = &sorted * &keep.to_kind(Kind::Double);
            }
            let last = keep.sum_dim_intlist(-1, true, Kind::Int64) - 1;
            (kept.cumsum(-1, Kind::Double), Some(order), last)
        } else {
            let last = Tensor::full([rows, 1], vocab - 1, (Kind::Int64, device));
            (p.cumsum(-1, Kind::Double), None, last)
        };
        // 3. Inverse CDF at u * (kept mass): the first candidate whose cumulative mass
        //    exceeds it (a binary search), or the last kept one if rounding leaves none.
        let total = cdf.select(1, vocab - 1).unsqueeze(1);
        let u = Tensor::from_slice(uniforms).to_device(device).unsqueeze(1) * &total;
        let pos = u
            .searchsorted(&cdf, false, true, "right", None::<Tensor>)
            .minimum(&last);
        match order {
            Some(order) => order.f_gather(1, &pos, false)?.squeeze_dim(1),
            None => pos.squeeze_dim(1),
        }
    };
    // 4. Only the tokens and their log-probs cross to the host.
    let lp = logp
        .f_gather(1, &tokens.unsqueeze(1), false)?
        .squeeze_dim(1);
    let tokens = Vec::<i64>::try_from(tokens.to_device(Device::Cpu))?;
    let lp = Vec::<f64>::try_from(lp.to_device(Device::Cpu))?;
    Ok((
        tokens.into_iter().map(|t| t as u32).collect(),
        lp.into_iter().map(|x| x as f32).collect(),
    ))
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
    let device = model.lm_head_weight().device();
    let ctx = model.max_positions() as usize;
    for (i, r) in requests.iter().enumerate() {
        if r.prompt_ids.is_empty() {
            return Err(Error::Generate(format!("request {i}: empty prompt")));
        }
        if r.prompt_ids.len() + s.max_new_tokens > ctx {
            return Err(Error::Generate(format!(
                "request {i}: prompt of {} tokens + max_new_tokens {} exceeds the context of {ctx}",
                r.prompt_ids.len(),
                s.max_new_tokens
            )));
        }
    }
    // Buckets of equal prompt length, in a fixed order, cut to at most max_batch_rows rows.
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (requests[i].prompt_ids.len(), i));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for &i in &order {
        let fits = batches.last().is_some_and(|b: &Vec<usize>| {
            let rows: usize = b.iter().map(|&j| requests[j].seeds.len()).sum();
            requests[b[0]].prompt_ids.len() == requests[i].prompt_ids.len()
                && rows + requests[i].seeds.len() <= s.max_batch_rows.max(1)
        });
        match batches.last_mut() {
            Some(b) if fits => b.push(i),
            _ => batches.push(vec![i]),
        }
    }
    let mut out: Vec<Vec<Sample>> = requests.iter().map(|_| Vec::new()).collect();
    let mut done_rows = 0;
    for batch in batches {
        let samples =
            tch::no_grad(|| generate_batch(model, tokenizer, requests, &batch, s, device))?;
        for (g, group) in batch.iter().zip(samples) {
            done_rows += group.len();
            out[*g] = group;
        }
        let tokens: usize = out.iter().flatten().map(|x| x.tokens.len()).sum();
        progress(done_rows, tokens);
    }
    Ok(out)
}

fn generate_batch(
    model: &Qwen3,
    tokenizer: &Tokenizer,
    requests: &[Request],
    batch: &[usize],
    s: &SampleSettings,
    device: Device,
) -> Result<Vec<Vec<Sample>>> {
    let prompts: Vec<Vec<u32>> = batch
        .iter()
        .map(|&g| requests[g].prompt_ids.clone())
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut fan: Vec<i64> = Vec::new();
    for (gi, &g) in batch.iter().enumerate() {
        for (k, &seed) in requests[g].seeds.iter().enumerate() {
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
            Error::Generate(m) => {
                let row = m
                    .strip_prefix("row ")
                    .and_then(|r| r.split(':').next())
                    .and_then(|r| r.parse::<usize>().ok())
                    .and_then(|a| active.get(a))
                    .map_or(0, |&ri| batch[rows[ri].group]);
                Error::Generate(format!(
                    "request {row}: {} at step {step}",
                    m.split_once(": ").map_or(m.as_str(), |x| x.1)
                ))
            }
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
        .map(|&g| Vec::with_capacity(requests[g].seeds.len()))
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

    /// The host sampler the device one replaced (f64 per row), kept as the reference:
    /// draws one token from a row of logits. Returns (token, log-prob at the temperature).
    fn sample_row(logits: &[f32], s: &SampleSettings, rng: &mut Rng) -> (u32, f32) {
        let t = logprob_temperature(s.temperature);
        let z: Vec<f64> = logits.iter().map(|&x| f64::from(x) / t).collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
        let logp = |i: usize| (z[i] - lse) as f32;
        if s.temperature <= 0.0 {
            // Greedy: first maximal index, as torch.argmax does.
            let mut best = 0;
            for i in 1..z.len() {
                if z[i] > z[best] {
                    best = i;
                }
            }
            return (best as u32, logp(best));
        }
        let mut cand: Vec<(usize, f64)> = z.iter().map(|x| (x - lse).exp()).enumerate().collect();
        if s.top_k > 0 || s.top_p < 1.0 {
            cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            if s.top_k > 0 {
                cand.truncate(s.top_k);
            }
            if s.top_p < 1.0 {
                let mut acc = 0.0;
                let mut keep = cand.len();
                for (i, &(_, p)) in cand.iter().enumerate() {
                    acc += p;
                    if acc >= s.top_p {
                        keep = i + 1;
                        break;
                    }
                }
                cand.truncate(keep.max(1));
            }
        }
        let total: f64 = cand.iter().map(|c| c.1).sum();
        let mut u = rng.uniform() * total;
        for &(i, p) in &cand {
            if u < p {
                return (i as u32, logp(i));
            }
            u -= p;
        }
        let i = cand.last().map_or(0, |c| c.0);
        (i as u32, logp(i))
    }

    fn settings(temperature: f64, top_p: f64, top_k: usize) -> SampleSettings {
        SampleSettings {
            temperature,
            top_p,
            top_k,
            max_new_tokens: 1,
            eos_ids: vec![],
            stop_strings: vec![],
            max_batch_rows: 1,
            use_cache: true,
        }
    }

    #[test]
    fn device_sampling_draws_what_the_host_sampler_drew() {
        tch::manual_seed(0);
        let (rows, vocab) = (64, 1000);
        // Peaked rows (as a trained model's) and flat ones; some exact ties.
        let logits = Tensor::randn([rows, vocab], (Kind::Float, Device::Cpu)) * 3.0;
        let _ = logits.narrow(0, 0, 4).narrow(1, 0, 8).fill_(2.5);
        let host_rows = Vec::<Vec<f32>>::try_from(&logits).unwrap();
        for (t, p, k) in [
            (1.0, 1.0, 0),
            (0.7, 1.0, 0),
            (1.0, 0.9, 0),
            (1.0, 1.0, 20),
            (0.6, 0.8, 50),
            (0.0, 1.0, 0),
        ] {
            let s = settings(t, p, k);
            let seeds: Vec<u64> = (0..rows as u64).map(|r| 1000 + r).collect();
            let uniforms: Vec<f64> = seeds.iter().map(|&x| Rng::new(x).uniform()).collect();
            let (toks, lps) = sample_on_device(&logits, &s, &uniforms).unwrap();
            for r in 0..rows as usize {
                let (tok, lp) = sample_row(&host_rows[r], &s, &mut Rng::new(seeds[r]));
                assert_eq!(toks[r], tok, "t {t} p {p} k {k} row {r}");
                assert!((lps[r] - lp).abs() <= 1e-6, "{} vs {lp}", lps[r]);
            }
        }
    }

    #[test]
    fn non_finite_logits_are_refused_naming_the_row() {
        let logits = Tensor::zeros([3, 5], (Kind::Float, Device::Cpu));
        let _ = logits.get(2).get(1).fill_(f64::NAN);
        let err = sample_on_device(&logits, &settings(1.0, 1.0, 0), &[0.1, 0.2, 0.3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 2") && err.contains("not finite"), "{err}");
    }
}
