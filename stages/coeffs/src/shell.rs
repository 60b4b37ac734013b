//! The coeffs stage's Parquet shell: join rollouts, scores and features on
//! (`prompt_id`, `sample_idx`), estimate, write coeffs.parquet.

use std::io::{Read, Write};

use deltarl_schemas::{
    read_table, write_table, CoeffRow, FeatureRow, FileMeta, Index, Keyed, RolloutRow, ScoreRow,
};

use crate::{estimate, Error, Response, Result, Settings, Summary};

/// The stage's inputs, already read.
pub struct Inputs {
    pub rollouts: Vec<RolloutRow>,
    pub scores: Vec<ScoreRow>,
    pub features: Vec<FeatureRow>,
}

/// Pure core: coefficient rows in rollout order plus the summary. `decode` turns token ids
/// into text for the extreme-token table.
pub fn run(
    settings: &Settings,
    inputs: &Inputs,
    decode: &dyn Fn(&[u32]) -> String,
) -> Result<(Vec<CoeffRow>, Summary)> {
    let scores = Index::new(&inputs.scores);
    let feats = Index::new(&inputs.features);
    let dim = inputs.features.first().map_or(0, |f| f.dim as usize);
    let mut responses = Vec::with_capacity(inputs.rollouts.len());
    for r in &inputs.rollouts {
        let at = || r.response().to_string();
        let s = scores.get(r, "scores").map_err(Error::Input)?;
        let f = feats.get(r, "features").map_err(Error::Input)?;
        if f.tokens() != r.response_token_ids.len() {
            return Err(Error::Input(format!(
                "{}: {} feature vectors for {} response tokens",
                at(),
                f.tokens(),
                r.response_token_ids.len()
            )));
        }
        if f.dim as usize != dim {
            return Err(Error::Input(format!(
                "{}: feature dimension {} differs from {dim}",
                at(),
                f.dim
            )));
        }
        responses.push(Response {
            prompt_id: &r.prompt_id,
            sample_idx: r.sample_idx,
            advantage: s.advantage,
            kept: s.kept,
            features: &f.features,
            entropy: &f.entropy,
        });
    }
    let out = estimate(settings, dim, &responses)?;
    // Never a result: a non-finite coefficient (from non-finite features or advantages).
    for (r, c) in inputs.rollouts.iter().zip(&out.coeffs) {
        if c.iter().any(|x| !x.is_finite()) {
            return Err(Error::Input(format!(
                "{}: non-finite coefficients",
                r.response()
            )));
        }
    }
    let mut summary = out.summary;
    let index: std::collections::HashMap<(&str, u32), &RolloutRow> =
        inputs.rollouts.iter().map(|r| (r.key(), r)).collect();
    for t in summary.top.iter_mut().chain(summary.bottom.iter_mut()) {
        if let Some(r) = index.get(&(t.prompt_id.as_str(), t.sample_idx)) {
            let ids = &r.response_token_ids;
            t.text = decode(&ids[t.position..=t.position]);
            t.context = decode(&ids[t.position.saturating_sub(8)..=t.position]);
        }
    }
    let rows = inputs
        .rollouts
        .iter()
        .zip(out.coeffs)
        .zip(&responses)
        .map(|((r, coeff), resp)| CoeffRow {
            prompt_id: r.prompt_id.clone(),
            sample_idx: r.sample_idx,
            coeff,
            advantage: resp.advantage,
        })
        .collect();
    Ok((rows, summary))
}

/// Thin Parquet shell around [`run`]. The summary and settings go into the file metadata.
/// Returns the number of rows written and the summary.
pub fn run_io<R1: Read, R2: Read, R3: Read, W: Write + Send>(
    settings: &Settings,
    rollouts: (R1, &str),
    scores: (R2, &str),
    features: (R3, &str),
    out: W,
    meta: FileMeta,
    decode: &dyn Fn(&[u32]) -> String,
) -> Result<(usize, Summary)> {
    let inputs = Inputs {
        rollouts: read_table(rollouts.0, rollouts.1)?.0,
        scores: read_table(scores.0, scores.1)?.0,
        features: read_table(features.0, features.1)?.0,
    };
    let (rows, summary) = run(settings, &inputs, decode)?;
    let meta = meta
        .with(
            "settings",
            serde_json::to_string(settings).unwrap_or_default(),
        )
        .with(
            "summary",
            serde_json::to_string(&summary).unwrap_or_default(),
        );
    write_table(out, &rows, &meta)?;
    Ok((rows.len(), summary))
}
