//! The update stage's Parquet shell: join rollouts, scores and coefficients on
//! (`prompt_id`, `sample_idx`) into training rows, and write update.parquet.

use std::io::{Read, Write};

use deltarl_schemas::{
    read_table, write_table, CoeffRow, FileMeta, Index, RolloutRow, ScoreRow, UpdateRow,
};

use crate::{Error, Result, Settings, TrainRow};

/// The stage's table inputs, already read.
pub struct Inputs {
    pub rollouts: Vec<RolloutRow>,
    pub scores: Vec<ScoreRow>,
    pub coeffs: Vec<CoeffRow>,
}

impl Inputs {
    /// Reads the three tables; errors name the file (and the column or version).
    pub fn read<R1: Read, R2: Read, R3: Read>(
        rollouts: (R1, &str),
        scores: (R2, &str),
        coeffs: (R3, &str),
    ) -> Result<Self> {
        Ok(Inputs {
            rollouts: read_table(rollouts.0, rollouts.1)?.0,
            scores: read_table(scores.0, scores.1)?.0,
            coeffs: read_table(coeffs.0, coeffs.1)?.0,
        })
    }
}

/// Pure core of the join: one training row per kept response, in rollout order. Responses
/// that dynamic sampling dropped (`kept = false`) are left out of the update.
pub fn train_rows(inputs: &Inputs) -> Result<Vec<TrainRow>> {
    let scores = Index::new(&inputs.scores);
    let coeffs = Index::new(&inputs.coeffs);
    let mut rows = Vec::with_capacity(inputs.rollouts.len());
    for r in &inputs.rollouts {
        let s = scores.get(r, "scores").map_err(Error::Input)?;
        let c = coeffs.get(r, "coeffs").map_err(Error::Input)?;
        if !s.kept {
            continue;
        }
        rows.push(TrainRow {
            prompt_id: r.prompt_id.clone(),
            prompt_ids: r.prompt_token_ids.clone(),
            response_ids: r.response_token_ids.clone(),
            old_logprobs: r.old_logprobs.clone(),
            advantage: s.advantage,
            coeff: c.coeff.clone(),
        });
    }
    Ok(rows)
}

/// Writes the per-step metrics with the settings in the file metadata.
pub fn write_metrics<W: Write + Send>(
    out: W,
    settings: &Settings,
    metrics: &[UpdateRow],
    meta: FileMeta,
) -> Result<()> {
    let meta = meta.with(
        "settings",
        serde_json::to_string(settings).unwrap_or_default(),
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
        }
    }

    fn coeff(id: &str, k: u32, c: Vec<f32>) -> CoeffRow {
        CoeffRow {
            prompt_id: id.into(),
            sample_idx: k,
            advantage: 0.0,
            coeff: c,
        }
    }

    #[test]
    fn joins_in_rollout_order_and_drops_unkept_groups() {
        let inputs = Inputs {
            rollouts: vec![rollout("a", 0, 2), rollout("a", 1, 1), rollout("b", 0, 1)],
            // Scores and coefficients in another order than the rollouts.
            scores: vec![
                score("b", 0, 0.0, false),
                score("a", 1, -1.0, true),
                score("a", 0, 1.0, true),
            ],
            coeffs: vec![
                coeff("a", 1, vec![0.9]),
                coeff("b", 0, vec![1.0]),
                coeff("a", 0, vec![1.1, 0.8]),
            ],
        };
        let rows = train_rows(&inputs).unwrap();
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
    fn a_missing_row_names_its_key_and_table() {
        let inputs = Inputs {
            rollouts: vec![rollout("a", 0, 1)],
            scores: vec![score("a", 0, 1.0, true)],
            coeffs: vec![],
        };
        let err = train_rows(&inputs).err().unwrap().to_string();
        assert!(
            err.contains("prompt_id \"a\", sample_idx 0: no row in coeffs"),
            "{err}"
        );
    }
}
