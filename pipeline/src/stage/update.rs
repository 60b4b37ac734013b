//! The update stage: the reweighted clipped policy-gradient step (AdamW, optimizer state
//! carried across iterations) on the previous policy; writes `policy/` and update.parquet.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use deltarl_dist::Group;
use deltarl_optim::AdamW;
use deltarl_schemas::{Stage, UpdateSummary};
use deltarl_update::shell::{check_steps, train_rows, write_metrics, Inputs};

use super::contract::Contract;
use super::env::{load_policy, Env};
use super::ran::Ran;
use super::temp_folder::TempFolder;
use crate::config::Resolved;
use crate::memory::{Phase, Usage};
use crate::progress::Progress;

/// The update stage's contract.
pub struct Update;

impl Contract for Update {
    const STAGE: Stage = Stage::Update;
    type Settings = Settings;
    type Summary = UpdateSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.update
    }

    fn extra_inputs(_: &Settings, env: &Env) -> Result<Vec<PathBuf>> {
        Ok(optimizer_state(env)?.into_iter().collect())
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<UpdateSummary>>> {
        update(env, s)
    }

    fn line(s: &UpdateSummary) -> String {
        let skipped = match s.skipped_steps {
            0 => String::new(),
            n => format!(", {n} steps skipped (non-finite gradient norm)"),
        };
        // A run without an optimizer step has no step metrics.
        let or_nan = |x: Option<f64>| x.unwrap_or(f64::NAN);
        format!(
            "loss {:.4}, grad norm {:.3}, clip {:.3}, sampler/trainer |d logp| max {:.1e}{skipped}",
            or_nan(s.loss),
            or_nan(s.grad_norm),
            or_nan(s.clip_frac),
            s.mismatch.max_abs
        )
    }
}

/// The update stage's settings (the update crate's own).
pub type Settings = deltarl_update::Settings;

/// The folder of the optimizer state written beside a policy folder: `iter-N/optimizer/`,
/// outside the Hugging Face folder so engines that load every `*.safetensors` of a model
/// folder (vLLM) see only the model.
pub fn optimizer_dir(policy: &Path) -> PathBuf {
    policy.with_file_name("optimizer")
}

/// The optimizer state the previous policy carries, if any (an input of the update): its
/// `optimizer/` folder, or inside the policy folder where runs before that layout put it.
/// A pruned one still counts (its hash is on record), so pruning changes no stage's inputs.
pub fn optimizer_state(env: &Env) -> Result<Option<PathBuf>> {
    let policy = env.previous_policy();
    for p in [optimizer_dir(&policy), policy].map(|d| d.join("optimizer.safetensors")) {
        if p.exists() || env.run.is_pruned(&p)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

fn update(env: &Env, s: &Settings) -> Result<Option<Ran<UpdateSummary>>> {
    let inputs = Inputs::read(
        &env.file(Stage::Rollout),
        &env.file(Stage::Score),
        &env.file(Stage::Features),
        &env.file(Stage::Coeffs),
    )?;
    let (rows, mismatch) = train_rows(&s.join, &inputs)?;
    drop(inputs);
    let src = env.previous_policy();
    let policy = load_policy(&src, env.device, s.dtype)?;
    // With several processes and sharding, each keeps the state of its share of the
    // parameters only (and under ZeRO-2 their gradient sums).
    let shard = env
        .ranks
        .map_or(deltarl_schemas::Shard::WHOLE, Group::shard);
    let mut opt = AdamW::sharded(&policy.vs, s.adamw(), shard, s.sharding);
    let load = Phase::start();
    if let Some(dir) = optimizer_state(env)?.as_deref().and_then(Path::parent) {
        opt.load(dir)?;
    }
    let load = load.finish();
    let reference = if s.loss.kl_coef != 0.0 {
        Some(load_policy(env.base, env.device, s.dtype)?)
    } else {
        None
    };
    let progress = Progress::new("update", rows.len() as u64 * s.optimizer_steps as u64);
    let train = Phase::start();
    let metrics = deltarl_update::run(
        s,
        env.iter,
        &policy,
        &mut opt,
        reference.as_ref().map(|p| &p.model),
        &rows,
        env.ranks,
        &mut |n| progress.inc(n as u64),
    )
    .with_context(|| format!("updating the policy in {}", src.display()))?;
    progress.finish();
    let train = train.finish();
    // Refused before anything is written: no finite step, or non-finite weights.
    let skipped = check_steps(&metrics, &policy, s)?;
    // What it held of the gradient sums, then their memory back before the saves.
    let grad_sum_bytes = 4 * opt.grad_sum_elements();
    opt.release_grads()?;
    // The optimizer's state goes to a temporary folder of rank 0's, into which every
    // process writes the part it owns (the file one process writes); renamed into place
    // with the policy when both are complete.
    let iter_dir = env.run.iter_dir(env.iter);
    let tmp_opt = if env.writes() {
        Some(TempFolder::new(&iter_dir, "optimizer")?)
    } else {
        None
    };
    // Rank 0's process id names the folder; the other processes learn it from rank 0.
    let mut pid = std::process::id();
    if let Some(g) = env.ranks {
        let mut t = tch::Tensor::from_slice(&[i64::from(pid)]);
        g.broadcast(&mut t, 0)?;
        pid = u32::try_from(t.int64_value(&[0])).context("rank 0's process id")?;
    }
    let opt_tmp_path = TempFolder::path_for(&iter_dir, "optimizer", pid);
    let save = Phase::start();
    opt.save(&opt_tmp_path, env.ranks)
        .with_context(|| format!("saving the optimizer state in {}", opt_tmp_path.display()))?;
    let measured = state_memory(env, &opt, grad_sum_bytes, [train, load, save.finish()])?;
    let Some(tmp_opt) = tmp_opt else {
        return Ok(None);
    };
    // Every process holds the same weights now: rank 0 writes the new policy to a
    // temporary folder, renamed into place when complete.
    let final_dir = env.this_policy();
    let tmp = TempFolder::new(&iter_dir, "policy")?;
    let weights = deltarl_model::save_sharded(&policy, tmp.path(), s.shard_bytes)?;
    let opt_dir = optimizer_dir(&final_dir);
    tmp.commit(&final_dir)?;
    tmp_opt.commit(&opt_dir)?;
    env.write_output(Stage::Update, |w| -> Result<()> {
        write_metrics(w, s, env.iter, &metrics, &mismatch, env.meta())?;
        Ok(())
    })?;
    let last = metrics.last();
    Ok(Some(Ran {
        rows: metrics.len(),
        summary: UpdateSummary {
            responses: rows.len(),
            skipped_steps: skipped,
            loss: last.map(|m| m.loss),
            grad_norm: last.map(|m| m.grad_norm),
            clip_frac: last.map(|m| m.clip_frac),
            entropy: last.map(|m| m.entropy),
            kl: last.map(|m| m.kl),
            approx_kl_old: last.map(|m| m.approx_kl_old),
            mismatch,
        },
        outputs: weights
            .iter()
            .filter_map(|w| w.file_name())
            .map(|f| final_dir.join(f))
            .chain([opt_dir.join("optimizer.safetensors")])
            .collect(),
        measured,
    }))
}

/// Each process's resident memory while it loaded and saved the optimizer's state, beside
/// its share of the state and the largest state tensor (what the two should stay within,
/// plus buffers), gathered on rank 0 for metrics.jsonl as `optimizer/rankR/...` (every
/// process calls it).
/// Each process's resident peaks over the training steps, the state's load and its save
/// (`phases`, in that order), and what it holds of the state and (during the steps) of the
/// gradient sums, all gathered to every process: `optimizer/rank{r}/{name}`.
fn state_memory(
    env: &Env,
    opt: &AdamW,
    grad_sum_bytes: usize,
    phases: [Option<Usage>; 3],
) -> Result<Vec<(String, f64)>> {
    let over = |u: Option<Usage>| u.map_or(f64::NAN, |u| u.peak.saturating_sub(u.start) as f64);
    let [train, load, save] = phases;
    let mine = [
        over(load),
        over(save),
        (4 * opt.state_elements()) as f64,
        (4 * opt.largest_param_elements()) as f64,
        over(train),
        grad_sum_bytes as f64,
    ];
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = match env.ranks {
        Some(g) => g.all_gather_bytes(&bytes)?,
        None => vec![bytes],
    };
    const NAMES: [&str; 6] = [
        "load_rss_over_start_bytes",
        "save_rss_over_start_bytes",
        "owned_state_bytes",
        "largest_state_tensor_bytes",
        "train_rss_over_start_bytes",
        "gradient_sum_bytes",
    ];
    let mut out = Vec::new();
    for (rank, b) in all.iter().enumerate() {
        if b.len() != 8 * NAMES.len() {
            anyhow::bail!("rank {rank} sent {} bytes of measurements", b.len());
        }
        for (name, x) in NAMES.iter().zip(b.chunks_exact(8)) {
            let x = f64::from_le_bytes(x.try_into().context("a rank's measurement")?);
            // Where /proc cannot be read nothing was measured, and nothing is logged.
            if x.is_finite() {
                out.push((format!("optimizer/rank{rank}/{name}"), x));
            }
        }
    }
    Ok(out)
}
