//! One iteration's policy update, written like nanochat's `chat_rl.py`: linear, with the
//! normalisation choices commented where the division happens.

use deltarl_dist::Group;
use deltarl_model::{layer_of, Policy, Qwen3};
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{Shard, UpdateRow};
use deltarl_teacher::{budget_chunks, head_chunk_tokens, token_stats, TeacherForced};
use tch::{Kind, Tensor};

use deltarl_optim::{AdamW, Sharding};

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

/// One response as the update sees it when it cuts an iteration into optimizer steps.
#[derive(Clone, Copy, Debug)]
pub struct StepRow<'a> {
    pub prompt_id: &'a str,
    /// The score stage kept it (`scores.parquet`'s `kept`).
    pub kept: bool,
    pub response_tokens: usize,
}

/// Which responses each of the iteration's optimizer steps trains on, as indices into
/// `rows` (the rollout's order): the rows [`crate::shell::train_rows`] keeps (kept by the
/// score stage) that have tokens to train on, cut by [`run`]'s rule with `s`'s steps and
/// iteration `iter`'s shuffle seed. For readouts that split an iteration as its update did.
pub fn step_members(s: &Settings, iter: u32, rows: &[StepRow<'_>]) -> Vec<Vec<usize>> {
    let trained: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].kept && rows[i].response_tokens > 0)
        .collect();
    let ids: Vec<&str> = trained.iter().map(|&i| rows[i].prompt_id).collect();
    mini_batches(&ids, s.optimizer_steps, s.shuffle_seed(iter))
        .into_iter()
        .map(|mb| mb.into_iter().map(|j| trained[j]).collect())
        .collect()
}

/// Splits rows (given by their prompt ids) into `n` mini-batches of whole prompt groups,
/// groups in order of first appearance, then shuffled by `seed`.
fn mini_batches(prompt_ids: &[&str], n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, &id) in prompt_ids.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == id) {
            Some(g) => g.1.push(i),
            None => groups.push((id, vec![i])),
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
/// mini-batch are dealt out in rounds of one a process (process r takes every world-th,
/// cut as one process cuts them), gradients and metric sums are summed over the
/// processes, and each takes the same step (or, with sharded state, its parameters' share
/// of it). Under ZeRO-2 each round's gradients go to their owners as they complete.
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
    let pass = Pass {
        s,
        policy,
        reference,
        device: policy.model.lm_head_weight().device(),
        head_chunk: head_chunk_tokens(s.head_chunk_bytes, policy.model.config.vocab_size),
        zero2: ranks.filter(|_| opt.sharding() == Sharding::Gradients),
        layers: policy.model.config.num_hidden_layers,
    };
    // Empty responses have no tokens to train on.
    let rows: Vec<&TrainRow> = rows.iter().filter(|r| !r.response_ids.is_empty()).collect();
    let mut out = Vec::new();
    let ids: Vec<&str> = rows.iter().map(|r| r.prompt_id.as_str()).collect();
    for mb in mini_batches(&ids, s.optimizer_steps, s.shuffle_seed(iter)) {
        let mb_tokens: usize = mb.iter().map(|&i| rows[i].response_ids.len()).sum();
        let mb_seqs = mb.len();
        opt.zero_grad();
        let mut sums = [0.0; METRICS];
        let row_tokens = |&i: &usize| rows[i].prompt_ids.len() + rows[i].response_ids.len();
        let micros = budget_chunks(&mb, s.micro_batch_rows, s.micro_batch_tokens, row_tokens);
        for round in micros.chunks(shard.world.max(1)) {
            let mine = match round.get(shard.rank) {
                Some(micro) => {
                    let batch: Vec<&TrainRow> = micro.iter().map(|&i| rows[i]).collect();
                    let m = pass.micro_batch(opt, &batch, mb_tokens, mb_seqs)?;
                    progress(micro.len());
                    m
                }
                None => {
                    if let Some(g) = pass.zero2 {
                        // No pass here this round: zeros for every owner, in the same order.
                        reduce_round(opt, g, pass.layers, false)?;
                    }
                    [0.0; METRICS]
                }
            };
            add_round(&mut sums, mine, round.len(), ranks)?;
        }
        // 5. With several processes, sum their gradients (each already divided by the
        //    whole mini-batch's count in step 4): every process now holds the one-process
        //    gradient, bit-identical across processes (under ZeRO-2 the owners hold it).
        if let (Some(g), None) = (ranks, pass.zero2) {
            opt.all_reduce_grads(g)?;
        }
        // 6. Clip the global gradient norm, then one AdamW step. A step whose gradient norm
        //    is not finite is skipped (weights and moments untouched), as the authors' code
        //    does; its row records the norm, and the step counter does not advance.
        let grad_norm = opt.clip_global_grad_norm(s.grad_clip, ranks)?;
        let lr = lr_at(s, opt.step);
        if grad_norm.is_finite() {
            opt.step(lr);
            if let Some(g) = ranks {
                opt.share_weights(g)?;
            }
        }
        let [loss, clip_frac, entropy, kl, approx_kl_old] = sums;
        out.push(UpdateRow {
            step: opt.step as u32,
            loss,
            clip_frac,
            grad_norm,
            entropy,
            tokens: mb_tokens as u64,
            lr,
            kl,
            approx_kl_old,
        });
    }
    Ok(out)
}

/// A micro-batch's metric sums: loss, clipped fraction, entropy, KL to the base, |log-ratio|
/// to the old policy (each over the mini-batch's tokens but the loss).
const METRICS: usize = 5;

/// Adds a round's metric sums to the mini-batch's in micro-batch order, the order one
/// process adds them in: process r's values (`mine`) are gathered (an all-reduce of rows
/// that are zero but one's, so exact), then added for the `present` processes that had a
/// micro-batch this round.
fn add_round(
    sums: &mut [f64; METRICS],
    mine: [f64; METRICS],
    present: usize,
    ranks: Option<&Group>,
) -> Result<()> {
    let Some(g) = ranks else {
        for (s, m) in sums.iter_mut().zip(mine) {
            *s += m;
        }
        return Ok(());
    };
    let mut rows = vec![0.0; g.world() * METRICS];
    rows[g.rank() * METRICS..(g.rank() + 1) * METRICS].copy_from_slice(&mine);
    let mut t = Tensor::from_slice(&rows);
    g.all_reduce_sum(&mut t)?;
    let rows = Vec::<f64>::try_from(&t)?;
    for row in rows.chunks_exact(METRICS).take(present) {
        for (s, m) in sums.iter_mut().zip(row) {
            *s += m;
        }
    }
    Ok(())
}

/// What every micro-batch's pass of one update shares.
struct Pass<'a> {
    s: &'a Settings,
    policy: &'a Policy,
    reference: Option<&'a Qwen3>,
    device: tch::Device,
    head_chunk: usize,
    /// ZeRO-2's group: gradients are handed to their owners pass by pass.
    zero2: Option<&'a Group>,
    layers: usize,
}

impl Pass<'_> {
    /// One micro-batch's forward and backward: its gradient goes into the f32 sums (or,
    /// ZeRO-2, to the owners); returns its metric sums.
    // `x = x - y` on tensors builds a new graph node; `x -= y` would write in place into a
    // tensor autograd still needs.
    #[allow(clippy::assign_op_pattern)]
    fn micro_batch(
        &self,
        opt: &mut AdamW,
        batch: &[&TrainRow],
        mb_tokens: usize,
        mb_seqs: usize,
    ) -> Result<[f64; METRICS]> {
        let (s, policy, device) = (self.s, self.policy, self.device);
        let pairs: Vec<(&[u32], &[u32])> = batch
            .iter()
            .map(|r| (r.prompt_ids.as_slice(), r.response_ids.as_slice()))
            .collect();
        // 1. Current log-probs and entropy of every response token: [N]. With
        //    checkpointing the blocks keep only their inputs until step 4's backward;
        //    a pass longer than `head_chunk` tokens runs the LM head in chunks, its
        //    backward pending until then too. Checkpointing runs on the padded layout
        //    (the settings refuse it with the shared-prompt one).
        let tf = TeacherForced::new(&policy.model, &pairs, s.layout, device);
        let ckpt = match (s.activation_checkpointing, tf.padded()) {
            (false, _) => None,
            (true, Some(ids)) => Some(policy.model.hidden_checkpointed(ids)),
            (true, None) => {
                return Err(Error::Input(
                    "activation checkpointing needs the padded layout, not shared-prompt".into(),
                ))
            }
        };
        let hidden = match &ckpt {
            Some(pass) => pass.hidden(),
            None => tf.hidden(&policy.model),
        };
        let st = tf.stats(
            &policy.model,
            &hidden,
            s.temperature,
            s.loss.entropy_coef != 0.0,
            self.head_chunk,
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
        if let (Some(base), true) = (self.reference, s.loss.kl_coef != 0.0) {
            let base_lp = tch::no_grad(|| {
                token_stats(
                    base,
                    &pairs,
                    s.layout,
                    s.temperature,
                    self.head_chunk,
                    device,
                )
                .logprob
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
        // Layers whose gradients went to their owners during the checkpointed backward.
        let mut layers_sent = false;
        if let Some(pass) = ckpt {
            match self.zero2 {
                // Each layer's gradient to its owner as soon as it is complete, so that
                // no more than one layer's stays here at once.
                Some(g) => {
                    pass.backward_each(|i| reduce_layer(opt, g, i))?;
                    layers_sent = true;
                }
                None => pass.backward()?,
            }
        }
        match self.zero2 {
            Some(g) => reduce_round(opt, g, self.layers, layers_sent)?,
            // Into the f32 gradient sums (bf16 parameters; see `AdamW::accumulate`).
            None => opt.accumulate(),
        }
        let tw = mb_tokens.max(1) as f64;
        let per_token_sum = |t: &Tensor| t.detach().sum(Kind::Double).double_value(&[]) / tw;
        Ok([
            loss.double_value(&[]),
            tl.clipped.sum(Kind::Double).double_value(&[]) / tw,
            per_token_sum(&st.entropy),
            kl_tok.as_ref().map_or(0.0, per_token_sum),
            per_token_sum(&(st.logprob.detach() - &old).abs()),
        ])
    }
}

/// ZeRO-2: decoder layer `i`'s gradients of this round to their owners.
fn reduce_layer(opt: &mut AdamW, g: &Group, i: usize) -> Result<()> {
    Ok(opt.reduce_grads(g, &|name| layer_of(name) == Some(i))?)
}

/// ZeRO-2: the rest of this round's gradients to their owners, in the order every process
/// uses: the decoder layers last to first (unless the checkpointed backward already sent
/// them, `layers_sent`), then the embeddings, final norm and head.
fn reduce_round(opt: &mut AdamW, g: &Group, layers: usize, layers_sent: bool) -> Result<()> {
    if !layers_sent {
        for i in (0..layers).rev() {
            reduce_layer(opt, g, i)?;
        }
    }
    Ok(opt.reduce_grads(g, &|name| layer_of(name).is_none())?)
}
