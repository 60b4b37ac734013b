//! Held-out answers `compare` grades itself, beside each run's eval stage: the shared base's
//! (iteration 0 of every curve) and each final policy's sampled as the rollout samples —
//! what RL optimises — next to the eval stage's own setting (greedy in the shipped
//! configs). Both are kept in the comparison folder and reused only for the same weights
//! and settings, so a rerun of a finished comparison grades nothing again.

use std::path::Path;

use anyhow::{Context, Result};
use deltarl_schemas::{read_path, EvalRow, Manifest, Stage};

use super::outcome::runs_of;
use crate::context::Ctx;
use crate::stage::eval::{heldout_rows, Settings};

/// Answers a problem in the sampled readout: enough that a problem's score is a fraction,
/// not a coin, at four times a greedy evaluation's cost.
pub const SAMPLED_ANSWERS: u32 = 4;

/// The eval stage's settings under `cfg`, drawn by our engine whatever the rollout's:
/// `compare` loads each policy and samples it itself.
fn native_settings(cfg: &crate::config::Resolved) -> Settings {
    Settings {
        engine: deltarl_schemas::Engine::Native,
        vllm: Default::default(),
        ..cfg.stages.eval.clone()
    }
}

/// The weights a stage wrote, by the hashes its manifest records ("" when it has none).
fn weights(manifest: &Path) -> Result<String> {
    Ok(Manifest::read(manifest)?
        .map(|m| m.outputs.values().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default())
}

/// The rows in `path` when they were graded for the same `weights` and `s`, else those
/// `grade` computes, written there.
fn cached(
    ctx: &Ctx,
    path: &Path,
    weights: String,
    s: &Settings,
    grade: impl FnOnce() -> Result<Vec<EvalRow>>,
) -> Result<Vec<EvalRow>> {
    let settings = serde_json::to_string(s)?;
    if path.exists() && !weights.is_empty() {
        let (rows, meta) = read_path::<EvalRow>(path)?;
        if meta.extra.get("base_weights") == Some(&weights)
            && meta.extra.get("settings") == Some(&settings)
        {
            return Ok(rows);
        }
    }
    let rows = grade()?;
    let meta = deltarl_schemas::FileMeta::new(Stage::Eval.name(), &ctx.cfg.hash())
        .with("settings", settings)
        .with("base_weights", weights);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    deltarl_schemas::atomic_write(path, |w| deltarl_schemas::write_table(w, &rows, &meta))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(rows)
}

/// The held-out answers of the shared base, graded as the eval stage grades, kept as
/// `base-eval.parquet`. None when the runs have no built-in task.
pub fn base_eval(ctx: &Ctx, base: &Path, folder: &Path) -> Result<Option<Vec<EvalRow>>> {
    base_readout(
        ctx,
        base,
        folder,
        "base-eval.parquet",
        native_settings(&ctx.cfg),
    )
}

/// The held-out answers of the shared base sampled as the rollout samples
/// ([`sampled_settings`]), kept as `base-sampled.parquet`: the sampled readout's iteration
/// 0, against which a gain in that readout is measured. None when the runs have no built-in
/// task.
pub fn base_sampled(ctx: &Ctx, base: &Path, folder: &Path) -> Result<Option<Vec<EvalRow>>> {
    base_readout(
        ctx,
        base,
        folder,
        "base-sampled.parquet",
        sampled_settings(ctx),
    )
}

/// The shared base's held-out answers under `s`, kept as `file` in the comparison's
/// `folder`. They are drawn with the comparison's lowest seed, not the seed of the run
/// that asks (the first of this invocation): the base is one for all its runs, so a
/// comparison run in parts (`--first-seed 3 --seeds 1`, ...) keeps one base readout, the
/// one a single invocation of all its seeds draws.
fn base_readout(
    ctx: &Ctx,
    base: &Path,
    folder: &Path,
    file: &str,
    mut s: Settings,
) -> Result<Option<Vec<EvalRow>>> {
    let Some(task) = s.data_source.builtin() else {
        return Ok(None);
    };
    if let Some(lowest) = runs_of(folder)?.iter().map(|(_, seed)| *seed).min() {
        s.sampling.seed = lowest;
    }
    let path = folder.join(file);
    let rows = cached(
        ctx,
        &path,
        weights(&base.join("manifest.json"))?,
        &s,
        || {
            let policy = crate::stage::load_policy(base, ctx.device, s.dtype)?;
            heldout_rows(&policy, base, task, &s, 0, deltarl_schemas::Shard::WHOLE)
        },
    )?;
    Ok(Some(rows))
}

/// The eval stage's settings with the rollout's sampling: [`SAMPLED_ANSWERS`] answers a
/// problem at the rollout's temperature, top-p and top-k.
pub fn sampled_settings(ctx: &Ctx) -> Settings {
    let r = &ctx.cfg.opts.rollout;
    Settings {
        samples: SAMPLED_ANSWERS,
        temperature: r.temperature,
        top_p: r.top_p,
        top_k: r.top_k,
        ..native_settings(&ctx.cfg)
    }
}

/// The held-out answers of the run's policy after iteration `iter`, sampled as the rollout
/// samples ([`sampled_settings`]), kept as `sampled/<run>.parquet`. None when the run has
/// no built-in task.
pub fn sampled_eval(
    ctx: &Ctx,
    folder: &Path,
    run: &str,
    iter: u32,
) -> Result<Option<Vec<EvalRow>>> {
    let s = sampled_settings(ctx);
    let Some(task) = s.data_source.builtin() else {
        return Ok(None);
    };
    let dir = ctx.run.policy_dir(iter);
    let rows = cached(
        ctx,
        &folder.join("sampled").join(format!("{run}.parquet")),
        weights(&ctx.run.manifest_path(iter, Stage::Update))?,
        &s,
        || {
            let policy = crate::stage::load_policy(&dir, ctx.device, s.dtype)?;
            heldout_rows(&policy, &dir, task, &s, iter, deltarl_schemas::Shard::WHOLE)
        },
    )
    .with_context(|| format!("the sampled held-out readout of {}", dir.display()))?;
    Ok(Some(rows))
}
