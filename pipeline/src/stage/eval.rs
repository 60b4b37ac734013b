//! The eval stage: held-out accuracy of the policy this iteration's update wrote, on the
//! built-in task's test split and on the benchmark files of `[eval] benchmarks`; writes
//! eval.parquet (one row per answer, `benchmark` naming where it comes from).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::json;

use deltarl_eval::{accuracy_by_source, fitting, summarize, Request, Sampling};
use deltarl_schemas::{write_table, BenchmarkSummary, EvalRow, EvalSummary, PromptRow, Stage};

use super::contract::Contract;
use super::env::{load_policy, Env};
use super::ran::Ran;
use crate::config::{CodeOptions, Resolved};

/// The eval stage's contract.
pub struct Eval;

impl Contract for Eval {
    const STAGE: Stage = Stage::Eval;
    type Settings = Settings;
    type Summary = EvalSummary;

    fn settings(cfg: &Resolved) -> Result<Settings> {
        Ok(settings(cfg))
    }

    fn extra_inputs(s: &Settings, _: &Env) -> Result<Vec<PathBuf>> {
        Ok(s.files())
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<EvalSummary>>> {
        evaluate_policy(env, s)
    }

    fn line(s: &EvalSummary) -> String {
        let mut line = format!("held-out accuracy {:.3}", s.accuracy);
        for (name, b) in s.benchmarks.iter().flatten() {
            line.push_str(&format!(
                ", {name} avg@{k} {:.3} pass@{k} {:.3}",
                b.avg_at_k,
                b.pass_at_k,
                k = b.k
            ));
        }
        line
    }
}

/// How held-out answers are sampled under this configuration: the rollout's prompt and
/// length limits.
pub fn sampling(cfg: &Resolved) -> Sampling {
    let o = &cfg.opts;
    Sampling {
        seed: o.seed,
        template: o.data.template.clone(),
        max_new_tokens: o.rollout.max_new_tokens,
        stop: o.rollout.stop.clone(),
        max_batch_rows: o.rollout.max_batch_rows,
        max_cache_tokens: crate::config::zero_is_off(o.rollout.kv_cache_tokens),
        session_rows: crate::config::zero_is_off(o.rollout.session_rows),
    }
}

/// The eval stage's settings (the eval crate's own).
pub type Settings = deltarl_eval::Settings;

/// The eval stage's settings under this configuration.
pub fn settings(cfg: &Resolved) -> Settings {
    let o = &cfg.opts;
    Settings {
        data_source: o.data.source.clone(),
        problems: o.eval.problems,
        samples: o.eval.samples,
        temperature: o.eval.temperature,
        top_p: o.eval.top_p,
        top_k: o.eval.top_k,
        sampling: sampling(cfg),
        dtype: o.model.dtype,
        benchmarks: o.eval.benchmarks.clone(),
        chat_template: o.data.chat_template,
        code: o.score.code.clone(),
    }
}

/// [`deltarl_eval::evaluate`] with a progress line (responses sampled), code problems run
/// in a sandbox with `code`'s settings.
pub fn evaluate(
    policy: &deltarl_model::Policy,
    bench: &str,
    prompts: &[PromptRow],
    s: &Request,
    code: &CodeOptions,
) -> Result<Vec<EvalRow>> {
    let grader = crate::rewards::grader_for(prompts, code.settings())
        .with_context(|| format!("benchmark {bench} has code problems"))?;
    let progress =
        crate::progress::Progress::new("eval", prompts.len() as u64 * u64::from(s.samples));
    let rows = deltarl_eval::evaluate(policy, bench, prompts, s, grader.as_ref(), &mut |done| {
        progress.set_position(done as u64)
    })?;
    progress.finish();
    Ok(rows)
}

/// The answers of `policy` (the policy of iteration `iter`; 0 = the base, read from
/// `dir`) to the built-in dataset's held-out problems, sampled as the eval stage samples
/// them (in the chat template of the model in `dir` when the settings ask for it); only
/// `shard`'s share of the sessions.
pub fn heldout_rows(
    policy: &deltarl_model::Policy,
    dir: &std::path::Path,
    task: deltarl_data::Builtin,
    s: &Settings,
    iter: u32,
    shard: deltarl_schemas::Shard,
) -> Result<Vec<deltarl_schemas::EvalRow>> {
    let mut prompts = task.test_prompts(s.problems);
    let mut settings = s.request(iter);
    settings.shard = shard;
    if s.chat_template {
        settings.template = crate::chat::apply(&mut prompts, &settings.template, dir)?;
    }
    evaluate(policy, &task.heldout_name(), &prompts, &settings, &s.code)
}

/// The stage's work (None on a rank other than 0, which only samples its share).
fn evaluate_policy(env: &Env, s: &Settings) -> Result<Option<Ran<EvalSummary>>> {
    let task = s.data_source.builtin();
    if task.is_none() && s.benchmarks.is_empty() {
        let builtin = deltarl_data::Builtin::sources();
        bail!(
            "the eval stage needs a built-in data.source ({}) or `eval.benchmarks` (or use \
             `deltarl eval --bench` for files)",
            builtin.join(", ")
        );
    }
    let dir = env.this_policy();
    let policy = load_policy(&dir, env.device, s.dtype)?;
    let mut settings = s.request(env.iter);
    settings.shard = env.shard();
    // Several processes: each sampled its share of a benchmark's sessions; rank 0 gathers
    // them in the order of one process (problems as listed, then samples).
    let gather = |part: Vec<EvalRow>, prompts: &[PromptRow]| -> Result<Vec<EvalRow>> {
        let Some(g) = env.ranks else {
            return Ok(part);
        };
        let ids = prompts.iter().map(|p| p.id.as_str());
        crate::ranks::gather_samples(g, part, ids, |r| (r.problem_id.as_str(), r.sample_idx))
    };
    let mut rows = Vec::new();
    let mut benchmarks = BTreeMap::new();
    let mut summarise = |name: &str, part: &[EvalRow], skipped: usize| {
        let m = summarize(name, part);
        let by = accuracy_by_source(part.iter().map(|r| (r.data_source.as_deref(), r.correct)));
        let b = BenchmarkSummary {
            problems: m.problems,
            k: m.k,
            avg_at_k: m.avg.mean,
            pass_at_k: m.pass.mean,
            skipped,
            by_source: (by.len() > 1).then_some(by),
        };
        benchmarks.insert(name.to_string(), b);
    };
    let heldout = task.map(deltarl_data::Builtin::heldout_name);
    if let (Some(task), Some(name)) = (task, &heldout) {
        let part = heldout_rows(&policy, &dir, task, s, env.iter, settings.shard)?;
        let part = gather(part, &task.test_prompts(s.problems))?;
        summarise(name, &part, 0);
        rows.extend(part);
    }
    for file in s.files() {
        let name = crate::data::benchmark_name(&file);
        let mut prompts = crate::data::read_benchmark(&file)
            .with_context(|| format!("benchmark {name} of eval.benchmarks"))?;
        let mut at = settings.clone();
        if s.chat_template {
            at.template = crate::chat::apply(&mut prompts, &at.template, &dir)?;
        }
        let (prompts, skipped) = fitting(&policy, &at.template, at.max_new_tokens, prompts)?;
        let part = gather(evaluate(&policy, &name, &prompts, &at, &s.code)?, &prompts)?;
        summarise(&name, &part, skipped);
        rows.extend(part);
    }
    if !env.writes() {
        return Ok(None);
    }
    // How the answers were drawn, whatever the hash leaves out as a default.
    let drawn = json!({
        "samples": s.samples,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
    });
    let meta = env
        .meta()
        .with("settings", serde_json::to_string(s).unwrap_or_default())
        .with("sampling", drawn.to_string());
    env.write_output(Stage::Eval, |w| write_table(w, &rows, &meta))?;
    let acc =
        |part: Vec<bool>| part.iter().filter(|&&c| c).count() as f64 / part.len().max(1) as f64;
    let summary = EvalSummary {
        accuracy: acc(rows
            .iter()
            .filter(|r| heldout.as_ref().is_none_or(|h| &r.benchmark == h))
            .map(|r| r.correct)
            .collect()),
        benchmarks: (!s.benchmarks.is_empty()).then_some(benchmarks),
    };
    Ok(Some(Ran::new(rows.len(), summary)))
}
