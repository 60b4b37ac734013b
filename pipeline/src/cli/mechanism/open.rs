//! What the mechanism's readouts share: opening a run by its task's labels, reading the
//! iterations that have coefficients, decoding a response token by token as the oracles
//! read it, and the net gradients of a set of rows at the policy that sampled their
//! iteration.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use deltarl_model::generate::logprob_temperature;
use deltarl_model::Dtype;
use deltarl_schemas::{read_path, CoeffRow, RolloutRow, Stage};
use tch::Device;

use crate::context::Ctx;
use crate::mechanism::gradients;
use crate::stage::{load_policy, policy_before};

/// Rows a teacher-forced pass of the gradient readout takes.
const GRADIENT_PASS_ROWS: usize = 16;

/// The labels a readout needs of a run's task: which tasks have them, and what a source
/// without them is told.
pub(super) struct Labels {
    has: fn(deltarl_data::Task) -> bool,
    refused: &'static str,
}

/// Each solution's first error (the first-error classes).
pub(super) const FIRST_ERROR: Labels = Labels {
    has: deltarl_data::Task::has_steps,
    refused: "is not a built-in arithmetic task (tiny-arith, tiny-steps, tiny-steps-varied): \
              the readout needs each solution's first error",
};

/// The filler words (the filler classes).
pub(super) const FILLER: Labels = Labels {
    has: deltarl_data::Task::has_filler,
    refused: "has no filler to split off (tiny-steps-filler[-80], or tiny-steps at dose 0)",
};

/// A run opened for a readout by its task's labels.
pub(super) struct Labelled {
    pub(super) ctx: Ctx,
    /// Its built-in task, one that has the labels the readout needs.
    pub(super) task: deltarl_data::Task,
    /// Its base's tokenizer.
    pub(super) tokenizer: deltarl_model::Tokenizer,
}

/// Opens run `name` for a readout that needs `labels` (an error says what its task's
/// source lacks).
pub(super) fn open_labelled(runs_dir: &Path, name: &str, labels: &Labels) -> Result<Labelled> {
    let ctx = Ctx::open_existing(runs_dir, name)?;
    let source = &ctx.cfg.opts.data.source;
    let task = source
        .task()
        .filter(|&t| (labels.has)(t))
        .with_context(|| {
            format!(
                "run {name}: `data.source` = \"{source}\" {}",
                labels.refused
            )
        })?;
    let tok_path = ctx.base_dir().join("tokenizer.json");
    let tokenizer = deltarl_model::Tokenizer::from_file(&tok_path)
        .with_context(|| format!("run {name}: {}", tok_path.display()))?;
    Ok(Labelled {
        ctx,
        task,
        tokenizer,
    })
}

/// One iteration as a readout reads it: its rollouts and the coeffs stage's rows for them
/// (the advantages, and the coefficients).
pub(super) struct Scored {
    pub(super) iter: u32,
    pub(super) rollouts: Vec<RolloutRow>,
    pub(super) coeffs: Vec<CoeffRow>,
    /// The coeffs file, named in errors.
    pub(super) coeffs_path: PathBuf,
}

/// The run's iterations that have a coeffs file, in order, each read when it is reached
/// (the others are skipped: not yet run that far).
pub(super) fn scored_iterations(ctx: &Ctx) -> impl Iterator<Item = Result<Scored>> + '_ {
    ctx.run.iterations().into_iter().filter_map(move |iter| {
        let coeffs_path = ctx.run.output(iter, Stage::Coeffs);
        coeffs_path.exists().then(|| {
            Ok(Scored {
                iter,
                rollouts: read_path(&ctx.run.output(iter, Stage::Rollout))?.0,
                coeffs: read_path(&coeffs_path)?.0,
                coeffs_path,
            })
        })
    })
}

/// Each token of `ids` decoded alone (as the oracles read them).
pub(super) fn decoded(tokenizer: &deltarl_model::Tokenizer, ids: &[u32]) -> Result<Vec<String>> {
    Ok(ids
        .iter()
        .map(|&t| tokenizer.decode(&[t]))
        .collect::<Result<_, _>>()?)
}

/// The net gradients of `rows`' classes at the policy that sampled iteration `iter`.
pub(super) fn net_gradients(
    ctx: &Ctx,
    iter: u32,
    rows: &[gradients::Row<'_>],
) -> Result<gradients::Readout> {
    let dir = policy_before(&ctx.run, &ctx.base_dir(), iter);
    let policy = load_policy(&dir, Device::Cpu, Dtype::F32)?;
    let temperature = logprob_temperature(ctx.cfg.opts.rollout.temperature);
    let params = policy.vs.trainable_variables();
    gradients::read(
        &policy.model,
        &params,
        rows,
        temperature,
        GRADIENT_PASS_ROWS,
    )
    .map_err(anyhow::Error::msg)
    .with_context(|| format!("{}", ctx.run.output(iter, Stage::Rollout).display()))
}
