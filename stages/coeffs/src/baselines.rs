//! The baselines that change only which tokens count: the oracles' labelled tokens and
//! the "80/20" rule's highest-entropy ones.

use crate::{Error, Response, Result};

/// Which responses' labelled tokens an oracle reweights.
#[derive(Clone, Copy)]
pub(crate) enum Labelled {
    /// Every response's (`oracle-tokens`: the connective phrases; `oracle-filler`: the
    /// filler after the graded answer).
    All,
    /// Negative-advantage responses' only (`oracle-prefix`: the text before a wrong
    /// answer's first error, which only a negative advantage pushes the wrong way).
    Negative,
}

/// The oracles: `value` on labelled tokens (of the responses `which` names), 1 on the
/// others, 0 on responses not kept. Not normalised: the point is to remove (or shrink) the
/// labelled tokens' share of the gradient, leaving every other token's as DAPO has it.
pub(crate) fn oracle(
    value: f64,
    sorted: &[Response<'_>],
    which: Labelled,
) -> Result<Vec<Vec<f32>>> {
    sorted
        .iter()
        .map(|r| {
            if !r.kept {
                return Ok(vec![0.0; r.tokens()]);
            }
            if r.shared.len() != r.tokens() {
                return Err(Error::Input(format!(
                    "{}: {} token labels for {} tokens (the oracle estimators need each \
                     token's label)",
                    r.key(),
                    r.shared.len(),
                    r.tokens()
                )));
            }
            let applies = match which {
                Labelled::All => true,
                Labelled::Negative => r.advantage < 0.0,
            };
            Ok(r.shared
                .iter()
                .map(|&s| if s && applies { value as f32 } else { 1.0 })
                .collect())
        })
        .collect()
}

/// The "80/20" baseline, selecting as TRL's `top_entropy_quantile` does: the threshold is
/// the `1 - keep` quantile of the kept responses' token entropies, linearly interpolated in
/// f32 as `torch.quantile` computes it, and every token at or above it is kept (ties all
/// kept, so a little more than `keep` of the tokens when entropies repeat). The kept tokens
/// get `tokens / kept` and the others 0: the mean coefficient over the batch is 1, as for
/// DAPO (TRL's weight is 1 with the loss divided by all tokens: ours times `kept / tokens`).
pub(crate) fn top_entropy(keep: f64, sorted: &[Response<'_>]) -> Vec<Vec<f32>> {
    let mut all: Vec<f32> = sorted
        .iter()
        .filter(|r| r.kept)
        .flat_map(|r| r.entropy.iter().copied())
        .collect();
    let mut out: Vec<Vec<f32>> = sorted.iter().map(|r| vec![0.0; r.tokens()]).collect();
    if all.is_empty() {
        return out;
    }
    all.sort_by(f32::total_cmp);
    let threshold = torch_quantile(&all, 1.0 - keep);
    let kept = all.iter().filter(|&&e| e >= threshold).count();
    let weight = (all.len() as f64 / kept as f64) as f32;
    for (r, o) in sorted.iter().zip(&mut out) {
        if r.kept {
            for (c, &e) in o.iter_mut().zip(r.entropy) {
                if e >= threshold {
                    *c = weight;
                }
            }
        }
    }
    out
}

/// `torch.quantile(values, q)` (linear interpolation) of ascending, non-empty `values`, in
/// its f32 arithmetic: the rank `q (n - 1)` in f32, then torch's `lerp` between the values
/// below and above it (the form it uses for weights under one half and the other).
fn torch_quantile(sorted: &[f32], q: f64) -> f32 {
    let rank = q as f32 * (sorted.len() - 1) as f32;
    let below = rank as usize;
    let above = (rank.ceil() as usize).min(sorted.len() - 1);
    let w = rank - below as f32;
    let (a, b) = (sorted[below], sorted[above]);
    if w.abs() < 0.5 {
        a + w * (b - a)
    } else {
        b - (b - a) * (1.0 - w)
    }
}
