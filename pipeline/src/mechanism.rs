//! DelTA's mechanism read directly, before any accuracy: on a run of a built-in arithmetic
//! task, do the coefficients separate the tokens the method's premise says they should,
//! weighted by each token's share of the policy gradient?
//!
//! Two classes of tokens a side, from the task's own labels (no model in the loop):
//! * **wrong answers** (advantage < 0): the correct prefix, the text before the first error
//!   ([`deltarl_data::Task::correct_prefix_tokens`]), which a negative advantage pushes
//!   down although it is right, against the tokens from the first error on;
//! * **right answers** (advantage > 0): the prefix shared with a wrong answer of the same
//!   prompt group (the longest run of equal token ids from the start, over the group's
//!   negative-advantage responses), against the rest.
//!
//! The premise (shared text dilutes the update, so it should count less) predicts that the
//! second class of each side gets the larger coefficients: a gradient-weighted AUROC above
//! 0.5. A token's weight is `(1 - p)·|A|`, the size of its policy-gradient term at the
//! logits before any coefficient (as the coeffs stage's summary weighs tokens).

pub mod gradients;

use std::collections::BTreeMap;

/// One response as the readout needs it: its coeffs row, its token probabilities and its
/// tokens' correct-prefix labels, all the same length.
#[derive(Clone, Copy)]
pub struct Response<'a> {
    pub prompt_id: &'a str,
    pub advantage: f32,
    pub token_ids: &'a [u32],
    pub coeff: &'a [f32],
    /// `p` of each token (empty: weight `|A|` for every token).
    pub token_prob: &'a [f32],
    /// Before the first error, per token.
    pub correct_prefix: &'a [bool],
}

/// The readout of one side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Side {
    /// P(c of a discriminative token > c of a shared one), ties half, each token drawn
    /// with probability proportional to its weight; None when a class has no weight.
    pub auroc: Option<f64>,
    /// Tokens in the shared and the discriminative class.
    pub tokens: [usize; 2],
    /// The shared class's share of the side's gradient weight.
    pub shared_share: f64,
    /// Weight-averaged coefficient of each class (NaN for an empty class).
    pub mean_coeff: [f64; 2],
}

/// The readout of one iteration: wrong answers, then right ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Readout {
    pub wrong: Side,
    pub right: Side,
}

/// A coefficient and its weight.
#[derive(Clone, Copy)]
struct Weighted {
    coeff: f32,
    weight: f64,
}

/// P(hi > lo) + P(hi = lo) / 2 for `hi` and `lo` drawn from their classes with probability
/// proportional to weight: one sort, then a sweep over runs of equal coefficients.
fn weighted_auroc(hi: &[Weighted], lo: &[Weighted]) -> Option<f64> {
    let (w_hi, w_lo) = (total(hi), total(lo));
    if w_hi <= 0.0 || w_lo <= 0.0 {
        return None;
    }
    // 1. Every token with its class, by coefficient.
    let mut all: Vec<(f32, f64, bool)> = hi
        .iter()
        .map(|t| (t.coeff, t.weight, true))
        .chain(lo.iter().map(|t| (t.coeff, t.weight, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    // 2. For each run of equal coefficients: its `hi` weight beats the `lo` weight below
    //    it and ties half of the run's own `lo` weight.
    let (mut below, mut pairs, mut i) = (0.0, 0.0, 0);
    while i < all.len() {
        let (mut h, mut l, c) = (0.0, 0.0, all[i].0);
        while i < all.len() && all[i].0 == c {
            if all[i].2 {
                h += all[i].1;
            } else {
                l += all[i].1;
            }
            i += 1;
        }
        pairs += h * (below + 0.5 * l);
        below += l;
    }
    // 3. Normalised by every pair's weight.
    Some(pairs / (w_hi * w_lo))
}

fn total(ts: &[Weighted]) -> f64 {
    ts.iter().map(|t| t.weight).sum()
}

fn side(shared: &[Weighted], other: &[Weighted]) -> Side {
    let mean = |ts: &[Weighted]| {
        ts.iter()
            .map(|t| f64::from(t.coeff) * t.weight)
            .sum::<f64>()
            / total(ts)
    };
    let all = total(shared) + total(other);
    Side {
        auroc: weighted_auroc(other, shared),
        tokens: [shared.len(), other.len()],
        shared_share: if all > 0.0 {
            total(shared) / all
        } else {
            f64::NAN
        },
        mean_coeff: [mean(shared), mean(other)],
    }
}

/// Length of the common prefix of two token sequences.
fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// For each response, which of its tokens are shared: before the first error (wrong
/// answers), or in the prefix a wrong answer of the same prompt has too (right answers).
/// None for a response with advantage 0 (groups all right or all wrong, or not kept),
/// which takes no part. Err names the response whose columns disagree in length.
pub fn shared_tokens(responses: &[Response<'_>]) -> Result<Vec<Option<Vec<bool>>>, String> {
    // The negative-advantage responses of each prompt, for the right answers' shared prefix.
    let mut wrong_of: BTreeMap<&str, Vec<&[u32]>> = BTreeMap::new();
    for r in responses.iter().filter(|r| r.advantage < 0.0) {
        wrong_of.entry(r.prompt_id).or_default().push(r.token_ids);
    }
    responses
        .iter()
        .map(|r| {
            let n = r.token_ids.len();
            if r.coeff.len() != n
                || r.correct_prefix.len() != n
                || !(r.token_prob.is_empty() || r.token_prob.len() == n)
            {
                return Err(format!(
                    "prompt {} ({n} tokens): {} coefficients, {} probabilities, {} labels",
                    r.prompt_id,
                    r.coeff.len(),
                    r.token_prob.len(),
                    r.correct_prefix.len()
                ));
            }
            Ok(if r.advantage < 0.0 {
                Some(r.correct_prefix.to_vec())
            } else if r.advantage > 0.0 {
                let len = wrong_of.get(r.prompt_id).map_or(0, |ws| {
                    ws.iter().map(|w| common(r.token_ids, w)).max().unwrap_or(0)
                });
                Some((0..n).map(|t| t < len).collect())
            } else {
                None
            })
        })
        .collect()
}

/// The readout of one iteration's responses. Responses with advantage 0 take no part.
/// Err names the response whose columns disagree in length.
pub fn read(responses: &[Response<'_>]) -> Result<Readout, String> {
    let (mut wrong, mut right) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    // 1. Which tokens are shared ([`shared_tokens`]).
    for (r, shared) in responses.iter().zip(shared_tokens(responses)?) {
        let Some(shared) = shared else {
            continue;
        };
        let classes = if r.advantage < 0.0 {
            &mut wrong
        } else {
            &mut right
        };
        let a = f64::from(r.advantage.abs());
        let weight = |t: usize| a * r.token_prob.get(t).map_or(1.0, |&p| 1.0 - f64::from(p));
        // 2. Each token's coefficient and weight in its class: shared (0) or not (1).
        for (t, (&coeff, &s)) in r.coeff.iter().zip(&shared).enumerate() {
            classes[usize::from(!s)].push(Weighted {
                coeff,
                weight: weight(t),
            });
        }
    }
    Ok(Readout {
        wrong: side(&wrong[0], &wrong[1]),
        right: side(&right[0], &right[1]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(coeff: f32, weight: f64) -> Weighted {
        Weighted { coeff, weight }
    }

    #[test]
    fn weighted_auroc_by_hand() {
        // Unit weights: hi {3, 1}, lo {2, 1}: of 4 pairs 3>2, 3>1, 1<2, 1=1 (half): 2.5/4.
        let auc = weighted_auroc(&[w(3.0, 1.0), w(1.0, 1.0)], &[w(2.0, 1.0), w(1.0, 1.0)]);
        assert_eq!(auc, Some(0.625));
        // Weights count as copies: hi {3 (x3), 1}, lo {2}: 3/4 of hi's weight is above.
        let auc = weighted_auroc(&[w(3.0, 3.0), w(1.0, 1.0)], &[w(2.0, 5.0)]);
        assert_eq!(auc, Some(0.75));
        // Complementary: swapping the classes gives 1 - AUROC (ties are half each way).
        let (a, b) = (
            [w(0.9, 0.5), w(1.2, 2.0), w(1.0, 1.0)],
            [w(1.0, 1.5), w(0.8, 0.25)],
        );
        let (x, y) = (
            weighted_auroc(&a, &b).unwrap(),
            weighted_auroc(&b, &a).unwrap(),
        );
        // Sums of a few products of dyadic numbers: exact in f64.
        assert_eq!(x + y, 1.0);
        assert_eq!(weighted_auroc(&a, &[]), None);
        assert_eq!(weighted_auroc(&[w(1.0, 0.0)], &a), None);
    }

    #[test]
    fn a_batch_by_hand() {
        // One prompt: a wrong answer [5, 6, 7, 8] right up to token 2, a right one [5, 6, 9]
        // sharing two tokens with it, and a zero-advantage one left out.
        let ids_wrong = [5, 6, 7, 8];
        let ids_right = [5, 6, 9];
        let rs = [
            Response {
                prompt_id: "p",
                advantage: -1.0,
                token_ids: &ids_wrong,
                coeff: &[0.8, 0.8, 1.2, 1.0],
                token_prob: &[0.5, 0.5, 0.5, 0.0],
                correct_prefix: &[true, true, false, false],
            },
            Response {
                prompt_id: "p",
                advantage: 0.5,
                token_ids: &ids_right,
                coeff: &[1.0, 0.9, 1.1],
                token_prob: &[],
                correct_prefix: &[true; 3],
            },
            Response {
                prompt_id: "q",
                advantage: 0.0,
                token_ids: &[1],
                coeff: &[0.0],
                token_prob: &[],
                correct_prefix: &[true],
            },
        ];
        let r = read(&rs).unwrap();
        // Wrong side: shared {0.8 (w 0.5), 0.8 (0.5)}, from the error on {1.2 (0.5), 1.0 (1)}:
        // every discriminative coefficient is above every shared one.
        assert_eq!(r.wrong.auroc, Some(1.0));
        assert_eq!(r.wrong.tokens, [2, 2]);
        assert_eq!(r.wrong.shared_share, 1.0 / 2.5);
        assert_eq!(r.wrong.mean_coeff[0], f64::from(0.8f32));
        // Right side: shared {1.0, 0.9} (w 0.5 each), the rest {1.1}: above both.
        assert_eq!(r.right.auroc, Some(1.0));
        assert_eq!(r.right.tokens, [2, 1]);
        // Lowering the right answer's last coefficient to 0.95 puts it between the two.
        let mut low = rs;
        low[1].coeff = &[1.0, 0.9, 0.95];
        assert_eq!(read(&low).unwrap().right.auroc, Some(0.5));
        // Lengths that disagree are named.
        let mut bad = rs;
        bad[0].correct_prefix = &[true];
        let e = read(&bad).unwrap_err();
        assert!(e.contains("prompt p") && e.contains("1 labels"), "{e}");
    }
}
