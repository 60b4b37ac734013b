//! KTAE (key-token advantage estimation): a term added to each token's sequence advantage,
//! from how strongly the presence of its token id in a prompt group's responses goes with
//! their being right. No model and no vectors: statistics of counts within the group.
//!
//! For one prompt group (its kept responses), per token id v:
//!
//! 1. Split the responses: right (reward > 0, `n_r` of them) and wrong (`n_w`).
//!    When either side is empty every score is 0 (nothing to contrast).
//! 2. The 2 x 2 table of v: `a` right responses contain v, `b` wrong ones do,
//!    `c = n_r - a`, `d = n_w - b`.
//! 3. Fisher's exact test, two-sided: `p = Σ P(k)` over the tables with the same margins
//!    that are at most as likely as the observed one (hypergeometric `P`); its evidence is
//!    `f = exp(-2 p)`, and 0 when `p = 1` (every table counted: the observed one is the
//!    most likely, no association).
//! 4. The information gain of v's presence about rightness, in bits:
//!    `ig = H(right) - H(right | v present or not)`.
//! 5. The direction: Cohen's h between the two sides' presence rates,
//!    `h = asin √(a / n_r) - asin √(b / n_w)`, plus (with `tf`) a contrast of BM25-style
//!    saturated term frequencies, `tf_r / (tf_w + 1e-5) - tf_w / (tf_r + 1e-5)`, where
//!    `tf = q (k1 + 1) / (q + K)`, `q` v's share of that side's tokens, `k1 = 2`, and
//!    `K = k1 (1 - b + b · tokens / mean tokens of the two sides)`, `b = 0.5`.
//! 6. `z = (alpha f + beta ig) (h [+ tf contrast]) / (alpha + beta)`; the score is
//!    `top (2 σ(z) - 1) = top tanh(z / 2)`, in (-top, top); end-of-sequence tokens get 0.
//!
//! A token's advantage is then `A_i + score(v)`: tokens that go with right answers are
//! pushed up in right and wrong responses alike, those that go with wrong ones down.
//!
//! Where this differs from the authors' code (same formulas, stated in f64):
//! - it computes in float32 and tests `p != 1.0` exactly, so whether a table whose exact
//!   p-value is 1 (the observed table is the most likely one: frequent, e.g. a token in
//!   half of each side) scores with evidence 0 or with `exp(-2)` is decided by round-off
//!   there: of the 162 such ids of `tests/ktae_reference.json` it scored 93 with
//!   `exp(-2)`. Here `p = 1` is "every table counted", exactly, and scores 0, which is what
//!   its test intends; ties between table probabilities are equal within a relative 1e-7
//!   (scipy's rule);
//! - its presence rates carry a `+ 1e-10` in the denominator, which float32 rounds away
//!   (`n + 1e-10 == n` for n ≥ 1), so it is not written here;
//! - a side whose responses hold no tokens would divide by zero there; here its term
//!   frequencies are 0;
//! - it zeroes one token id (151643, Qwen2.5's end of text); here every end-of-sequence id
//!   the model declares ([`crate::Settings::end_ids`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{Error, Response, Result};

/// KTAE's hyper-parameters; `docs/config.md` maps them to the reference's names.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KtaeSettings {
    /// Weight of Fisher's exact test (the reference's `alpha`).
    pub alpha: f64,
    /// Weight of the information gain (the reference's `beta_ig`).
    pub beta: f64,
    /// Whether the term-frequency contrast joins Cohen's h (the reference's `gamma_tf`,
    /// which it reads as a switch: on when non-zero).
    pub tf: bool,
    /// The largest score: scores lie in (-top, top) (the reference's `top`). 0 makes every
    /// score 0: DAPO exactly.
    pub top: f64,
}

impl Default for KtaeSettings {
    /// What the authors' runs computed: their advantage function passes alpha = beta_ig =
    /// gamma_tf = top = 1 whatever the run's config says.
    fn default() -> Self {
        KtaeSettings {
            alpha: 1.0,
            beta: 1.0,
            tf: true,
            top: 1.0,
        }
    }
}

/// BM25's term-frequency saturation constant.
const K1: f64 = 2.0;
/// BM25's length normalisation weight.
const B: f64 = 0.5;
/// The reference's guard in the term-frequency ratio.
const TF_EPS: f64 = 1e-5;
/// Relative tolerance under which two table probabilities are the same (scipy's).
const TIE: f64 = 1e-7;

/// What KTAE counts of one token id in one prompt group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCounts {
    /// Right responses holding the id, and wrong ones.
    pub a: u64,
    pub b: u64,
    /// Right and wrong responses in the group.
    pub n_right: u64,
    pub n_wrong: u64,
    /// Occurrences of the id among the right responses' tokens, and the wrong ones'.
    pub occ_right: u64,
    pub occ_wrong: u64,
    /// Tokens of the right responses, and of the wrong ones.
    pub tokens_right: u64,
    pub tokens_wrong: u64,
}

impl TokenCounts {
    /// Steps 3 and 4: Fisher's evidence `exp(-2 p)` (0 when `p = 1`) and the information
    /// gain, each 0 when its weight is 0.
    pub fn evidence(&self, s: &KtaeSettings) -> (f64, f64) {
        let (a, b) = (self.a, self.b);
        let (c, d) = (self.n_right - a, self.n_wrong - b);
        let f = if s.alpha != 0.0 {
            fisher_evidence(a, b, c, d)
        } else {
            0.0
        };
        let ig = if s.beta != 0.0 {
            information_gain(a, b, c, d)
        } else {
            0.0
        };
        (f, ig)
    }

    /// Step 5: Cohen's h, plus the term-frequency contrast with `tf`.
    pub fn direction(&self, s: &KtaeSettings) -> f64 {
        let mut x = cohen_h(
            self.a as f64 / self.n_right as f64,
            self.b as f64 / self.n_wrong as f64,
        );
        if s.tf {
            let mean = (self.tokens_right + self.tokens_wrong) as f64 / 2.0;
            let tf_r = saturated_tf(self.occ_right, self.tokens_right, mean);
            let tf_w = saturated_tf(self.occ_wrong, self.tokens_wrong, mean);
            x += tf_r / (tf_w + TF_EPS) - tf_w / (tf_r + TF_EPS);
        }
        x
    }
}

/// Step 6: the score of evidence `f` and `ig` in direction `x`, in (-top, top).
pub fn score(s: &KtaeSettings, f: f64, ig: f64, x: f64) -> f64 {
    let z = (s.alpha * f + s.beta * ig) * x / (s.alpha + s.beta);
    s.top * (z / 2.0).tanh()
}

/// Steps 1 and 2: the counts of every token id the group's responses hold (`group`: its
/// kept responses); empty when either side is (nothing to contrast).
pub fn group_counts(group: &[Response<'_>]) -> BTreeMap<u32, TokenCounts> {
    let right: Vec<&Response<'_>> = group.iter().filter(|r| r.reward > 0.0).collect();
    let wrong: Vec<&Response<'_>> = group.iter().filter(|r| r.reward <= 0.0).collect();
    let mut out: BTreeMap<u32, TokenCounts> = BTreeMap::new();
    if right.is_empty() || wrong.is_empty() {
        return out;
    }
    let (n_right, n_wrong) = (right.len() as u64, wrong.len() as u64);
    let tokens = |rs: &[&Response<'_>]| rs.iter().map(|r| r.token_ids.len() as u64).sum();
    let (tokens_right, tokens_wrong) = (tokens(&right), tokens(&wrong));
    for (side, is_right) in [(&right, true), (&wrong, false)] {
        for r in side.iter() {
            let distinct: BTreeSet<u32> = r.token_ids.iter().copied().collect();
            for &v in r.token_ids {
                let c = out.entry(v).or_insert(TokenCounts {
                    n_right,
                    n_wrong,
                    tokens_right,
                    tokens_wrong,
                    ..TokenCounts::default()
                });
                if is_right {
                    c.occ_right += 1;
                } else {
                    c.occ_wrong += 1;
                }
            }
            for v in distinct {
                if let Some(c) = out.get_mut(&v) {
                    if is_right {
                        c.a += 1;
                    } else {
                        c.b += 1;
                    }
                }
            }
        }
    }
    out
}

/// One prompt group's key-token score of every token id its responses hold (`group`: the
/// group's kept responses); end-of-sequence ids score 0. Ids absent from the map score 0.
pub fn group_scores(
    s: &KtaeSettings,
    group: &[Response<'_>],
    end_ids: &[u32],
) -> BTreeMap<u32, f64> {
    if s.top == 0.0 {
        return BTreeMap::new();
    }
    group_counts(group)
        .into_iter()
        .map(|(v, c)| {
            if end_ids.contains(&v) {
                return (v, 0.0);
            }
            let (f, ig) = c.evidence(s);
            (v, score(s, f, ig, c.direction(s)))
        })
        .collect()
}

/// Fisher's two-sided exact test on the table `[[a, b], [c, d]]` (rows: token present,
/// absent; columns: right, wrong) as evidence: `exp(-2 p)`, 0 when `p = 1`.
pub fn fisher_evidence(a: u64, b: u64, c: u64, d: u64) -> f64 {
    match fisher_p(a, b, c, d) {
        None => 0.0,
        Some(p) => (-2.0 * p).exp(),
    }
}

/// The two-sided p-value of Fisher's exact test, `None` when it is 1 exactly (every table
/// with these margins is at most as likely as the observed one).
pub fn fisher_p(a: u64, b: u64, c: u64, d: u64) -> Option<f64> {
    // Margins: `present` responses hold the token, `right` are right, `n` in all; the
    // count of right responses holding it ranges over [lo, hi].
    let (present, right, n) = (a + b, a + c, a + b + c + d);
    let lo = (present + right).saturating_sub(n);
    let hi = present.min(right);
    // Hypergeometric weights by the ratio P(k+1) / P(k) =
    // (right - k)(present - k) / ((k + 1)(n - right - present + k + 1)), in logs from
    // P(lo) (no overflow whatever n), then normalised.
    let mut log_w = Vec::with_capacity((hi - lo + 1) as usize);
    let mut acc = 0.0f64;
    log_w.push(acc);
    for k in lo..hi {
        let num = ((right - k) * (present - k)) as f64;
        let den = ((k + 1) * (n + k + 1 - right - present)) as f64;
        acc += num.ln() - den.ln();
        log_w.push(acc);
    }
    let top = log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = log_w.iter().map(|l| (l - top).exp()).collect();
    let total: f64 = w.iter().sum();
    let observed = w[(a - lo) as usize];
    let bound = observed * (1.0 + TIE);
    if w.iter().all(|&x| x <= bound) {
        return None;
    }
    let tail: f64 = w.iter().filter(|&&x| x <= bound).sum();
    Some(tail / total)
}

/// Information gain, in bits, of the token's presence about rightness, on the table
/// `[[a, b], [c, d]]` (rows: present, absent; columns: right, wrong).
pub fn information_gain(a: u64, b: u64, c: u64, d: u64) -> f64 {
    let n = (a + b + c + d) as f64;
    if n == 0.0 {
        return 0.0;
    }
    // H of a two-way split of `x + y`, 0 for an empty one.
    let h2 = |x: u64, y: u64| {
        let t = (x + y) as f64;
        if t == 0.0 {
            return 0.0;
        }
        [x, y]
            .iter()
            .map(|&k| {
                let p = k as f64 / t;
                if p > 0.0 {
                    -p * p.log2()
                } else {
                    0.0
                }
            })
            .sum::<f64>()
    };
    let h_y = h2(a + c, b + d);
    let h_y_x = (a + b) as f64 / n * h2(a, b) + (c + d) as f64 / n * h2(c, d);
    h_y - h_y_x
}

/// Cohen's h between two proportions.
pub fn cohen_h(p1: f64, p2: f64) -> f64 {
    p1.clamp(0.0, 1.0).sqrt().asin() - p2.clamp(0.0, 1.0).sqrt().asin()
}

/// BM25's saturated frequency of a token seen `occurrences` times among a side's `tokens`,
/// that side's length normalised by `mean_tokens`; 0 on a side without tokens.
fn saturated_tf(occurrences: u64, tokens: u64, mean_tokens: f64) -> f64 {
    if tokens == 0 {
        return 0.0;
    }
    let q = occurrences as f64 / tokens as f64;
    let k = K1 * (1.0 - B + B * tokens as f64 / mean_tokens);
    q * (K1 + 1.0) / (q + k)
}

/// Per response, per token: the coefficients and the shifts.
pub(crate) struct CoeffsAndShifts {
    pub coeffs: Vec<Vec<f32>>,
    pub shifts: Vec<Vec<f32>>,
}

/// KTAE over responses in the fixed order (groups consecutive): coefficient 1 and each
/// token's score as its shift on kept responses, 0 and 0 on the others.
pub(crate) fn ktae(
    s: &KtaeSettings,
    sorted: &[Response<'_>],
    end_ids: &[u32],
) -> Result<CoeffsAndShifts> {
    if let Some(r) = sorted.iter().find(|r| r.token_ids.len() != r.tokens()) {
        return Err(Error::Input(format!(
            "{}: {} token ids for {} tokens (ktae needs each token's id)",
            r.key(),
            r.token_ids.len(),
            r.tokens()
        )));
    }
    let mut coeffs = Vec::with_capacity(sorted.len());
    let mut shifts = Vec::with_capacity(sorted.len());
    let mut start = 0;
    while start < sorted.len() {
        let id = sorted[start].prompt_id;
        let end = start
            + sorted[start..]
                .iter()
                .take_while(|r| r.prompt_id == id)
                .count();
        let group = &sorted[start..end];
        let kept: Vec<Response<'_>> = group.iter().filter(|r| r.kept).copied().collect();
        let scores = group_scores(s, &kept, end_ids);
        for r in group {
            if r.kept {
                coeffs.push(vec![1.0; r.tokens()]);
                shifts.push(
                    r.token_ids
                        .iter()
                        .map(|v| scores.get(v).copied().unwrap_or(0.0) as f32)
                        .collect(),
                );
            } else {
                coeffs.push(vec![0.0; r.tokens()]);
                shifts.push(vec![0.0; r.tokens()]);
            }
        }
        start = end;
    }
    Ok(CoeffsAndShifts { coeffs, shifts })
}
