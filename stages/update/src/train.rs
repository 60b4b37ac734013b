//! One iteration's policy update, written like nanochat's `chat_rl.py`: linear, with the
//! normalisation choices commented where the division happens.

use deltarl_dist::Group;
use deltarl_model::{Policy, Qwen3};
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{Shard, UpdateRow};
use deltarl_teacher::{budget_chunks, head_chunk_tokens, token_stats, TeacherForced};
use tch::{Kind, Tensor};

use deltarl_optim::AdamW;

use crate::{token_loss, token_weights, Error, Result, Settings};

/// One response to train on: tokens, old log-probs, advantage and coefficients. Token t's
/// advantage is `advantage * coeff[t] + shift[t]`.
#[derive(Clone, Debug)]
pub struct TrainRow {
    pub prompt_id: String,
    pub prompt_ids: Vec<u32>,
    pub response_ids: Vec<u32>,
    pub old_logprobs: Vec<f32>,
    pub advantage: f32,
    pub coeff: Vec<f32>,
    /// A term added to each token's advantage (KTAE's key-token score); empty = none.
    pub shift: Vec<f32>,
}

impl TrainRow {
    /// Each token's advantage, `A * c (+ shift)`: with no shift nothing is added, so the
    /// estimators that only reweight give the same bits as before the shift existed.
    pub fn token_advantages(&self) -> Vec<f32> {
        if self.shift.is_empty() {
            self.coeff.iter().map(|c| self.advantage * c).collect()
        } else {
            self.coeff
                .iter()
                .zip(&self.shift)
                .map(|(c, s)| self.advantage * c + s)
                .collect()
        }
    }
}

fn lr_at(s: &Settings, step: u64) -> f64 {
    if s.warmup_steps == 0 {
        s.lr
    } else {
        s.lr * ((step + 1) as f64 / s.warmup_steps as f64).min(1.0)
    }
}

/// Splits the rows into `n` mini-batches of whole prompt groups, groups shuffled by `seed`.
fn mini_batches(rows: &[&TrainRow], n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == r.prompt_id) {
            Some(g) => g.1.push(i),
            None => groups.push((r.prompt_id.clone(), vec![i])),
        }
    }
    let mut rng = Rng::new(seed);
    for i in (1..groups.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        groups.swap(i, j);
    }
    let n = n.max(1).min(groups.len().max(1));
    let per = groups.len().div_ceil(n);
    groups
        .chunks(per.max(1))
        .map(|c| c.iter().flat_map(|g| g.1.iter().copied()).collect())
        .collect()
}

/// Runs iteration `iter`'s optimizer steps over `rows` and returns one metrics row per step.
/// `reference` is the base policy when KL is on; `progress` is told how many responses
/// each micro-batch trained on.
///
/// With `ranks`, every process calls this with the same rows: the micro-batches of each
/// mini-batch are dealt out (process r takes every world-th, cut as one process cuts
/// them), gradients and metric sums are summed over the processes, and each takes the same
/// step (or, with sharded state, its parameters' share of it).
// `x = x - y` on tensors builds a new graph node; `x -= y` would write in place into a
// tensor autograd still needs.
#[allow(clippy::assign_op_pattern)]
pub fn run(
    s: &Settings,
    iter: u32,
    policy: &Policy,
    opt: &mut AdamW,
    reference: Option<&Qwen3>,
    rows: &[TrainRow],
    ranks: Option<&Group>,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<UpdateRow>> {
    let shard = ranks.map_or(Shard::WHOLE, Group::shard);
    for r in rows {
        let n = r.response_ids.len();
        if r.old_logprobs.len() != n
            || r.coeff.len() != n
            || !(r.shift.is_empty() || r.shift.len() == n)
        {
            return Err(Error::Input(format!(
                "prompt_id {:?}: {n} response tokens, {} old log-probs, {} coefficients, \
                 {} advantage shifts",
                r.prompt_id,
                r.old_logprobs.len(),
                r.coeff.len(),
                r.shift.len()
            )));
        }
    }
    let device = policy.model.lm_head_weight().device();
    let head_chunk = head_chunk_tokens(s.head_chunk_bytes, policy.model.config.vocab_size);
    // Empty responses have no tokens to train on.
    let rows: Vec<&TrainRow> = rows.iter().filter(|r| !r.response_ids.is_empty()).collect();
    let mut out = Vec::new();
    for mb in mini_batches(&rows, s.optimizer_steps, s.shuffle_seed(iter)) {
        let mb_tokens: usize = mb.iter().map(|&i| rows[i].response_ids.len()).sum();
        let mb_seqs = mb.len();
        opt.zero_grad();
        let (mut loss_sum, mut clip_sum, mut ent_sum, mut kl_sum, mut akl_sum) =
            (0.0, 0.0, 0.0, 0.0, 0.0);
        let row_tokens = |&i: &usize| rows[i].prompt_ids.len() + rows[i].response_ids.len();
        let micros = budget_chunks(&mb, s.micro_batch_rows, s.micro_batch_tokens, row_tokens);
        for (m, micro) in micros.into_iter().enumerate() {
            if !shard.owns(m) {
                continue;
            }
            let batch: Vec<&TrainRow> = micro.iter().map(|&i| rows[i]).collect();
            let pairs: Vec<(&[u32], &[u32])> = batch
                .iter()
                .map(|r| (r.prompt_ids.as_slice(), r.response_ids.as_slice()))
                .collect();
            // 1. Current log-probs and entropy of every response token: [N]. With
            //    checkpointing the blocks keep only their inputs until step 4's backward;
            //    a pass longer than `head_chunk` tokens runs the LM head in chunks, its
            //    backward pending until then too.
            let tf = TeacherForced::new(&pairs, device);
            let ckpt = s
                .activation_checkpointing
                .then(|| policy.model.hidden_checkpointed(&tf.input));
            let hidden = match &ckpt {
                Some(pass) => pass.hidden(),
                None => policy.model.hidden(&tf.input, None),
            };
            let st = tf.stats(
                &policy.model,
                &hidden,
                s.temperature,
                s.loss.entropy_coef != 0.0,
                head_chunk,
            );
            let flat = |f: &dyn Fn(&TrainRow) -> Vec<f32>| -> Tensor {
                let v: Vec<f32> = batch.iter().flat_map(|r| f(r)).collect();
                Tensor::from_slice(&v).to_device(device)
            };
            let old = flat(&|r| r.old_logprobs.clone());
            // 2. The reweighted advantage A~ = A * c (+ shift) (constants).
            let adv = flat(&|r| r.token_advantages());
            // 3. Per-token surrogate (clipped unless the settings say otherwise): [N].
            let tl = token_loss(&st.logprob, &old, &adv, &st.lengths, &s.loss);
            let mut per_token = tl.loss.shallow_clone();
            if s.loss.entropy_coef != 0.0 {
                per_token = per_token - &st.entropy * s.loss.entropy_coef;
            }
            let mut kl_tok = None;
            if let (Some(base), true) = (reference, s.loss.kl_coef != 0.0) {
                let base_lp = tch::no_grad(|| {
                    token_stats(base, &pairs, s.temperature, head_chunk, device).logprob
                });
                // k3 estimator: exp(ref - logp) - (ref - logp) - 1 >= 0.
                let d = (&base_lp - &st.logprob).clamp(-20.0, 20.0);
                let k3 = d.exp() - &d - 1.0;
                per_token = per_token + &k3 * s.loss.kl_coef;
                kl_tok = Some(k3);
            }
            // 4. Aggregation: per-token weights carry the mini-batch normalisation
            //    (token-mean divides by the mini-batch token count, seq-mean-token-mean by
            //    each length and the response count, sum-norm by a constant length).
            let w = Tensor::from_slice(&token_weights(&s.loss, &st.lengths, mb_tokens, mb_seqs))
                .to_device(device);
            let loss = (&per_token * &w).sum(Kind::Float);
            loss.backward();
            // A chunked head back-propagates chunk by chunk; the head weight's bf16
            // gradient goes into its f32 sum after each chunk (see `AdamW::accumulate`).
            st.backward_head(&policy.model, &mut || {
                opt.accumulate_param(policy.model.lm_head_weight())
            });
            if let Some(pass) = ckpt {
                pass.backward()?;
            }
            // Into the f32 gradient sums (bf16 parameters; see `AdamW::accumulate`).
            opt.accumulate();
            loss_sum += loss.double_value(&[]);
            let tw = mb_tokens.max(1) as f64;
            clip_sum += tl.clipped.sum(Kind::Double).double_value(&[]) / tw;
            ent_sum += st.entropy.detach().sum(Kind::Double).double_value(&[]) / tw;
            akl_sum += (st.logprob.detach() - &old)
                .abs()
                .sum(Kind::Double)
                .double_value(&[])
                / tw;
            if let Some(k) = kl_tok {
                kl_sum += k.detach().sum(Kind::Double).double_value(&[]) / tw;
            }
            progress(micro.len());
        }
        // 5. With several processes, sum their gradients (each already divided by the
        //    whole mini-batch's count in step 4) and their metric sums: every process now
        //    holds the one-process gradient, bit-identical across processes.
        if let Some(g) = ranks {
            opt.all_reduce_grads(g)?;
            let mut sums = Tensor::from_slice(&[loss_sum, clip_sum, ent_sum, kl_sum, akl_sum]);
            g.all_reduce_sum(&mut sums)?;
            let v = Vec::<f64>::try_from(&sums)?;
            (loss_sum, clip_sum, ent_sum, kl_sum, akl_sum) = (v[0], v[1], v[2], v[3], v[4]);
        }
        // 6. Clip the global gradient norm, then one AdamW step. A step whose gradient norm
        //    is not finite is skipped (weights and moments untouched), as the authors' code
        //    does; its row records the norm, and the step counter does not advance.
        let grad_norm = opt.clip_grad_norm(s.grad_clip);
        let lr = lr_at(s, opt.step);
        if grad_norm.is_finite() {
            opt.step(lr);
            if let Some(g) = ranks {
                opt.share_weights(g)?;
            }
        }
        out.push(UpdateRow {
            step: opt.step as u32,
            loss: loss_sum,
            clip_frac: clip_sum,
            grad_norm,
            entropy: ent_sum,
            tokens: mb_tokens as u64,
            lr,
            kl: kl_sum,
            approx_kl_old: akl_sum,
        });
    }
    Ok(out)
}
