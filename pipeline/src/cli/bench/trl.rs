//! `bench trl`: seconds per iteration of deltarl against TRL's `GRPOTrainer` on the same
//! model folder, prompts, group size, lengths, sampling, learning rate and loss (DAPO's
//! token mean, no KL), on CPU, in one run.
//!
//! Our side is `deltarl iterate` of the configuration for `reps` iterations in a scratch
//! runs folder (its own process, as a user runs it; no evaluation), each stage's seconds
//! read from its manifest. TRL's side trains on the prompts those iterations drew, in the
//! same order, rendered as our rollout rendered them, one optimizer step a generation batch
//! (`trl_grpo.py`), each step timed from its beginning to its end. Both at `--threads`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::baseline::{run_text, Asset, Assets};
use super::timing::{median, Run};
use crate::config::Resolved;
use deltarl_schemas::{RolloutRow, Stage};

const TRL_GRPO: Asset = Asset {
    name: "trl_grpo.py",
    text: include_str!("trl_grpo.py"),
};

/// What to compare.
pub struct Case {
    pub config: PathBuf,
    pub sets: Vec<String>,
}

pub fn run(run: Run, case: &Case) -> Result<()> {
    // 1. The configuration, with the bench's own changes: no evaluation, our thread count.
    let mut sets = case.sets.clone();
    sets.push("eval.every=0".into());
    sets.push(format!("model.threads={}", run.threads));
    let cfg = Resolved::load_with(&case.config, &sets)
        .with_context(|| format!("configuration {}", case.config.display()))?;
    let o = &cfg.opts;
    if o.model.source == "tiny" {
        bail!(
            "{}: model.source is the tiny model, which TRL cannot load (its tokenizer is \
             ours); bench trl takes a configuration of a model folder (configs/smollm2-math.toml)",
            case.config.display()
        );
    }
    let r = &o.rollout;
    println!(
        "{} ({}) on {}: {} prompts x {} samples x <= {} new tokens, T = {}, top-p {}, \
         lr {:e}; medians of {} iterations, {} threads",
        case.config.display(),
        o.algorithm.name(),
        o.model.folder().display(),
        r.prompts_per_iter,
        r.samples_per_prompt,
        r.max_new_tokens,
        r.temperature,
        r.top_p,
        o.update.lr,
        run.reps,
        run.threads
    );

    // 2. Ours.
    let scratch = tempfile::Builder::new()
        .prefix("deltarl-bench-trl-")
        .tempdir()
        .context("cannot make a scratch runs folder")?;
    let runs = scratch.path().join("runs");
    let exe = std::env::current_exe().context("cannot find the deltarl binary")?;
    let mut args: Vec<String> = vec![
        "iterate".into(),
        "--config".into(),
        case.config.display().to_string(),
        "--run".into(),
        "bench".into(),
        "--iters".into(),
        run.reps.to_string(),
    ];
    for s in &sets {
        args.extend(["--set".into(), s.clone()]);
    }
    let out = Command::new(&exe)
        .args(&args)
        .env("DELTARL_RUNS", &runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .output()
        .context("cannot run deltarl iterate")?;
    if !out.status.success() {
        bail!(
            "deltarl iterate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let run_dir = runs.join("bench");
    let stages = Stage::iteration()
        .iter()
        .copied()
        .filter(|s| *s != Stage::Eval)
        .collect::<Vec<_>>();
    let mut per_stage = vec![Vec::new(); stages.len()];
    let mut totals = Vec::new();
    for iter in 1..=run.reps as u32 {
        let mut total = 0.0;
        for (i, &stage) in stages.iter().enumerate() {
            let s = stage_seconds(&deltarl_schemas::layout::manifest_path(
                &run_dir, iter, stage,
            ))?;
            per_stage[i].push(s);
            total += s;
        }
        totals.push(total);
    }

    // 3. The prompts our iterations drew, in order, as our rollout rendered them.
    let jsonl = scratch.path().join("prompts.jsonl");
    let mut lines = String::new();
    for iter in 1..=run.reps as u32 {
        let path = deltarl_schemas::layout::iter_dir(&run_dir, iter).join("rollouts.parquet");
        let (rows, _) = deltarl_schemas::read_path::<RolloutRow>(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut seen = std::collections::HashSet::new();
        for row in rows {
            if seen.insert(row.prompt_id.clone()) {
                lines.push_str(&serde_json::to_string(
                    &serde_json::json!({ "prompt": row.prompt, "answer": row.gold }),
                )?);
                lines.push('\n');
            }
        }
    }
    std::fs::write(&jsonl, lines).with_context(|| format!("cannot write {}", jsonl.display()))?;

    // 4. TRL on them.
    let assets = Assets::write(&[&TRL_GRPO])?;
    let settings = scratch.path().join("trl.json");
    let json = serde_json::json!({
        "model": o.model.folder(),
        "threads": run.threads,
        "steps": run.reps,
        "samples": r.samples_per_prompt,
        "prompts": r.prompts_per_iter,
        "micro_batch": trl_micro_batch(r.prompts_per_iter * r.samples_per_prompt as usize, o.update.micro_batch_rows),
        "max_new_tokens": r.max_new_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "lr": o.update.lr,
        "weight_decay": o.update.weight_decay,
        "grad_clip": o.update.grad_clip,
        "eps_low": o.update.eps_low,
        "eps_high": cfg.eps_high,
        "seed": o.seed,
        "out": scratch.path().join("trl-out"),
    });
    std::fs::write(&settings, serde_json::to_vec(&json)?)?;
    let text = run_text(&[
        assets.path(&TRL_GRPO),
        settings.display().to_string(),
        jsonl.display().to_string(),
    ])
    .context("TRL's GRPOTrainer failed (`make venv` installs trl)")?;
    let trl: serde_json::Value = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .with_context(|| format!("trl_grpo.py printed no result: {text:?}"))?;
    let steps: Vec<f64> = serde_json::from_value(trl["step_seconds"].clone())
        .context("trl_grpo.py: no step_seconds")?;
    if steps.len() != run.reps {
        bail!(
            "TRL ran {} steps, asked for {}: {text}",
            steps.len(),
            run.reps
        );
    }

    // 5. The table.
    println!(
        "{:<12} {:>12} {:>12} {:>8}",
        "work", "deltarl s", "TRL s", "TRL/ours"
    );
    for (stage, secs) in stages.iter().zip(&per_stage) {
        println!("{:<12} {:>12.1}", stage.name(), median(secs.clone()));
    }
    let (ours, theirs) = (median(totals.clone()), median(steps.clone()));
    println!(
        "{:<12} {:>12.1} {:>12.1} {:>8.2}",
        "iteration",
        ours,
        theirs,
        theirs / ours
    );
    println!(
        "each: deltarl {:?} s, TRL {:?} s",
        totals
            .iter()
            .map(|s| (s * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        steps
            .iter()
            .map(|s| (s * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// TRL's per-device micro-batch: our update's, when it divides the generation batch
/// (TRL needs that), else the whole batch.
fn trl_micro_batch(batch: usize, ours: usize) -> usize {
    if ours > 0 && batch.is_multiple_of(ours) {
        ours
    } else {
        batch
    }
}

/// A finished stage's seconds, from its manifest.
fn stage_seconds(path: &Path) -> Result<f64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let m: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    m["seconds"]
        .as_f64()
        .with_context(|| format!("{}: no seconds", path.display()))
}
