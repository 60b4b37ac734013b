//! One response as the estimators see it, and the checks of what they are given.

/// One response as the estimators see it.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    pub prompt_id: &'a str,
    pub sample_idx: u32,
    /// Sequence advantage `A_i`.
    pub advantage: f32,
    /// The response's reward (KTAE's right/wrong split: right when > 0).
    pub reward: f32,
    /// The response's token ids (read by `ktae` only; empty = not given).
    pub token_ids: &'a [u32],
    /// False when dynamic sampling excluded the response: it gets coefficients 0 and takes
    /// no part in the estimation.
    pub kept: bool,
    /// `tokens * dim` floats, token-major.
    pub features: &'a [f32],
    /// Per-token entropy (used by `top-entropy`).
    pub entropy: &'a [f32],
    /// Per-token probability `p` (the summary's gradient weights `(1 - p) |A|`; empty =
    /// weight `|A|` for every token).
    pub token_prob: &'a [f32],
    /// Per token, the task's label (read by the oracles only; empty = not labelled):
    /// unable to discriminate (`oracle-tokens`), filler (`oracle-filler`), or before the
    /// first error (`oracle-prefix`).
    pub shared: &'a [bool],
}

impl Response<'_> {
    /// The response's key, for messages.
    pub fn key(&self) -> deltarl_schemas::ResponseKey<'_> {
        deltarl_schemas::ResponseKey {
            prompt_id: self.prompt_id,
            sample_idx: self.sample_idx,
        }
    }
}

impl Response<'_> {
    pub fn tokens(&self) -> usize {
        self.entropy.len()
    }
}
