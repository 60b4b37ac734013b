//! The filler classes' readout (`--classes filler`): each side's net gradient split into
//! `tiny-steps-filler`'s filler and the rest, per iteration or per optimizer step.

use anyhow::Result;

use deltarl_schemas::{read_path, Index, ScoreRow, Stage};

use super::open::{decoded, net_gradients, scored_iterations, Labelled, Scored};
use crate::mechanism::gradients;

/// Where a gradient readout was taken: an iteration's whole batch, or one of its optimizer
/// steps' mini-batches (`step` of `steps`, from 1).
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    iter: u32,
    step: Option<(usize, usize)>,
}

impl At {
    pub(super) fn whole(iter: u32) -> At {
        At { iter, step: None }
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            None => write!(f, "{}", self.iter),
            Some((step, steps)) => write!(f, "{} (step {step}/{steps})", self.iter),
        }
    }
}

/// Each iteration's net gradients of one run of `tiny-steps-filler`, its tokens split into
/// filler and the rest (iterations without a coeffs file are skipped; the advantages are
/// the coeffs file's, responses with none take no part); with `per_step`, each optimizer
/// step's apart.
pub(super) fn filler_readouts(
    run: &Labelled,
    per_step: bool,
) -> Result<Vec<(At, gradients::Readout)>> {
    let (ctx, task, tokenizer) = (&run.ctx, run.task, &run.tokenizer);
    let mut out = Vec::new();
    for scored in scored_iterations(ctx) {
        let Scored {
            iter,
            rollouts,
            coeffs,
            ..
        } = scored?;
        let coeff_of = Index::new(&coeffs);
        let mut labelled = Vec::with_capacity(rollouts.len());
        for r in &rollouts {
            let c = coeff_of.get(r, "coeffs").map_err(anyhow::Error::msg)?;
            let pieces = decoded(tokenizer, &r.response_token_ids)?;
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let labels = task.filler_tokens(&pieces).unwrap_or_default();
            labelled.push((c.advantage, labels));
        }
        let rows: Vec<gradients::Row<'_>> = rollouts
            .iter()
            .zip(&labelled)
            .map(|(r, (advantage, labels))| gradients::Row {
                prompt: &r.prompt_token_ids,
                response: &r.response_token_ids,
                advantage: *advantage,
                shared: (*advantage != 0.0).then_some(labels.as_slice()),
            })
            .collect();
        if !per_step {
            out.push((At::whole(iter), net_gradients(ctx, iter, &rows)?));
            continue;
        }
        let scores: Vec<ScoreRow> = read_path(&ctx.run.output(iter, Stage::Score))?.0;
        let score_of = Index::new(&scores);
        let step_rows = rollouts
            .iter()
            .map(|r| {
                let sc = score_of.get(r, "scores").map_err(anyhow::Error::msg)?;
                Ok(deltarl_update::StepRow {
                    prompt_id: &r.prompt_id,
                    kept: sc.kept,
                    response_tokens: r.response_token_ids.len(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let steps = deltarl_update::step_members(&ctx.cfg.stages.update, iter, &step_rows);
        for (k, members) in steps.iter().enumerate() {
            let step_rows: Vec<gradients::Row<'_>> = members.iter().map(|&i| rows[i]).collect();
            let at = At {
                iter,
                step: Some((k + 1, steps.len())),
            };
            out.push((at, net_gradients(ctx, iter, &step_rows)?));
        }
    }
    Ok(out)
}
