//! The eval stage: held-out accuracy of the policy this iteration's update wrote, on the
//! built-in task's test split and on the benchmark files of `[eval] benchmarks`; writes
//! eval.parquet (one row per answer, `benchmark` naming where it comes from).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::json;

use deltarl_eval::{accuracy_by_source, fitting, summarize, Request, Sampler};
use deltarl_model::Tokenizer;
use deltarl_schemas::{
    write_table, BenchmarkSummary, Engine, EvalRow, EvalSummary, PromptRow, Stage,
};

use super::contract::Contract;
use super::env::{load_policy, longest_prompt, sampling_engine, Env, Vocabulary};
use super::ran::Ran;
use crate::config::{CodeOptions, Resolved};

/// The eval stage's contract.
pub struct Eval;

impl Contract for Eval {
    const STAGE: Stage = Stage::Eval;
    type Settings = Settings;
    type Summary = EvalSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.eval
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

/// The eval stage's settings (the eval crate's own).
pub type Settings = deltarl_eval::Settings;

/// [`deltarl_eval::evaluate`] with a progress line (responses sampled), code problems run
/// in a sandbox with `code`'s settings.
pub fn evaluate(
    sampler: &Sampler,
    bench: &str,
    prompts: &[PromptRow],
    s: &Request,
    code: &CodeOptions,
) -> Result<Vec<EvalRow>> {
    let grader = crate::rewards::grader_for(prompts, code.settings())
        .with_context(|| format!("benchmark {bench} has code problems"))?;
    let progress =
        crate::progress::Progress::new("eval", prompts.len() as u64 * u64::from(s.samples));
    let rows = deltarl_eval::evaluate(sampler, bench, prompts, s, grader.as_ref(), &mut |done| {
        progress.set_position(done as u64)
    })?;
    progress.finish();
    Ok(rows)
}

/// The built-in task's held-out problems as the eval stage asks for them: the first
/// `s.problems`, and `request` with its template in the chat template of the model in `dir`
/// when the settings ask for it.
fn heldout_prompts(
    task: deltarl_data::Builtin,
    s: &Settings,
    dir: &Path,
    mut request: Request,
) -> Result<(Vec<PromptRow>, Request)> {
    let mut prompts = task.test_prompts(s.problems);
    if s.chat_template {
        request.template = crate::chat::apply(&mut prompts, &request.template, dir)?;
    }
    Ok((prompts, request))
}

/// The answers of `policy` (the policy of iteration `iter`; 0 = the base, read from
/// `dir`) to the built-in dataset's held-out problems, sampled by our engine as the eval
/// stage samples them; only `shard`'s share of the sessions.
pub fn heldout_rows(
    policy: &deltarl_model::Policy,
    dir: &Path,
    task: deltarl_data::Builtin,
    s: &Settings,
    iter: u32,
    shard: deltarl_schemas::Shard,
) -> Result<Vec<deltarl_schemas::EvalRow>> {
    let mut request = s.request(iter);
    request.shard = shard;
    let (prompts, request) = heldout_prompts(task, s, dir, request)?;
    let sampler = Sampler::native(policy);
    evaluate(&sampler, &task.heldout_name(), &prompts, &request, &s.code)
}

/// One benchmark as the stage samples it: its problems that fit the context, how they are
/// asked, and how many did not fit.
struct Bench {
    name: String,
    prompts: Vec<PromptRow>,
    request: Request,
    skipped: usize,
}

/// The stage's benchmarks in the order of its file: the task's held-out problems, then
/// each file of `eval.benchmarks`.
fn benches(
    s: &Settings,
    dir: &Path,
    request: &Request,
    (tokenizer, context): (&Tokenizer, usize),
) -> Result<Vec<Bench>> {
    let mut out = Vec::new();
    if let Some(task) = s.data_source.builtin() {
        let (prompts, request) = heldout_prompts(task, s, dir, request.clone())?;
        out.push(Bench {
            name: task.heldout_name(),
            prompts,
            request,
            skipped: 0,
        });
    }
    for file in s.files() {
        let name = crate::data::benchmark_name(&file);
        let mut prompts = crate::data::read_benchmark(&file)
            .with_context(|| format!("benchmark {name} of eval.benchmarks"))?;
        let mut at = request.clone();
        if s.chat_template {
            at.template = crate::chat::apply(&mut prompts, &at.template, dir)?;
        }
        let (prompts, skipped) =
            fitting(tokenizer, context, &at.template, at.max_new_tokens, prompts)?;
        out.push(Bench {
            name,
            prompts,
            request: at,
            skipped,
        });
    }
    Ok(out)
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
    // vLLM loads the folder itself: here only the tokenizer, end tokens and context.
    let policy = match s.engine {
        Engine::Native => Some(load_policy(&dir, env.device, s.dtype)?),
        Engine::Vllm => None,
    };
    let vocabulary = match &policy {
        Some(_) => None,
        None => Some(Vocabulary::of(&dir)?),
    };
    let (tokenizer, eos_ids, context) = match (&policy, &vocabulary) {
        (Some(p), _) => (&p.tokenizer, p.eos_ids(), p.model.max_positions() as usize),
        (None, Some(v)) => (&v.tokenizer, v.eos_ids.clone(), v.context),
        (None, None) => bail!("no policy to evaluate"),
    };
    let mut request = s.request(env.iter);
    request.shard = env.shard();
    let benches = benches(s, &dir, &request, (tokenizer, context))?;
    // With vLLM: the server kept from this process's rollout, reloaded with this policy
    // (and probed), or a new one; sized for the longest prompt of every benchmark.
    let mut vllm_settings = crate::vllm::Settings::new(&s.vllm);
    let vllm = match s.engine {
        Engine::Native => None,
        Engine::Vllm => {
            let prompts = benches.iter().flat_map(|b| {
                let template = b.request.template.as_str();
                b.prompts
                    .iter()
                    .map(move |p| (template, p.problem.as_str()))
            });
            let longest = longest_prompt(tokenizer, prompts)?;
            Some(env.vllm_server(
                ("vllm-eval", s.dtype, request.seed),
                &mut vllm_settings,
                (longest, request.max_new_tokens),
                &dir,
                tokenizer,
            )?)
        }
    };
    let engine = sampling_engine(
        policy.as_ref(),
        vllm.as_ref().map(|(v, _)| v),
        vllm_settings.concurrency,
    )?;
    let sampler = Sampler {
        engine,
        tokenizer,
        eos_ids,
        context,
    };
    // Several processes: each sampled its share of a benchmark; rank 0 gathers them in the
    // order of one process (problems as listed, then samples).
    let gather = |part: Vec<EvalRow>, prompts: &[PromptRow]| -> Result<Vec<EvalRow>> {
        let Some(g) = env.ranks else {
            return Ok(part);
        };
        let ids = prompts.iter().map(|p| p.id.as_str());
        crate::ranks::gather_samples(g, part, ids, |r| (r.problem_id.as_str(), r.sample_idx))
    };
    let mut rows = Vec::new();
    let mut benchmarks = BTreeMap::new();
    for b in &benches {
        let part = evaluate(&sampler, &b.name, &b.prompts, &b.request, &s.code);
        // A failed request usually means the server died: say so, with its log.
        let part = match (part, &vllm) {
            (Err(e), Some((v, _))) => return Err(v.explain(e)),
            (part, _) => part?,
        };
        let part = gather(part, &b.prompts)?;
        let m = summarize(&b.name, &part);
        let by = accuracy_by_source(part.iter().map(|r| (r.data_source.as_deref(), r.correct)));
        let summary = BenchmarkSummary {
            problems: m.problems,
            k: m.k,
            avg_at_k: m.avg.mean,
            pass_at_k: m.pass.mean,
            skipped: b.skipped,
            by_source: (by.len() > 1).then_some(by),
        };
        benchmarks.insert(b.name.clone(), summary);
        rows.extend(part);
    }
    let engine_server = match vllm {
        Some((v, acquired)) => {
            crate::vllm::release(v, &vllm_settings, env.kept)?;
            Some(acquired)
        }
        None => None,
    };
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
    let heldout = task.map(deltarl_data::Builtin::heldout_name);
    let summary = EvalSummary {
        accuracy: acc(rows
            .iter()
            .filter(|r| heldout.as_ref().is_none_or(|h| &r.benchmark == h))
            .map(|r| r.correct)
            .collect()),
        benchmarks: (!s.benchmarks.is_empty()).then_some(benchmarks),
        engine: s.engine,
        engine_server,
    };
    Ok(Some(Ran::new(rows.len(), summary)))
}
