//! Evaluation: sample answers to benchmark problems and grade them.

use anyhow::Result;
use deltarl_model::generate::{generate, Finish, Request};
use deltarl_model::Policy;
use deltarl_schemas::seed::seed_for;
use deltarl_schemas::{EvalRow, FinishReason, PromptRow};

use crate::run::Ctx;

/// Generates `samples` answers per problem and grades them (strict extraction).
pub fn evaluate(
    ctx: &Ctx,
    policy: &Policy,
    bench: &str,
    prompts: &[PromptRow],
    samples: u32,
    temperature: f64,
    iter: u32,
) -> Result<Vec<EvalRow>> {
    let o = &ctx.cfg.opts;
    let mut reqs = Vec::with_capacity(prompts.len());
    for p in prompts {
        let text = deltarl_rollout::render(&o.data.template, &p.problem);
        reqs.push(Request {
            prompt_ids: policy.tokenizer.encode(&text)?,
            seeds: (0..samples).map(|k| seed_for(o.seed, iter, "eval", &p.id, k)).collect(),
        });
    }
    let mut eos = policy.model.config.eos_ids();
    if let Some(id) = policy.tokenizer.token_id("<eos>") {
        eos.push(id);
    }
    let s = deltarl_model::generate::SampleSettings {
        temperature,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: o.rollout.max_new_tokens,
        eos_ids: eos,
        stop_strings: o.rollout.stop.clone(),
        max_batch_rows: o.rollout.max_batch_rows,
        use_cache: true,
    };
    let out = generate(&policy.model, &policy.tokenizer, &reqs, &s, &mut |_, _| {})?;
    let opts = deltarl_verify::ExtractOptions::default();
    let mut rows = Vec::new();
    for (p, group) in prompts.iter().zip(out) {
        for (k, smp) in group.into_iter().enumerate() {
            let text = policy.tokenizer.decode(&smp.tokens);
            let (extracted, correct) = deltarl_verify::grade(&text, &p.answer, &opts);
            rows.push(EvalRow {
                benchmark: bench.to_string(),
                problem_id: p.id.clone(),
                sample_idx: k as u32,
                correct,
                response_len: smp.tokens.len() as u32,
                extracted,
                finish_reason: match smp.finish {
                    Finish::Stop => FinishReason::Stop,
                    Finish::Length => FinishReason::Length,
                },
            });
        }
    }
    Ok(rows)
}
