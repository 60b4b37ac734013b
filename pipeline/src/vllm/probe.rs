//! The probe a reloaded server must pass: a fixed text's tokens, scored by the server and
//! by the trainer, whose log-probs must agree.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_model::Dtype;

/// A fixed text whose tokens the probe scores: words, digits and LaTeX, as responses have.
pub const PROBE_TEXT: &str =
    "Question: what is 12 + 30? Let's think step by step. 12 + 30 = 42, so the answer is \\boxed{42}.";

/// The probe's length in tokens (short: the trainer scores it once per reload).
const PROBE_TOKENS: usize = 32;

/// The probe's token ids: the first [`PROBE_TOKENS`] tokens of [`PROBE_TEXT`], at most
/// `context` (the model's context length).
pub fn probe_ids(tokenizer: &deltarl_model::Tokenizer, context: usize) -> Result<Vec<u32>> {
    let mut ids = tokenizer.encode(PROBE_TEXT)?;
    ids.truncate(PROBE_TOKENS.min(context));
    Ok(ids)
}

/// The trainer's log-probs of `ids` under the policy in `folder`, loaded for this only.
pub fn trainer_logprobs(
    folder: &Path,
    device: tch::Device,
    dtype: Dtype,
    ids: &[u32],
) -> Result<Vec<f32>> {
    let p = deltarl_model::load(folder, device, dtype)
        .with_context(|| format!("cannot load the policy in {}", folder.display()))?;
    Ok(p.model.sequence_logprobs(ids, device)?)
}

/// max |a - b| over two equally long lists (an error when they are not).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> Result<f64> {
    if a.len() != b.len() || a.is_empty() {
        bail!(
            "the server scored {} probe tokens, the trainer {}",
            a.len(),
            b.len()
        );
    }
    Ok(a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, |m, d| if d.is_nan() || d > m { d } else { m }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_probe_difference_is_the_largest_and_nan_counts_as_a_mismatch() {
        assert_eq!(max_abs_diff(&[-1.0, -2.5], &[-1.25, -2.0]).unwrap(), 0.5);
        assert!(max_abs_diff(&[f32::NAN, -1.0], &[-1.0, -1.0])
            .unwrap()
            .is_nan());
        assert!(max_abs_diff(&[-1.0], &[-1.0, -2.0]).is_err());
        assert!(max_abs_diff(&[], &[]).is_err());
    }
}
