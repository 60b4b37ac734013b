//! The update stage's Parquet shell: join rollouts, scores, the trainer's log-probs and the
//! coefficients on (`prompt_id`, `sample_idx`) into training rows, and write update.parquet.

use std::io::Write;
use std::path::Path;

use deltarl_schemas::{
    read_path, write_table, CoeffRow, FileMeta, Index, Keyed, LogprobRow, Mismatch, RolloutRow,
    ScoreRow, UpdateRow,
};

use crate::settings::{JoinSettings, OldLogprobs};
use crate::{Error, Result, Settings, TrainRow};

/// The stage's table inputs, already read.
pub struct Inputs {
    pub rollouts: Vec<RolloutRow>,
    pub scores: Vec<ScoreRow>,
    /// The trainer's log-probs (the `logprob` column of features.parquet).
    pub logprobs: Vec<LogprobRow>,
    pub coeffs: Vec<CoeffRow>,
}

impl Inputs {
    /// Reads the four tables; of features.parquet only the `logprob` column is read from
    /// disk (never the feature vectors). Errors name the file (and the column or version).
    pub fn read(rollouts: &Path, scores: &Path, features: &Path, coeffs: &Path) -> Result<Self> {
        Ok(Inputs {
            rollouts: read_path(rollouts)?.0,
            scores: read_path(scores)?.0,
            logprobs: read_path(features)?.0,
            coeffs: read_path(coeffs)?.0,
        })
    }
}

/// Adds the tokens of one response to the mismatch's sums (`d = rollout - trainer`).
fn add_mismatch(m: &mut Mismatch, rollout: &[f32], trainer: &[f32]) {
    for (&a, &b) in rollout.iter().zip(trainer) {
        let d = f64::from(a) - f64::from(b);
        m.tokens += 1;
        m.mean_abs += d.abs();
        m.max_abs = m.max_abs.max(d.abs());
        m.k3 += (-d).exp() + d - 1.0;
        m.frac_over_0_1 += f64::from(u8::from(d.abs() > 0.1));
    }
}

/// The sums of [`add_mismatch`] turned into means.
fn mean_mismatch(mut m: Mismatch) -> Mismatch {
    let n = m.tokens.max(1) as f64;
    m.mean_abs /= n;
    m.k3 /= n;
    m.frac_over_0_1 /= n;
    m
}

/// Pure core of the join: one training row per kept response, in rollout order, and the
/// mismatch between sampler and trainer on those rows. Responses that dynamic sampling
/// dropped (`kept = false`) are left out of the update.
pub fn train_rows(s: &JoinSettings, inputs: &Inputs) -> Result<(Vec<TrainRow>, Mismatch)> {
    let scores = Index::new(&inputs.scores);
    let logprobs = Index::new(&inputs.logprobs);
    let coeffs = Index::new(&inputs.coeffs);
    let mut rows = Vec::with_capacity(inputs.rollouts.len());
    let mut mismatch = Mismatch::default();
    for r in &inputs.rollouts {
        let sc = scores.get(r, "scores").map_err(Error::Input)?;
        let lp = logprobs.get(r, "features").map_err(Error::Input)?;
        let c = coeffs.get(r, "coeffs").map_err(Error::Input)?;
        if !sc.kept {
            continue;
        }
        let n = r.response_token_ids.len();
        if lp.logprob.len() != n || r.old_logprobs.len() != n {
            return Err(Error::Input(format!(
                "{}: {n} response tokens, {} rollout and {} trainer log-probs",
                r.response(),
                r.old_logprobs.len(),
                lp.logprob.len()
            )));
        }
        add_mismatch(&mut mismatch, &r.old_logprobs, &lp.logprob);
        let old_logprobs = match s.old_logprobs {
            OldLogprobs::Recompute => lp.logprob.clone(),
            OldLogprobs::Rollout => r.old_logprobs.clone(),
        };
        let mut coeff = c.coeff.clone();
        let mut shift = c.shift.clone().unwrap_or_default();
        if coeff.len() != n || !(shift.is_empty() || shift.len() == n) {
            return Err(Error::Input(format!(
                "{}: {n} response tokens, {} coefficients and {} shifts in coeffs",
                r.response(),
                coeff.len(),
                shift.len()
            )));
        }
        if let Some(cap) = s.tis_cap {
            // TIS: the tokens were drawn from the sampler, not from the trainer's old
            // policy; weight each by the (capped) ratio of the two. The weight is positive,
            // so folding it into the coefficient (and the shift: it weights the whole
            // token advantage) scales the clipped term exactly.
            for (t, (&old, &roll)) in lp.logprob.iter().zip(&r.old_logprobs).enumerate() {
                let w = (f64::from(old) - f64::from(roll)).exp().min(cap);
                coeff[t] = (f64::from(coeff[t]) * w) as f32;
                if let Some(x) = shift.get_mut(t) {
                    *x = (f64::from(*x) * w) as f32;
                }
            }
        }
        rows.push(TrainRow {
            prompt_id: r.prompt_id.clone(),
            prompt_ids: r.prompt_token_ids.clone(),
            response_ids: r.response_token_ids.clone(),
            old_logprobs,
            advantage: sc.advantage,
            coeff,
            shift,
        });
    }
    Ok((rows, mean_mismatch(mismatch)))
}

/// Refuses an update that must not be written: every step skipped for a non-finite
/// gradient norm, or a non-finite weight after the steps. Returns how many steps were
/// skipped.
pub fn check_steps(
    metrics: &[UpdateRow],
    policy: &deltarl_model::Policy,
    s: &Settings,
) -> Result<usize> {
    use deltarl_schemas::number::show;
    let skipped = metrics.iter().filter(|m| !m.grad_norm.is_finite()).count();
    if skipped > 0 && skipped == metrics.len() {
        let l = &s.loss;
        let keys = format!(
            "update.kl_coef = {}, update.entropy_coef = {}, update.eps_low = {}, \
             update.eps_high = {}, update.dual_clip = {}, update.grad_clip = {}, update.lr = {}",
            show(l.kl_coef),
            show(l.entropy_coef),
            show(l.eps_low),
            show(l.eps_high),
            show(l.dual_clip.unwrap_or(0.0)),
            show(s.grad_clip),
            show(s.lr)
        );
        return Err(Error::NoFiniteStep {
            steps: skipped,
            loss: metrics[0].loss,
            keys,
        });
    }
    if let Some(tensor) = policy.first_non_finite() {
        return Err(Error::NonFiniteWeights { tensor });
    }
    Ok(skipped)
}

/// Writes iteration `iter`'s per-step metrics with the settings and the mismatch in the
/// file metadata.
pub fn write_metrics<W: Write + Send>(
    out: W,
    settings: &Settings,
    iter: u32,
    metrics: &[UpdateRow],
    mismatch: &Mismatch,
    meta: FileMeta,
) -> Result<()> {
    let meta = meta
        .with(
            "settings",
            serde_json::to_string(&settings.recorded(iter)).unwrap_or_default(),
        )
        .with(
            "join",
            serde_json::to_string(&settings.join).unwrap_or_default(),
        )
        .with(
            "mismatch",
            serde_json::to_string(mismatch).unwrap_or_default(),
        );
    write_table(out, metrics, &meta)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use deltarl_schemas::FinishReason;

    fn rollout(id: &str, k: u32, n: usize) -> RolloutRow {
        RolloutRow {
            prompt_id: id.into(),
            sample_idx: k,
            prompt: "Q".into(),
            prompt_token_ids: vec![1, 2],
            response_text: "r".into(),
            response_token_ids: vec![3; n],
            old_logprobs: vec![-0.5; n],
            finish_reason: FinishReason::Stop,
            policy_iter: 0,
            gold: "1".into(),
            data_source: None,
            reward_kind: Default::default(),
        }
    }

    fn score(id: &str, k: u32, adv: f32, kept: bool) -> ScoreRow {
        ScoreRow {
            prompt_id: id.into(),
            sample_idx: k,
            gold: "1".into(),
            response_len: 1,
            reward: 0.0,
            correct: false,
            extracted: None,
            advantage: adv,
            kept,
            overlong_penalty: 0.0,
            data_source: None,
            reward_kind: Default::default(),
            outcome: None,
            cases_passed: None,
            cases_total: None,
            detail: None,
        }
    }

    fn coeff(id: &str, k: u32, c: Vec<f32>) -> CoeffRow {
        CoeffRow {
            prompt_id: id.into(),
            sample_idx: k,
            advantage: 0.0,
            coeff: c,
            shift: None,
        }
    }

    fn logprob(id: &str, k: u32, lp: Vec<f32>) -> LogprobRow {
        LogprobRow {
            prompt_id: id.into(),
            sample_idx: k,
            logprob: lp,
        }
    }

    const RECOMPUTE: JoinSettings = JoinSettings {
        old_logprobs: OldLogprobs::Recompute,
        tis_cap: None,
    };

    /// Rollout log-probs are -0.5 for every token (see `rollout`).
    fn inputs() -> Inputs {
        Inputs {
            rollouts: vec![rollout("a", 0, 2), rollout("a", 1, 1), rollout("b", 0, 1)],
            // The other tables in other orders than the rollouts.
            scores: vec![
                score("b", 0, 0.0, false),
                score("a", 1, -1.0, true),
                score("a", 0, 1.0, true),
            ],
            logprobs: vec![
                logprob("b", 0, vec![-9.0]),
                logprob("a", 1, vec![-0.5]),
                logprob("a", 0, vec![-0.25, -0.75]),
            ],
            coeffs: vec![
                coeff("a", 1, vec![0.9]),
                coeff("b", 0, vec![1.0]),
                coeff("a", 0, vec![1.1, 0.8]),
            ],
        }
    }

    #[test]
    fn joins_in_rollout_order_and_drops_unkept_groups() {
        let (rows, _) = train_rows(&RECOMPUTE, &inputs()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].advantage, rows[0].coeff.clone()),
            (1.0, vec![1.1, 0.8])
        );
        assert_eq!(
            (rows[1].advantage, rows[1].coeff.clone()),
            (-1.0, vec![0.9])
        );
    }

    #[test]
    fn old_logprobs_are_the_trainers_or_the_samplers() {
        let (rows, _) = train_rows(&RECOMPUTE, &inputs()).unwrap();
        // Bit for bit the features pass's log-probs.
        assert_eq!(rows[0].old_logprobs, vec![-0.25, -0.75]);
        assert_eq!(rows[1].old_logprobs, vec![-0.5]);
        let rollout = JoinSettings {
            old_logprobs: OldLogprobs::Rollout,
            tis_cap: None,
        };
        let (rows, _) = train_rows(&rollout, &inputs()).unwrap();
        assert_eq!(rows[0].old_logprobs, vec![-0.5, -0.5]);
    }

    #[test]
    fn mismatch_and_truncated_importance_weights_by_hand() {
        // Kept tokens: d = rollout - trainer = -0.5 - (-0.25) = -0.25, -0.5 - (-0.75) =
        // 0.25, and 0 (the dropped group's -9 does not count).
        let (_, m) = train_rows(&RECOMPUTE, &inputs()).unwrap();
        assert_eq!(m.tokens, 3);
        assert!((m.mean_abs - 0.5 / 3.0).abs() < 1e-12 && (m.max_abs - 0.25).abs() < 1e-12);
        let k3 = |d: f64| (-d).exp() + d - 1.0;
        assert!((m.k3 - (k3(-0.25) + k3(0.25)) / 3.0).abs() < 1e-12);
        assert!((m.frac_over_0_1 - 2.0 / 3.0).abs() < 1e-12);
        // TIS weight min(exp(trainer - rollout), cap): exp(0.25) = 1.284 capped at 1.2 on
        // the first token, exp(-0.25) = 0.7788 on the second, 1 on the third.
        let tis = JoinSettings {
            old_logprobs: OldLogprobs::Recompute,
            tis_cap: Some(1.2),
        };
        let (rows, _) = train_rows(&tis, &inputs()).unwrap();
        let want = [1.1 * 1.2, 0.8 * (-0.25f64).exp()];
        assert_eq!(rows[0].coeff.len(), want.len());
        // f32 coefficients and log-probs: a product and an exp of numbers ≤ 1.32, each
        // rounded to f32 (≤ 3·2^-24·1.32 ≈ 2.4e-7); 1e-6 leaves 4x.
        for (g, w) in rows[0].coeff.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
        }
        assert_eq!(rows[1].coeff, vec![0.9]);
    }

    #[test]
    fn a_missing_row_names_its_key_and_table() {
        let mut inputs = inputs();
        inputs.coeffs.retain(|c| c.prompt_id != "b");
        let err = train_rows(&RECOMPUTE, &inputs).err().unwrap().to_string();
        assert!(
            err.contains("prompt_id \"b\", sample_idx 0: no row in coeffs"),
            "{err}"
        );
    }
}
