//! One token per row from the [rows, vocabulary] logits of a decoding step.
//!
//! Sampling on the model's device ([`sample_on_device`]): temperature, top-k,
//! top-p and the draw are tensor operations over the [rows, vocabulary] logits, and each
//! row's draw inverts its cumulative distribution at one uniform taken from the row's own
//! generator. Per step only the uniforms go to the device and the tokens and their
//! log-probs come back (3 numbers a row), not the 152k-wide logits. The arithmetic is the
//! host sampler's (f64 log-softmax of the f32 logits, the same candidate order and the same
//! inverse-CDF rule), so the same seeds give the same tokens, except where a uniform falls
//! within rounding (~1e-16) of a boundary between two tokens' cumulative probabilities.

use tch::{Device, Kind, Tensor};

pub use crate::sampling::SampleSettings;
use crate::{Error, Result};

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
        return Err(Error::NonFiniteLogits { row: r });
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

/// Draws the tokens of a decoding step, reusing its host buffer from step to step.
///
/// Logits on the CPU with no top-k / top-p truncation (the paper's setting) are sampled on
/// the host, row by row in f64 (the reference arithmetic of [`sample_on_device`], with no
/// [rows, vocabulary] temporaries: at a real vocabulary and hundreds of rows those
/// temporaries cost more than the decoding step's matrix products; each row's
/// exponentials are computed once, vectorised, into one buffer a thread, with their sums
/// by blocks of 64, and the draw walks the blocks, then one block's entries); everything
/// else goes to [`sample_on_device`].
#[derive(Debug, Default)]
pub struct Sampler {
    host: Vec<f32>,
}

impl Sampler {
    /// As [`sample_on_device`].
    pub fn sample(
        &mut self,
        logits: &Tensor,
        s: &SampleSettings,
        uniforms: &[f64],
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        if logits.device() != Device::Cpu || s.top_k > 0 || s.top_p < 1.0 {
            return sample_on_device(logits, s, uniforms);
        }
        let (rows, vocab) = (logits.size()[0] as usize, logits.size()[1] as usize);
        if uniforms.len() != rows {
            return Err(Error::Generate(format!(
                "{} uniforms for {rows} rows",
                uniforms.len()
            )));
        }
        // 1. The step's logits as f32 on the host, into the buffer of the last step.
        let logits = logits.to_kind(Kind::Float).contiguous();
        self.host.resize(rows * vocab, 0.0);
        logits.f_copy_data(&mut self.host, rows * vocab)?;
        // 2. One token per row, the rows cut into one contiguous part per intra-op thread
        //    (scoped threads, joined before the next decoding step, so none competes with
        //    libtorch's threads; each row's draw is its own arithmetic, so the cut changes
        //    no bit).
        let t = logprob_temperature(s.temperature);
        let greedy = s.temperature <= 0.0;
        let parts = (tch::get_num_threads().max(1) as usize).min(rows.max(1));
        let per = rows.div_ceil(parts).max(1);
        let drawn: Vec<Option<(u32, f32)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .host
                .chunks(per * vocab)
                .zip(uniforms.chunks(per))
                .map(|(block, us)| {
                    scope.spawn(move || {
                        let mut buf = RowBuffers::default();
                        block
                            .chunks(vocab)
                            .zip(us)
                            .map(|(row, &u)| draw_row(row, t, greedy, u, &mut buf))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        if drawn.len() != rows {
            return Err(Error::Generate("a sampling thread failed".into()));
        }
        let mut tokens = Vec::with_capacity(rows);
        let mut lps = Vec::with_capacity(rows);
        for (row, d) in drawn.into_iter().enumerate() {
            let (tok, lp) = d.ok_or(Error::NonFiniteLogits { row })?;
            tokens.push(tok);
            lps.push(lp);
        }
        Ok((tokens, lps))
    }
}

/// A thread's buffers for [`draw_row`]: a row's exponentials and their block sums.
#[derive(Debug, Default)]
struct RowBuffers {
    exps: Vec<f64>,
    sums: Vec<f64>,
}

/// One row's token and its log-prob at temperature `t`, by the arithmetic of
/// [`sample_on_device`] without truncation: z = logit / t in f64, log-sum-exp about the
/// maximum; greedy takes the first maximal index, otherwise the first index whose
/// cumulative mass exceeds u times the row's total (the last one if rounding leaves none).
/// None when the row has a NaN or +inf logit (no distribution to sample).
///
/// The sums are blocked (so no step waits on the one before it): the total adds the
/// blocks' sums in order (each block's in the lane order of [`crate::exp::exps_into`]);
/// the draw finds the first block whose cumulative sum exceeds the target, then the first
/// index in it whose running sum from the blocks before does (the block's last index if
/// rounding leaves none).
fn draw_row(row: &[f32], t: f64, greedy: bool, u: f64, buf: &mut RowBuffers) -> Option<(u32, f32)> {
    // 1. The maximum logit, refusing NaN and +inf. Division by t > 0 rounds
    //    monotonically, so max(x) / t is max(x / t), and for greedy decoding (t = 1) the
    //    first maximal x (step 3) is the first maximal z.
    let xmax = crate::exp::row_max(row)?;
    let max = f64::from(xmax) / t;
    if !max.is_finite() {
        return None;
    }
    // 2. exp(z - max) for every entry and each block's sum (vectorised: see
    //    [`crate::exp`]); the normaliser adds the blocks' sums in order.
    let RowBuffers { exps, sums } = buf;
    crate::exp::exps_into(row, t, max, exps, sums);
    let mut total = 0.0;
    for &b in sums.iter() {
        total += b;
    }
    let lse = max + total.ln();
    if !lse.is_finite() {
        return None;
    }
    let tok = if greedy {
        row.iter().position(|&x| x == xmax).unwrap_or(0)
    } else {
        // 3. Inverse CDF at u * total: the block, then the index in it.
        let target = u * total;
        let mut before = 0.0;
        let mut tok = row.len() - 1;
        let blocks = sums.iter().zip(exps.chunks(crate::exp::BLOCK));
        for (b, (&sum, block)) in blocks.enumerate() {
            if before + sum > target {
                let mut acc = before;
                tok = b * crate::exp::BLOCK + block.len() - 1;
                for (i, &e) in block.iter().enumerate() {
                    acc += e;
                    if acc > target {
                        tok = b * crate::exp::BLOCK + i;
                        break;
                    }
                }
                break;
            }
            before += sum;
        }
        tok
    };
    Some((tok as u32, (f64::from(row[tok]) / t - lse) as f32))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use deltarl_schemas::seed::Rng;

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
            max_cache_tokens: None,
            session_rows: None,
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
                // The device's f32 log-softmax against the host's f64: z - max rounds by
                // 2^-24 of |z - max| ≤ |lp|, the sum of V = 1000 exponentials by at most
                // V·2^-24 relative (its log by as much), the result once more: a derived
                // (|lp| + V + 2)·2^-24, about 6e-5.
                let tol = (f64::from(lp.abs()) + vocab as f64 + 2.0) * crate::roundoff::F32_UNIT;
                assert!(f64::from((lps[r] - lp).abs()) <= tol, "{} vs {lp}", lps[r]);
            }
        }
    }

    #[test]
    fn the_host_sampler_draws_what_the_reference_drew() {
        tch::manual_seed(1);
        let (rows, vocab) = (64, 1000);
        let logits = Tensor::randn([rows, vocab], (Kind::Float, Device::Cpu)) * 3.0;
        let _ = logits.narrow(0, 0, 4).narrow(1, 0, 8).fill_(2.5);
        let host_rows = Vec::<Vec<f32>>::try_from(&logits).unwrap();
        let mut sampler = Sampler::default();
        for t in [1.0, 0.7, 0.0] {
            let s = settings(t, 1.0, 0);
            let seeds: Vec<u64> = (0..rows as u64).map(|r| 2000 + r).collect();
            let uniforms: Vec<f64> = seeds.iter().map(|&x| Rng::new(x).uniform()).collect();
            let (toks, lps) = sampler.sample(&logits, &s, &uniforms).unwrap();
            assert_eq!(toks.len(), rows as usize);
            for r in 0..rows as usize {
                let (tok, lp) = sample_row(&host_rows[r], &s, &mut Rng::new(seeds[r]));
                assert_eq!(toks[r], tok, "t {t} row {r}");
                // The same f64 log-sum-exp about the maximum, except that each
                // exponential is `exp`'s (within 2 ulps of libm's, the reference's) and
                // the sum is blocked (the reference adds in index order): the sums of V
                // positive terms then differ by at most (2 + 2V)·2^-53 relative (the
                // terms' difference, and each order's roundings, at most (V - 1)·2^-53 of
                // the sum), and so does the log-prob in f64, absolutely; rounded to f32
                // they are equal or one f32 step of |lp| apart.
                let f64_gap = (2.0 + 2.0 * vocab as f64) * f64::EPSILON / 2.0;
                let f32_step = f64::from(lp.abs()) * 2.0 * crate::roundoff::F32_UNIT;
                let gap = f64::from((lps[r] - lp).abs());
                assert!(
                    gap <= f64_gap + f32_step,
                    "t {t} row {r}: {} vs {lp}",
                    lps[r]
                );
            }
        }
        // A NaN or +inf logit names its row, as on the device.
        let _ = logits.get(5).get(3).fill_(f64::INFINITY);
        let err = sampler
            .sample(&logits, &settings(1.0, 1.0, 0), &[0.5; 64])
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 5") && err.contains("not finite"), "{err}");
    }

    /// Top-p 0.7 by hand, the authors' validation setting: probabilities 0.5, 0.3, 0.15,
    /// 0.05 keep the first two (the mass before 0.3 is 0.5 < 0.7; before 0.15 it is 0.8),
    /// renormalised to 0.625 / 0.375, so u < 0.625 draws token 0, any larger u token 1,
    /// and tokens 2 and 3 never come. The log-prob is the full distribution's.
    #[test]
    fn top_p_0_7_by_hand() {
        let probs = [0.5f64, 0.3, 0.15, 0.05];
        let row: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let uniforms = [0.0, 0.3, 0.62, 0.63, 0.9, 0.999_999];
        let logits =
            Tensor::from_slice(&row.repeat(uniforms.len())).view([uniforms.len() as i64, 4]);
        let (toks, lps) = sample_on_device(&logits, &settings(1.0, 0.7, 0), &uniforms).unwrap();
        assert_eq!(toks, vec![0, 0, 0, 1, 1, 1]);
        // ln p rounded to f32, then the f32 log-softmax over 4 tokens (as in the test
        // above: (|lp| + 4 + 2)·2^-24) on top: below 6e-7; 1e-6.
        assert_eq!(toks.len(), lps.len());
        for (t, lp) in toks.iter().zip(&lps) {
            assert!(
                (f64::from(*lp) - probs[*t as usize].ln()).abs() < 1e-6,
                "{t} {lp}"
            );
        }
        // Without top-p the same uniforms reach the tail.
        let (toks, _) = sample_on_device(&logits, &settings(1.0, 1.0, 0), &uniforms).unwrap();
        assert_eq!(toks, vec![0, 0, 1, 1, 2, 3]);
    }

    /// The blocked draw by hand: 200 equal logits (blocks of 64, 64, 64 and 8 entries,
    /// every exponential exactly 1, so every sum is exact). u = 0.5 puts the target at
    /// 100: block 0 (64) does not pass it, blocks 0-1 (128) do, and in block 1 the
    /// running sum first exceeds 100 at 101, entry 100. u = 0.999: target 199.8, in the
    /// short last block, entry 199. u = 0: entry 0. The log-prob is ln(1/200).
    #[test]
    fn the_blocked_draw_by_hand() {
        let row = vec![0.0f32; 200];
        let mut buf = RowBuffers::default();
        for (u, want) in [(0.5, 100), (0.999, 199), (0.0, 0), (0.3, 60), (0.33, 66)] {
            let (tok, lp) = draw_row(&row, 1.0, false, u, &mut buf).unwrap();
            assert_eq!(tok, want, "u {u}");
            assert_eq!(lp, (1.0f64 / 200.0).ln() as f32);
        }
        // Greedy: the first maximal index, wherever the blocks cut.
        let mut row = vec![0.0f32; 200];
        row[130] = 2.0;
        row[190] = 2.0;
        assert_eq!(draw_row(&row, 1.0, true, 0.0, &mut buf).unwrap().0, 130);
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
