//! AdamW (PyTorch semantics, decoupled weight decay) with state that is saved beside the
//! policy, so the next iteration continues the optimizer.
//!
//! Mixed precision: a parameter that is not f32 (bf16 compute) gets an f32 *master* copy.
//! The step is taken on the master in f32 and the working copy is refreshed from it
//! (rounded to its dtype). Updating bf16 weights in place would lose the step: bf16 has 8
//! significant bits, so a 1e-6 step on a weight of size 0.02 rounds away, and weight decay
//! of lr * wd = 1e-7 never changes a weight at all.
//!
//! Gradients of such a parameter are accumulated in f32 too ([`AdamW::accumulate`], after
//! each micro-batch's backward): libtorch gives a bf16 parameter a bf16 `.grad`, and
//! summing micro-batches there would round every partial sum to 8 significant bits, so
//! small contributions (small-advantage tokens) vanish next to large ones. The micro-batch's
//! bf16 gradient is added to an f32 buffer and cleared; the norm, the clipping, the
//! all-reduce and the step read the f32 sum (as FSDP reduces f32 gradients of f32 masters).
//!
//! With several processes the gradients are summed over them ([`AdamW::all_reduce_grads`])
//! and every process takes the same step. Sharded state ([`Sharding`]; ZeRO-1, as torch's
//! `ZeroRedundancyOptimizer` partitions): each parameter has one owner process, which
//! alone keeps its f32 master and moments and steps it; the owner then broadcasts the new
//! weights ([`AdamW::share_weights`]). Each process saves and loads the state it owns, in
//! the one file a single process writes ([`AdamW::save`]). ZeRO-2 shards the f32 gradient
//! sums too: each pass's gradients go to their owners as soon as they are complete
//! ([`AdamW::reduce_grads`], in `zero2.rs`), and only the owner keeps a sum.

use deltarl_dist::Group;
use deltarl_schemas::Shard;
use tch::{Device, Kind, Tensor};

use crate::Result;

/// AdamW hyper-parameters (the learning rate is each step's: [`AdamW::step`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWSettings {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// What the processes of a group divide among themselves (each parameter has one owner).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sharding {
    /// Nothing: every process keeps all the state and takes the whole step.
    #[default]
    Replicated,
    /// ZeRO-1: the f32 master weights and moments; every process keeps whole f32
    /// gradient sums, summed over the processes before the step.
    Optimizer,
    /// ZeRO-2: the optimizer state and the f32 gradient sums. Each pass's gradients are
    /// summed into their owner's alone ([`AdamW::reduce_grads`]) and freed elsewhere.
    Gradients,
}

/// The optimizer's state of one parameter.
pub(crate) struct Slot {
    pub(crate) name: String,
    /// The model's parameter (the working copy the forward pass uses).
    pub(crate) param: Tensor,
    /// f32 master weights when the parameter is not f32.
    pub(crate) master: Option<Tensor>,
    /// The f32 sum of the micro-batch gradients when the parameter is not f32 (every
    /// process holds it whole: each accumulates its own micro-batches before the sum over
    /// processes). An f32 parameter accumulates in its own `.grad`. Under ZeRO-2 only
    /// the owner has one, for a parameter of any dtype: the sum over the processes.
    pub(crate) grad32: Option<Tensor>,
    /// ZeRO-2: the f32 sum of the partial gradients this process moved out of a non-f32
    /// `.grad` during the current pass (a chunked LM head's, chunk by chunk), handed to
    /// the owner with the rest of the pass's gradient and then dropped.
    pub(crate) pending: Option<Tensor>,
    pub(crate) exp_avg: Tensor,
    pub(crate) exp_avg_sq: Tensor,
    /// The process that keeps this parameter's state and steps it (0 unsharded).
    pub(crate) owner: usize,
}

impl Slot {
    /// The f32 weights the step is taken on.
    fn weights(&mut self) -> &mut Tensor {
        self.master.as_mut().unwrap_or(&mut self.param)
    }

    /// Moves a pending bf16 gradient into the f32 sum (exactly: bf16 widens to f32 without
    /// rounding; only the f32 addition rounds) and clears it.
    fn accumulate(&mut self, sharding: Sharding) {
        if sharding == Sharding::Gradients {
            // Autograd sums an f32 gradient in place, exactly as here; the rest waits for
            // a gradient to move.
            if self.param.kind() == Kind::Float || !self.param.grad().defined() {
                return;
            }
            let param = &self.param;
            self.pending
                .get_or_insert_with(|| Tensor::zeros(param.size(), (Kind::Float, param.device())));
        }
        let Some(sum) = self.pending.as_mut().or(self.grad32.as_mut()) else {
            return;
        };
        let mut g = self.param.grad();
        if g.defined() {
            tch::no_grad(|| {
                let _ = sum.g_add_(&g.to_kind(Kind::Float));
                let _ = g.zero_();
            });
        }
    }

    /// The f32 gradient the step reads (undefined when an f32 parameter has none yet, and
    /// under ZeRO-2 where another process owns the parameter).
    fn grad(&self, sharding: Sharding) -> Tensor {
        match (&self.grad32, sharding) {
            (Some(sum), _) => sum.shallow_clone(),
            (None, Sharding::Gradients) => Tensor::new(),
            (None, Sharding::Replicated | Sharding::Optimizer) => self.param.grad(),
        }
    }
}

/// Optimizer state: f32 moments (and f32 master weights for non-f32 parameters) per
/// parameter, sorted by name, and the step count.
pub struct AdamW {
    pub settings: AdamWSettings,
    pub(crate) params: Vec<Slot>,
    pub step: u64,
    /// This process's rank when the state is sharded (ZeRO-1); None = every slot here.
    pub(crate) sharded_rank: Option<usize>,
    /// What is sharded ([`Sharding::Replicated`] with one process).
    pub(crate) sharding: Sharding,
}

impl AdamW {
    pub fn new(vs: &tch::nn::VarStore, settings: AdamWSettings) -> Self {
        Self::sharded(vs, settings, Shard::WHOLE, Sharding::Replicated)
    }

    /// The optimizer of process `shard.rank` of `shard.world`, its state sharded as
    /// `sharding` says: parameters go, largest first, to the process holding the fewest
    /// elements so far (ties to the lower rank, so every process computes the same
    /// owners), and this process allocates master weights and moments (and, ZeRO-2,
    /// gradient sums) for its own parameters only. With [`Shard::WHOLE`] or
    /// [`Sharding::Replicated`] every parameter is this process's.
    pub fn sharded(
        vs: &tch::nn::VarStore,
        settings: AdamWSettings,
        shard: Shard,
        sharding: Sharding,
    ) -> Self {
        let shard = if sharding == Sharding::Replicated {
            Shard::WHOLE
        } else {
            shard
        };
        let sharding = if shard.is_whole() {
            Sharding::Replicated
        } else {
            sharding
        };
        let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let mut owners = vec![0usize; vars.len()];
        let mut order: Vec<usize> = (0..vars.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(vars[i].1.numel()));
        let mut load = vec![0usize; shard.world.max(1)];
        for i in order {
            let owner = (0..load.len()).min_by_key(|&r| (load[r], r)).unwrap_or(0);
            load[owner] += vars[i].1.numel();
            owners[i] = owner;
        }
        let params = vars
            .into_iter()
            .zip(owners)
            .map(|((name, param), owner)| {
                let mine = owner == shard.rank;
                let f32_zeros = || {
                    if mine {
                        param.zeros_like().to_kind(Kind::Float)
                    } else {
                        Tensor::zeros([0], (Kind::Float, Device::Cpu))
                    }
                };
                let master = (mine && param.kind() != Kind::Float)
                    .then(|| tch::no_grad(|| param.detach().to_kind(Kind::Float)));
                let grad32 = match sharding {
                    Sharding::Gradients => mine,
                    Sharding::Replicated | Sharding::Optimizer => param.kind() != Kind::Float,
                }
                .then(|| param.zeros_like().to_kind(Kind::Float));
                Slot {
                    grad32,
                    pending: None,
                    exp_avg: f32_zeros(),
                    exp_avg_sq: f32_zeros(),
                    master,
                    name,
                    param,
                    owner,
                }
            })
            .collect();
        AdamW {
            settings,
            params,
            step: 0,
            sharded_rank: (!shard.is_whole()).then_some(shard.rank),
            sharding,
        }
    }

    /// f32 elements of optimizer state this process holds (moments and master weights).
    pub fn state_elements(&self) -> usize {
        self.params
            .iter()
            .map(|s| {
                s.exp_avg.numel()
                    + s.exp_avg_sq.numel()
                    + s.master.as_ref().map_or(0, |m| m.numel())
            })
            .sum()
    }

    /// f32 elements of the largest parameter: the most a state tensor (a moment or master
    /// copy) holds, whoever owns it.
    pub fn largest_param_elements(&self) -> usize {
        self.params
            .iter()
            .map(|s| s.param.numel())
            .max()
            .unwrap_or(0)
    }

    /// Adds the gradients the last backward left in non-f32 parameters to their f32 sums and
    /// clears them. Call it after every micro-batch's backward; the norm, clipping, the
    /// all-reduce and the step call it too, so a pending gradient is never lost.
    pub fn accumulate(&mut self) {
        for s in &mut self.params {
            s.accumulate(self.sharding);
        }
    }

    /// [`AdamW::accumulate`] for one parameter (the same tensor as the model's), when only
    /// it can have a pending gradient: cheaper than visiting every parameter.
    pub fn accumulate_param(&mut self, param: &Tensor) {
        let ptr = param.data_ptr();
        if let Some(s) = self.params.iter_mut().find(|s| s.param.data_ptr() == ptr) {
            s.accumulate(self.sharding);
        }
    }

    /// What this optimizer's processes divide among themselves.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// f32 elements of gradient sums this process holds (non-f32 parameters only; under
    /// ZeRO-2 its own parameters only).
    pub fn grad_sum_elements(&self) -> usize {
        self.params
            .iter()
            .map(|s| s.grad32.as_ref().map_or(0, Tensor::numel))
            .sum()
    }

    /// Sums the gradients over the processes of `g`, in f32, in place. Each process's loss
    /// already divides by the whole mini-batch's token count (or response count), so the
    /// sum is the gradient one process computes over the whole mini-batch. A parameter
    /// this process gave no gradient (no micro-batch of this mini-batch was its) adds zeros.
    /// Under ZeRO-2 the gradients went to their owners already: refused.
    pub fn all_reduce_grads(&mut self, g: &Group) -> Result<()> {
        if self.sharding == Sharding::Gradients {
            return Err(crate::Error::Sharding(
                "all_reduce_grads under ZeRO-2: the gradient sums are by owner (reduce_grads)",
            ));
        }
        self.accumulate();
        let missing: Vec<&Tensor> = self
            .params
            .iter()
            .filter(|s| s.grad32.is_none() && !s.param.grad().defined())
            .map(|s| &s.param)
            .collect();
        if !missing.is_empty() {
            // d(0 * sum p)/dp = 0: defines the gradients without changing any.
            let zero = missing
                .iter()
                .map(|p| p.sum(Kind::Float) * 0.0)
                .reduce(|a, b| a + b);
            if let Some(z) = zero {
                z.backward();
            }
        }
        for s in &self.params {
            let mut grad = s.grad(self.sharding);
            g.all_reduce_sum(&mut grad)?;
        }
        Ok(())
    }

    /// After a sharded step: each parameter's owner sends its new weights to the others.
    pub fn share_weights(&mut self, g: &Group) -> Result<()> {
        if self.sharded_rank.is_none() {
            return Ok(());
        }
        for s in &self.params {
            let mut w = s.param.detach();
            g.broadcast(&mut w, s.owner)?;
        }
        Ok(())
    }

    /// Drops every gradient and gradient sum, releasing their memory, once the last step
    /// is taken (the state and the weights stay): the saves that follow need none of it.
    /// The gradient sums are gone afterwards ([`AdamW::grad_sum_elements`] is 0).
    pub fn release_grads(&mut self) -> Result<()> {
        for s in &mut self.params {
            deltarl_dist::free_grad(&mut s.param)?;
            s.grad32 = None;
            s.pending = None;
        }
        Ok(())
    }

    pub fn zero_grad(&mut self) {
        for s in &mut self.params {
            s.param.zero_grad();
            s.pending = None;
            if let Some(sum) = &mut s.grad32 {
                let _ = tch::no_grad(|| sum.zero_());
            }
        }
    }

    /// Each parameter's squared gradient norm (0 where there is none here), in order.
    pub(crate) fn squared_norms(&mut self) -> Vec<f64> {
        self.accumulate();
        self.params
            .iter()
            .map(|s| {
                let g = s.grad(self.sharding);
                if g.defined() {
                    g.to_kind(Kind::Double)
                        .pow_tensor_scalar(2)
                        .sum(Kind::Double)
                        .double_value(&[])
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// L2 norm of all gradients (the f32 sums) this process holds.
    pub fn grad_norm(&mut self) -> f64 {
        self.squared_norms().iter().sum::<f64>().sqrt()
    }

    /// Clips gradients to `max_norm` (no-op when max_norm <= 0) and returns the norm before.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> f64 {
        let norm = self.grad_norm();
        self.clip_to(norm, max_norm);
        norm
    }

    /// Scales the gradients this process holds by `max_norm / norm` when the global norm
    /// is above `max_norm` (> 0).
    pub(crate) fn clip_to(&mut self, norm: f64, max_norm: f64) {
        if max_norm > 0.0 && norm > max_norm {
            let scale = max_norm / (norm + 1e-6);
            let sharding = self.sharding;
            tch::no_grad(|| {
                for s in &mut self.params {
                    let mut g = s.grad(sharding);
                    if g.defined() {
                        let _ = g.g_mul_scalar_(scale);
                    }
                }
            });
        }
    }

    /// One step at learning rate `lr`, on the f32 master weights where there are any; the
    /// working copies are then refreshed from them.
    pub fn step(&mut self, lr: f64) {
        self.accumulate();
        self.step += 1;
        let s = self.settings;
        let t = self.step as i32;
        let bc1 = 1.0 - s.beta1.powi(t);
        let bc2 = 1.0 - s.beta2.powi(t);
        let (rank, sharding) = (self.sharded_rank, self.sharding);
        tch::no_grad(|| {
            for slot in &mut self.params {
                let g = slot.grad(sharding);
                if !g.defined() || rank.is_some_and(|r| r != slot.owner) {
                    continue;
                }
                // Decoupled weight decay, then the Adam moments, all in f32.
                let (m, v) = (&mut slot.exp_avg, &mut slot.exp_avg_sq);
                let _ = m.g_mul_scalar_(s.beta1);
                let _ = m.g_add_(&(&g * (1.0 - s.beta1)));
                let _ = v.g_mul_scalar_(s.beta2);
                let _ = v.g_add_(&(&g * &g * (1.0 - s.beta2)));
                let denom = (v.sqrt() / bc2.sqrt()) + s.eps;
                let update = (&*m / &denom) * (lr / bc1);
                let w = slot.weights();
                let _ = w.g_mul_scalar_(1.0 - lr * s.weight_decay);
                let _ = w.g_sub_(&update);
                if let Some(master) = &slot.master {
                    // The bf16 working copy: the master rounded to nearest.
                    slot.param.copy_(&master.to_kind(slot.param.kind()));
                }
            }
        });
    }

    /// The f32 gradient of a parameter as the step reads it: for a non-f32 parameter the
    /// f32 sum of its micro-batch gradients (for tests and diagnostics).
    pub fn grad(&self, name: &str) -> Option<Tensor> {
        self.params
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.grad(self.sharding))
            .filter(Tensor::defined)
    }

    /// The f32 master weights of a parameter that is not f32 itself (for tests and plans).
    pub fn master(&self, name: &str) -> Option<&Tensor> {
        self.params
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.master.as_ref())
    }
}
