//! Supervised warm start: weighted token-mean cross-entropy on worked solutions (+ EOS).

use deltarl_model::Policy;
use deltarl_teacher::{token_stats, Layout};
use tch::{Kind, Tensor};

use deltarl_optim::AdamW;

/// Warm-start schedule.
#[derive(Clone, Debug)]
pub struct SftSettings {
    pub steps: usize,
    pub lr: f64,
    pub warmup_steps: usize,
    pub grad_clip: f64,
    /// The loss weight of each token id (ids past the end, and all when empty, weigh 1:
    /// the plain token mean).
    pub token_weights: Vec<f32>,
}

/// Trains on the examples `batch(step)` returns (prompt ids, target ids) for the given
/// number of steps; `log(step, loss)` is called after every step. Returns the last loss.
pub fn train(
    s: &SftSettings,
    policy: &Policy,
    opt: &mut AdamW,
    batch: &mut dyn FnMut(usize) -> Vec<(Vec<u32>, Vec<u32>)>,
    log: &mut dyn FnMut(usize, f64),
) -> f64 {
    let device = policy.model.lm_head_weight().device();
    let mut last = f64::NAN;
    for step in 0..s.steps {
        let examples = batch(step);
        let pairs: Vec<(&[u32], &[u32])> = examples
            .iter()
            .map(|(p, t)| (p.as_slice(), t.as_slice()))
            .collect();
        opt.zero_grad();
        // The tiny task's vocabulary is small: the head runs whole.
        let st = token_stats(
            &policy.model,
            &pairs,
            Layout::Padded,
            1.0,
            usize::MAX,
            device,
        );
        // Token-mean negative log-likelihood over every target token of the batch; with
        // weights, the weighted mean sum(w * nll) / sum(w), so they move effort between
        // tokens without changing the loss's scale.
        let loss = if s.token_weights.iter().all(|&w| w == 1.0) {
            -st.logprob.mean(Kind::Float)
        } else {
            let w: Vec<f32> = examples
                .iter()
                .flat_map(|(_, t)| t.iter())
                .map(|&id| s.token_weights.get(id as usize).copied().unwrap_or(1.0))
                .collect();
            let total: f64 = w.iter().map(|&x| f64::from(x)).sum();
            let w = Tensor::from_slice(&w).to_device(device);
            -(&st.logprob * &w).sum(Kind::Float) / total.max(1e-12)
        };
        loss.backward();
        opt.clip_grad_norm(s.grad_clip);
        // Linear warm-up, then cosine decay to 10 % of the peak.
        let lr = if step < s.warmup_steps {
            s.lr * (step + 1) as f64 / s.warmup_steps as f64
        } else {
            let t = (step - s.warmup_steps) as f64 / (s.steps - s.warmup_steps).max(1) as f64;
            s.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * t).cos()))
        };
        opt.step(lr);
        last = loss.double_value(&[]);
        log(step, last);
    }
    last
}
