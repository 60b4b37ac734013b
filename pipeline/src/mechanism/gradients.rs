//! Which tokens carry the update, measured in parameter space: for each class of tokens of
//! a side (wrong or right answers; shared or the rest, as [`super`] splits them), the net
//! policy gradient
//!
//! ```text
//! g_class = Σ_{t ∈ class} A_t ∇θ log π(y_t | context_t)
//! ```
//!
//! at the policy that sampled the iteration and the rollout's temperature: DAPO's update
//! direction restricted to the class (before the token-mean's constant factor). The
//! per-token weight `(1 - p)|A|` the AUROC uses is the size of one token's term at the
//! logits; terms of tokens that share contexts point the same way or cancel, which only the
//! sum in parameter space shows.
//!
//! Per side it reports `‖g_shared‖`, `‖g_rest‖`, their dot product, and each class's share
//! of the side's update along its own direction, `g_class · g / ‖g‖²` with
//! `g = g_shared + g_rest` (the two shares sum to 1; a share above 1 or below 0 means the
//! other class partly cancels it).

use deltarl_model::Qwen3;
use deltarl_teacher::{head_chunk_tokens, Layout, TeacherForced, DEFAULT_HEAD_CHUNK_BYTES};
use tch::{Device, Kind, Tensor};

/// One response as the readout needs it.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    pub prompt: &'a [u32],
    pub response: &'a [u32],
    pub advantage: f32,
    /// Per response token: in the shared class. None: the response takes no part
    /// (advantage 0).
    pub shared: Option<&'a [bool]>,
}

/// The two classes of one side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SideGradients {
    /// `‖g_shared‖`, `‖g_rest‖` (0 for a class without tokens).
    pub norm: [f64; 2],
    /// `g_shared · g_rest`.
    pub dot: f64,
}

impl SideGradients {
    /// `‖g_shared + g_rest‖`: the norm of the side's whole update.
    pub fn side_norm(&self) -> f64 {
        (self.norm[0].powi(2) + self.norm[1].powi(2) + 2.0 * self.dot)
            .max(0.0)
            .sqrt()
    }

    /// `cos(g_shared, g_rest)`; NaN when a class has no gradient.
    pub fn cosine(&self) -> f64 {
        self.dot / (self.norm[0] * self.norm[1])
    }

    /// Each class's share of the side's update along its own direction,
    /// `g_class · g / ‖g‖²` (shared, rest; they sum to 1); NaN when the side has none.
    pub fn share(&self) -> [f64; 2] {
        let g2 = self.side_norm().powi(2);
        [
            (self.norm[0].powi(2) + self.dot) / g2,
            (self.norm[1].powi(2) + self.dot) / g2,
        ]
    }
}

/// The readout of one iteration: wrong answers (A < 0), then right ones (A > 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Readout {
    pub wrong: SideGradients,
    pub right: SideGradients,
    /// `g_shared(wrong) · g_shared(right)`: where the two sides share text, whether their
    /// pushes on it cancel (DAPO's premise for the shared prefix: down from wrong answers,
    /// up from right ones, through the same contexts and tokens).
    pub shared_dot: f64,
}

impl Readout {
    /// `cos(g_shared(wrong), g_shared(right))`; NaN when a side's shared class has none.
    pub fn shared_cosine(&self) -> f64 {
        self.shared_dot / (self.wrong.norm[0] * self.right.norm[0])
    }
}

/// The readout of `rows` under `model`, whose trainable parameters are `params` (their
/// gradients are overwritten), log-probs at `temperature`, in passes of at most
/// `pass_rows` rows. Err names a row whose labels and response disagree in length or
/// whose prompt is empty.
pub fn read(
    model: &Qwen3,
    params: &[Tensor],
    rows: &[Row<'_>],
    temperature: f64,
    pass_rows: usize,
) -> Result<Readout, String> {
    for (i, r) in rows.iter().enumerate() {
        if r.prompt.is_empty() {
            return Err(format!("row {i}: an empty prompt"));
        }
        if let Some(s) = r.shared {
            if s.len() != r.response.len() {
                return Err(format!(
                    "row {i}: {} labels for {} response tokens",
                    s.len(),
                    r.response.len()
                ));
            }
        }
    }
    let side = |negative: bool| -> (SideGradients, Vec<Tensor>) {
        // 1. g_shared, kept as f64 copies; then g_rest, left in the parameters' `.grad`.
        let shared = class_gradient(model, params, rows, negative, true, temperature, pass_rows);
        let shared: Vec<Tensor> = shared.iter().map(|g| g.to_kind(Kind::Double)).collect();
        let rest = class_gradient(model, params, rows, negative, false, temperature, pass_rows);
        // 2. Norms and the dot product, summed in f64 in parameter order.
        let (mut n_shared, mut n_rest, mut dot) = (0.0, 0.0, 0.0);
        for (s, r) in shared.iter().zip(&rest) {
            let r = r.to_kind(Kind::Double);
            n_shared += s.dot(s).double_value(&[]);
            n_rest += r.dot(&r).double_value(&[]);
            dot += s.dot(&r).double_value(&[]);
        }
        let grads = SideGradients {
            norm: [n_shared.sqrt(), n_rest.sqrt()],
            dot,
        };
        (grads, shared)
    };
    let (wrong, wrong_shared) = side(true);
    let (right, right_shared) = side(false);
    // 3. The two sides' shared classes against each other, in f64 in parameter order.
    let shared_dot = wrong_shared
        .iter()
        .zip(&right_shared)
        .map(|(a, b)| a.dot(b).double_value(&[]))
        .sum();
    Ok(Readout {
        wrong,
        right,
        shared_dot,
    })
}

/// `Σ A_t ∇θ log π(y_t)` over the tokens of one class: the responses of one side
/// (`negative`: A < 0, else A > 0), their shared tokens (`shared`) or the rest. Returned as
/// each parameter's gradient, flattened (zeros for a parameter the class does not reach).
fn class_gradient(
    model: &Qwen3,
    params: &[Tensor],
    rows: &[Row<'_>],
    negative: bool,
    shared: bool,
    temperature: f64,
    pass_rows: usize,
) -> Vec<Tensor> {
    for p in params {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    // 1. The rows with at least one token in the class, and each token's weight: A in the
    //    class, 0 outside it.
    let mut members: Vec<(&Row<'_>, Vec<f32>)> = Vec::new();
    for r in rows {
        let Some(labels) = r.shared else {
            continue;
        };
        if (r.advantage < 0.0) != negative || r.advantage == 0.0 {
            continue;
        }
        let w: Vec<f32> = labels
            .iter()
            .map(|&s| if s == shared { r.advantage } else { 0.0 })
            .collect();
        if w.iter().any(|&x| x != 0.0) {
            members.push((r, w));
        }
    }
    // 2. Per pass: the teacher-forced log-probs [N] (row by row, token by token), the loss
    //    Σ w_t log π_t, its backward; the gradients add up over passes.
    let device = model.lm_head_weight().device();
    let chunk = head_chunk_tokens(DEFAULT_HEAD_CHUNK_BYTES, model.config.vocab_size);
    for pass in members.chunks(pass_rows.max(1)) {
        let pairs: Vec<(&[u32], &[u32])> =
            pass.iter().map(|(r, _)| (r.prompt, r.response)).collect();
        let weights: Vec<f32> = pass.iter().flat_map(|(_, w)| w.iter().copied()).collect();
        let batch = TeacherForced::new(model, &pairs, Layout::Padded, device);
        let hidden = batch.hidden(model);
        let stats = batch.stats(model, &hidden, temperature, false, chunk);
        let w = Tensor::from_slice(&weights).to_device(device);
        let loss = (&stats.logprob * &w).sum(Kind::Float);
        loss.backward();
        stats.backward_head(model, &mut || {});
    }
    params
        .iter()
        .map(|p| {
            let g = p.grad();
            if g.defined() {
                g.detach().to_kind(Kind::Float).flatten(0, -1).copy()
            } else {
                Tensor::zeros([p.numel() as i64], (Kind::Float, Device::Cpu)).to_device(p.device())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarl_model::roundoff::{logit_chain, F32_UNIT};
    use deltarl_model::{random_policy, Policy};

    fn policy() -> (tempfile::TempDir, Policy) {
        tch::set_num_threads(1);
        let dir = tempfile::tempdir().unwrap();
        let p = random_policy(
            dir.path(),
            &deltarl_data::tokenizer_json(),
            deltarl_data::vocab_size(),
            true,
            3,
            2.0,
        )
        .unwrap();
        (dir, p)
    }

    /// One token's gradient `∇θ log π(y_t)` at temperature `temp`, from a plain forward
    /// over its own context alone: the independent reference.
    fn token_gradient(p: &Policy, context: &[u32], target: u32, temp: f64) -> Vec<Tensor> {
        let params = p.vs.trainable_variables();
        for q in &params {
            let mut g = q.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
        let ids: Vec<i64> = context.iter().map(|&t| i64::from(t)).collect();
        let logits = p.model.forward(&Tensor::from_slice(&ids).unsqueeze(0));
        let last = logits.get(0).get(ids.len() as i64 - 1).to_kind(Kind::Float) / temp;
        last.log_softmax(-1, Kind::Float)
            .get(i64::from(target))
            .backward();
        params
            .iter()
            .map(|q| {
                q.grad()
                    .detach()
                    .to_kind(Kind::Double)
                    .flatten(0, -1)
                    .copy()
            })
            .collect()
    }

    #[test]
    fn class_gradients_are_the_sums_of_their_tokens() {
        let (_d, p) = policy();
        let temp = 0.7;
        // One prompt, two wrong answers (the first two tokens of each shared, as a correct
        // prefix), one right answer (its first token shared), one with A = 0 (no part).
        let prompt: Vec<u32> = vec![5, 9, 14, 3];
        let responses: [(Vec<u32>, f32, Option<Vec<bool>>); 4] = [
            (
                vec![7, 12, 9, 30],
                -0.5,
                Some(vec![true, true, false, false]),
            ),
            (vec![7, 12, 21], -1.25, Some(vec![true, true, false])),
            (
                vec![7, 6, 18, 2, 25],
                0.75,
                Some(vec![true, false, false, false, false]),
            ),
            (vec![11, 4], 0.0, None),
        ];
        let rows: Vec<Row<'_>> = responses
            .iter()
            .map(|(r, a, s)| Row {
                prompt: &prompt,
                response: r,
                advantage: *a,
                shared: s.as_deref(),
            })
            .collect();
        let params = p.vs.trainable_variables();
        // Passes of 2 rows: the wrong side's rows in one pass, padded to unequal lengths.
        let got = read(&p.model, &params, &rows, temp, 2).unwrap();
        // The reference: every token's gradient alone, weighted by A and added per class
        // in f64. `gross` is Σ |A| ‖∇ log π‖ of a class, the scale of its round-off.
        let reference = |negative: bool, want_shared: bool| -> (Vec<Tensor>, f64) {
            let mut sum: Vec<Tensor> = params
                .iter()
                .map(|q| Tensor::zeros([q.numel() as i64], (Kind::Double, Device::Cpu)))
                .collect();
            let mut gross = 0.0;
            for (resp, a, s) in &responses {
                let Some(s) = s else { continue };
                if (*a < 0.0) != negative {
                    continue;
                }
                for (t, &sh) in s.iter().enumerate() {
                    if sh != want_shared {
                        continue;
                    }
                    let context: Vec<u32> = prompt.iter().chain(&resp[..t]).copied().collect();
                    let g = token_gradient(&p, &context, resp[t], temp);
                    let norm: f64 = g.iter().map(|x| x.dot(x).double_value(&[])).sum();
                    gross += f64::from(a.abs()) * norm.sqrt();
                    for (acc, x) in sum.iter_mut().zip(&g) {
                        *acc += x * f64::from(*a);
                    }
                }
            }
            (sum, gross)
        };
        let norm = |g: &[Tensor]| {
            g.iter()
                .map(|x| x.dot(x).double_value(&[]))
                .sum::<f64>()
                .sqrt()
        };
        let dot = |a: &[Tensor], b: &[Tensor]| -> f64 {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.dot(y).double_value(&[]))
                .sum()
        };
        // Round-off (as `roundoff` derives it): each token's term runs the forward chain C
        // of `logit_chain` and back, in f32, in both computations, and the batched one
        // adds a class's N terms inside its products; to first order an entry's error is
        // at most 2u(2C + N) of the absolute sum of its terms, so a class's error norm is
        // at most that times its gross Σ|A|·‖∇ log π‖ (not its net norm: terms cancel),
        // with `roundoff`'s margin 4 for second-order terms.
        let positions = prompt.len() + 5;
        let tokens = 12;
        let chain = 2 * logit_chain(&p.model.config, positions) + tokens;
        let gamma = 4.0 * 2.0 * F32_UNIT * chain as f64;
        let (wrong_shared, gross_wrong) = reference(true, true);
        let (right_shared, gross_right) = reference(false, true);
        let tol_cross = gamma
            * (gross_wrong * norm(&right_shared) + gross_right * norm(&wrong_shared))
            + gamma * gamma * gross_wrong * gross_right;
        let want = dot(&wrong_shared, &right_shared);
        assert!(want.abs() > 100.0 * tol_cross, "{want} {tol_cross}");
        assert!(
            (got.shared_dot - want).abs() <= tol_cross,
            "{} {want}",
            got.shared_dot
        );
        for (side, negative) in [(got.wrong, true), (got.right, false)] {
            let (g_shared, gross_shared) = reference(negative, true);
            let (g_rest, gross_rest) = reference(negative, false);
            let (tol_s, tol_r) = (gamma * gross_shared, gamma * gross_rest);
            assert!(norm(&g_shared) > 100.0 * tol_s && norm(&g_rest) > 100.0 * tol_r);
            assert!(
                (side.norm[0] - norm(&g_shared)).abs() <= tol_s,
                "{side:?} {tol_s}"
            );
            assert!(
                (side.norm[1] - norm(&g_rest)).abs() <= tol_r,
                "{side:?} {tol_r}"
            );
            // |Δ(a·b)| <= |Δa|·‖b‖ + ‖a‖·|Δb| (+ a second-order term).
            let tol_dot = tol_s * norm(&g_rest) + tol_r * norm(&g_shared) + tol_s * tol_r;
            assert!(
                (side.dot - dot(&g_shared, &g_rest)).abs() <= tol_dot,
                "{side:?}"
            );
            let share = side.share();
            assert!((share[0] + share[1] - 1.0).abs() < 1e-12, "{share:?}");
        }
    }

    #[test]
    fn an_empty_side_and_bad_rows() {
        let (_d, p) = policy();
        let params = p.vs.trainable_variables();
        let prompt = [5u32, 9];
        let resp = [7u32, 12];
        let labels = [false, false];
        // Only a wrong answer, nothing shared: the right side and the wrong side's shared
        // class have no gradient at all.
        let rows = [Row {
            prompt: &prompt,
            response: &resp,
            advantage: -1.0,
            shared: Some(&labels),
        }];
        let r = read(&p.model, &params, &rows, 1.0, 8).unwrap();
        assert_eq!(r.right.norm, [0.0, 0.0]);
        assert!(r.shared_cosine().is_nan());
        assert!(r.right.share()[0].is_nan());
        assert_eq!(r.wrong.norm[0], 0.0);
        assert!(r.wrong.norm[1] > 0.0);
        // sqrt then square again: within an ulp of 1.
        let share = r.wrong.share();
        assert!(
            share[0] == 0.0 && (share[1] - 1.0).abs() < 1e-15,
            "{share:?}"
        );
        // Labels that do not match the response, and an empty prompt, are refused.
        let short = [false];
        let mut bad = rows;
        bad[0].shared = Some(&short);
        let e = read(&p.model, &params, &bad, 1.0, 8).unwrap_err();
        assert!(e.contains("1 labels for 2"), "{e}");
        let mut bad = rows;
        bad[0].prompt = &[];
        assert!(read(&p.model, &params, &bad, 1.0, 8)
            .unwrap_err()
            .contains("empty prompt"));
    }
}
