//! The eval stage's core: sample answers to benchmark problems with the sampler the
//! rollout shares (`deltarl_sample`, seeds of the `eval` stage), grade them, and summarise as avg@k, unbiased pass@k and
//! maj@k with bootstrap confidence intervals over problems ([`stats`]). The warm start
//! grades its base with it too; reading benchmark files and writing `eval.parquet` is the
//! application's.

mod settings;
pub mod stats;

use std::collections::BTreeMap;

use deltarl_code::{CodeOutcome, Grader};
use deltarl_model::generate::SampleSettings;
use deltarl_model::{Policy, Tokenizer};
use deltarl_schemas::{EvalRow, FinishReason, PromptRow, SourceAccuracy, Stage};

pub use deltarl_sample::evaluation::{Draw, Request, Sampling};
pub use deltarl_sample::Engine;
pub use settings::Settings;
pub use stats::{bootstrap, Estimate};

/// Errors of the eval stage's core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("sampling answers to {bench}: {source}")]
    Sampling {
        bench: String,
        source: Box<deltarl_sample::Error>,
    },
    #[error(transparent)]
    Model(#[from] deltarl_model::Error),
    #[error("{bench}: {source}")]
    Code {
        bench: String,
        source: deltarl_code::RowsError,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What answers are drawn with: the engine (our decoder on the loaded policy, or a vLLM
/// server serving the policy's folder), the policy's tokenizer, end tokens and context.
#[derive(Clone)]
pub struct Sampler<'a> {
    pub engine: Engine<'a>,
    pub tokenizer: &'a Tokenizer,
    pub eos_ids: Vec<u32>,
    /// Positions the policy has (prompt and response together).
    pub context: usize,
}

impl<'a> Sampler<'a> {
    /// Our decoder on a loaded policy.
    pub fn native(policy: &'a Policy) -> Self {
        Sampler {
            engine: Engine::Native(&policy.model),
            tokenizer: &policy.tokenizer,
            eos_ids: policy.eos_ids(),
            context: policy.model.max_positions() as usize,
        }
    }
}

/// Generates `samples` answers per problem with the shared sampler (seeds of the `eval`
/// stage; `s.shard`'s share only: our engine's sessions, vLLM's prompts) and grades them: math answers with `s.extract`, code answers by running them
/// against their tests in `grader`'s sandbox (required when any problem is code).
/// `progress(responses_done)`.
pub fn evaluate(
    sampler: &Sampler,
    bench: &str,
    prompts: &[PromptRow],
    s: &Request,
    grader: Option<&Grader>,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<EvalRow>> {
    let core = deltarl_sample::Plan {
        samples_per_prompt: s.samples,
        template: s.template.clone(),
        sampling: SampleSettings::plain(s.temperature, s.max_new_tokens, sampler.eos_ids.clone())
            .truncated(s.top_p, s.top_k)
            .stopping_at(s.stop.clone())
            .batched(s.max_batch_rows, s.max_cache_tokens, s.session_rows),
        run_seed: s.seed,
        iter: s.iter,
        policy_iter: s.iter,
        seed_stage: Stage::Eval,
        max_prompt_tokens: None,
        shard: s.shard,
    };
    let samples = deltarl_sample::run_with(
        &core,
        sampler.tokenizer,
        sampler.engine,
        prompts,
        &mut |done, _| progress(done),
    )
    .map_err(|source| Error::Sampling {
        bench: bench.to_string(),
        source: Box::new(source),
    })?;
    let code =
        deltarl_code::grade_rows(&samples, grader, &|_| {}).map_err(|source| Error::Code {
            bench: bench.to_string(),
            source,
        })?;
    let opts = s.extract;
    Ok(samples
        .into_iter()
        .zip(code)
        .map(|(r, verdict)| {
            let (extracted, correct, outcome) = match verdict {
                Some(v) => (v.program, v.outcome == CodeOutcome::Passed, Some(v.outcome)),
                None => {
                    let (e, c) = deltarl_verify::grade(&r.response_text, &r.gold, &opts);
                    (e, c, None)
                }
            };
            EvalRow {
                benchmark: bench.to_string(),
                problem_id: r.prompt_id,
                sample_idx: r.sample_idx,
                correct,
                response_len: r.response_token_ids.len() as u32,
                extracted,
                finish_reason: r.finish_reason,
                data_source: r.data_source,
                outcome,
            }
        })
        .collect())
}

/// The problems whose prompt (rendered with `template`) leaves room for `max_new_tokens`
/// in the policy's context, and how many did not: those are skipped and counted, not
/// silently truncated.
pub fn fitting(
    tokenizer: &Tokenizer,
    context: usize,
    template: &str,
    max_new_tokens: usize,
    prompts: Vec<PromptRow>,
) -> Result<(Vec<PromptRow>, usize)> {
    let total = prompts.len();
    let mut fits = Vec::with_capacity(total);
    for p in prompts {
        let text = deltarl_schemas::render_template(template, &p.problem);
        if tokenizer.encode(&text)?.len() + max_new_tokens <= context {
            fits.push(p);
        }
    }
    let skipped = total - fits.len();
    Ok((fits, skipped))
}

/// Accuracy per `data_source` of graded responses, empty when no response has a source.
pub fn accuracy_by_source<'a>(
    graded: impl Iterator<Item = (Option<&'a str>, bool)>,
) -> BTreeMap<String, SourceAccuracy> {
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (source, correct) in graded {
        if let Some(s) = source {
            let e = by.entry(s).or_default();
            e.0 += usize::from(correct);
            e.1 += 1;
        }
    }
    by.into_iter()
        .map(|(s, (c, n))| {
            let accuracy = c as f64 / n as f64;
            (
                s.to_string(),
                SourceAccuracy {
                    accuracy,
                    responses: n,
                },
            )
        })
        .collect()
}

/// Unbiased pass@k from `n` samples with `c` correct: `1 - C(n - c, k) / C(n, k)`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    // prod_{i = n-c+1}^{n} (1 - k / i), the numerically stable form.
    1.0 - ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product::<f64>()
}

/// Per-problem samples: (correct, extracted answer).
pub type Problem = Vec<(bool, Option<String>)>;

/// Majority vote: the most common extracted answer (grouped by equivalence, ties to the
/// earliest) is graded; no answer counts as wrong.
pub fn majority_correct(samples: &Problem) -> bool {
    let mut groups: Vec<(String, usize, bool)> = Vec::new();
    for (correct, ans) in samples {
        let Some(a) = ans else { continue };
        match groups
            .iter_mut()
            .find(|g| deltarl_verify::equivalent(&g.0, a))
        {
            Some(g) => g.1 += 1,
            None => groups.push((a.clone(), 1, *correct)),
        }
    }
    let mut best: Option<&(String, usize, bool)> = None;
    for g in &groups {
        if best.is_none_or(|b| g.1 > b.1) {
            best = Some(g);
        }
    }
    best.is_some_and(|g| g.2)
}

/// The summary of one benchmark.
#[derive(Clone, Debug)]
pub struct Summary {
    pub benchmark: String,
    pub problems: usize,
    pub k: usize,
    pub avg: Estimate,
    pub pass: Estimate,
    pub maj: Estimate,
    pub mean_len: f64,
    pub truncated: f64,
}

/// Each problem's share of correct samples, by problem id.
pub fn problem_accuracy(rows: &[EvalRow]) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<&str, (usize, usize)> = Default::default();
    for r in rows {
        let e = by.entry(&r.problem_id).or_default();
        e.0 += usize::from(r.correct);
        e.1 += 1;
    }
    by.into_iter()
        .map(|(k, (c, n))| (k.to_string(), c as f64 / n as f64))
        .collect()
}

/// Summarises the rows of one benchmark.
pub fn summarize(bench: &str, rows: &[EvalRow]) -> Summary {
    let mut by: BTreeMap<&str, Problem> = Default::default();
    for r in rows {
        by.entry(r.problem_id.as_str())
            .or_default()
            .push((r.correct, r.extracted.clone()));
    }
    let k = by.values().map(Vec::len).min().unwrap_or(0);
    let avg: Vec<f64> = problem_accuracy(rows).into_values().collect();
    let pass: Vec<f64> = by
        .values()
        .map(|p| pass_at_k(p.len(), p.iter().filter(|s| s.0).count(), k))
        .collect();
    let maj: Vec<f64> = by
        .values()
        .map(|p| f64::from(u8::from(majority_correct(p))))
        .collect();
    let n = rows.len().max(1) as f64;
    Summary {
        benchmark: bench.to_string(),
        problems: by.len(),
        k,
        avg: bootstrap(&avg, 1),
        pass: bootstrap(&pass, 2),
        maj: bootstrap(&maj, 3),
        mean_len: rows.iter().map(|r| f64::from(r.response_len)).sum::<f64>() / n,
        truncated: rows
            .iter()
            .filter(|r| r.finish_reason == FinishReason::Length)
            .count() as f64
            / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn accuracy_by_source_by_hand() {
        let rows = [
            (Some("gsm8k"), true),
            (Some("math"), false),
            (Some("gsm8k"), false),
            (None, true),
            (Some("gsm8k"), true),
        ];
        let m = accuracy_by_source(rows.into_iter());
        assert_eq!(m.len(), 2);
        assert_eq!(m["gsm8k"].responses, 3);
        // f64 arithmetic of a few exact counts: within a few 2^-53 (~1e-16); 1e-12 is slack.
        assert!((m["gsm8k"].accuracy - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(m["math"].accuracy, 0.0);
        assert!(accuracy_by_source([(None, true)].into_iter()).is_empty());
    }

    #[test]
    fn pass_at_k_by_hand() {
        // n = 4, c = 1: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2.
        // pass@k's product of ≤ 5 f64 ratios: ≤ 5·2^-53 ≈ 6e-16 off; 1e-12 is slack.
        assert!((pass_at_k(4, 1, 1) - 0.25).abs() < 1e-12);
        assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
        // n = 5, c = 2, k = 3: 1 - C(3,3)/C(5,3) = 1 - 1/10.
        assert!((pass_at_k(5, 2, 3) - 0.9).abs() < 1e-12);
        assert_eq!(pass_at_k(4, 0, 2), 0.0);
        assert_eq!(pass_at_k(4, 3, 2), 1.0);
    }

    #[test]
    fn majority_groups_equivalent_answers() {
        let p = vec![
            (false, Some("3".to_string())),
            (true, Some("\\frac{1}{2}".to_string())),
            (true, Some("0.5".to_string())),
            (false, None),
        ];
        assert!(majority_correct(&p));
        let q = vec![
            (false, Some("3".to_string())),
            (false, Some("3".to_string())),
            (true, Some("2".to_string())),
        ];
        assert!(!majority_correct(&q));
    }
}
