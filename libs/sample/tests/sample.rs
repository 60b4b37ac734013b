//! Rollouts: every sample is seeded by (run seed, iteration, prompt id, sample index), so
//! it does not depend on which other prompts share its batch; rows follow the contract.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_model::generate::SampleSettings;
use deltarl_model::random_policy;
use deltarl_sample::{run, Plan};
use deltarl_schemas::{FinishReason, PromptRow};

fn policy() -> (tempfile::TempDir, deltarl_model::Policy) {
    let dir = tempfile::tempdir().unwrap();
    let p = random_policy(
        dir.path(),
        &deltarl_data::tokenizer_json(),
        deltarl_data::vocab_size(),
        true,
        5,
        2.0,
    )
    .unwrap();
    (dir, p)
}

fn settings(max_batch_rows: usize, max_new_tokens: usize) -> Plan {
    Plan {
        samples_per_prompt: 4,
        template: "Q: {question}\nA: ".into(),
        sampling: SampleSettings {
            temperature: 1.0,
            top_p: 0.95,
            top_k: 20,
            max_new_tokens,
            eos_ids: vec![deltarl_data::EOS_ID],
            stop_strings: vec![],
            max_batch_rows,
            max_cache_tokens: None,
            session_rows: None,
        },
        run_seed: 3,
        iter: 2,
        policy_iter: 1,
        seed_stage: deltarl_schemas::Stage::Rollout,
        max_prompt_tokens: None,
        shard: deltarl_schemas::Shard::WHOLE,
    }
}

fn prompts() -> Vec<PromptRow> {
    deltarl_data::prompt_rows(
        deltarl_data::Task::Arith,
        &deltarl_data::problems(deltarl_data::Split::Train, 6, 1),
    )
}

#[test]
fn samples_do_not_depend_on_batch_composition() {
    let (_d, p) = policy();
    let all = prompts();
    let together = run(&settings(64, 12), &p, &all, &mut |_, _| {}).unwrap();
    let alone = run(&settings(4, 12), &p, &all[2..3], &mut |_, _| {}).unwrap();
    let from_batch: Vec<_> = together
        .iter()
        .filter(|r| r.prompt_id == all[2].id)
        .cloned()
        .collect();
    assert_eq!(from_batch.len(), 4);
    assert_eq!(alone.len(), from_batch.len());
    for (a, b) in from_batch.iter().zip(&alone) {
        assert_eq!(a.response_token_ids, b.response_token_ids);
        assert!(!a.response_token_ids.is_empty());
        assert_eq!(a.old_logprobs.len(), b.old_logprobs.len());
        // A batch of 64 rows and one of 4 sum in other orders: the f32 round-off bound of a
        // log-prob of this policy (`deltarl_model::roundoff`).
        let tol = p
            .model
            .f32_logprob_tolerance(p.model.config.max_position_embeddings);
        for (x, y) in a.old_logprobs.iter().zip(&b.old_logprobs) {
            assert!(
                f64::from((x - y).abs()) <= tol,
                "{x} vs {y} (tolerance {tol:e})"
            );
        }
    }
    // Different samples of one prompt differ (each has its own seed).
    assert!(from_batch
        .windows(2)
        .any(|w| w[0].response_token_ids != w[1].response_token_ids));
}

#[test]
fn rows_follow_the_contract() {
    let (_d, p) = policy();
    let all = prompts();
    let rows = run(&settings(8, 10), &p, &all, &mut |_, _| {}).unwrap();
    assert_eq!(rows.len(), all.len() * 4);
    for r in &rows {
        assert_eq!(r.old_logprobs.len(), r.response_token_ids.len());
        assert!(r.old_logprobs.iter().all(|&l| l <= 0.0 && l.is_finite()));
        assert_eq!(r.policy_iter, 1);
        assert!(r.prompt.starts_with("Q: ") && r.prompt.ends_with("A: "));
        match r.finish_reason {
            FinishReason::Stop => {
                assert_eq!(r.response_token_ids.last(), Some(&deltarl_data::EOS_ID))
            }
            FinishReason::Length => assert_eq!(r.response_token_ids.len(), 10),
        }
    }
    // A prompt longer than the context is an error naming the prompt.
    let mut long = all[..1].to_vec();
    long[0].problem = "1".repeat(100);
    let err = run(&settings(8, 10), &p, &long, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&long[0].id) && err.contains("context"),
        "{err}"
    );
}

#[test]
fn a_model_with_nan_weights_is_refused_naming_the_prompt() {
    let (_d, p) = policy();
    tch::no_grad(|| {
        let mut vars = p.vs.variables();
        let mut names: Vec<String> = vars.keys().cloned().collect();
        names.sort();
        let w = vars.get_mut(&names[0]).unwrap();
        let _ = w.fill_(f64::NAN);
    });
    assert!(p.first_non_finite().is_some());
    let all = prompts();
    let err = run(&settings(8, 10), &p, &all[..1], &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&all[0].id) && err.contains("not finite"),
        "{err}"
    );
}

#[test]
fn long_prompts_keep_their_last_tokens() {
    let (_d, p) = policy();
    let all = prompts();
    let full = run(&settings(8, 4), &p, &all[..1], &mut |_, _| {}).unwrap();
    let mut s = settings(8, 4);
    s.max_prompt_tokens = Some(5);
    let cut = run(&s, &p, &all[..1], &mut |_, _| {}).unwrap();
    let ids = &full[0].prompt_token_ids;
    assert!(ids.len() > 5);
    assert_eq!(cut[0].prompt_token_ids, ids[ids.len() - 5..].to_vec());
}
