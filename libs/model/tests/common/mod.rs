//! Helpers the model's test binaries share.
#![allow(clippy::unwrap_used)]

use deltarl_model::Policy;
use tch::{Kind, Tensor};

/// Teacher-forced top-2 logit gaps at each response position of `prompt + tokens`.
pub fn greedy_gaps(p: &Policy, prompt: &[u32], tokens: &[u32]) -> Vec<f64> {
    let ids: Vec<i64> = prompt.iter().chain(tokens).map(|&x| i64::from(x)).collect();
    let logits = tch::no_grad(|| p.model.forward(&Tensor::from_slice(&ids).unsqueeze(0)))
        .squeeze_dim(0)
        .to_kind(Kind::Double);
    let (top, _) = logits.topk(2, -1, true, true);
    let gap = top.select(1, 0) - top.select(1, 1);
    let gap = Vec::<f64>::try_from(gap).unwrap();
    gap[prompt.len() - 1..prompt.len() - 1 + tokens.len()].to_vec()
}
