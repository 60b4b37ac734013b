//! `step_members` cuts an iteration into the optimizer steps the update itself takes: the
//! same responses each step, checked against the tokens every step of `run` recorded.
#![allow(clippy::unwrap_used)]

mod common;

use deltarl_optim::{AdamW, AdamWSettings};
use deltarl_update::{step_members, StepRow, TrainRow};

/// Group `g`'s responses have 2^g tokens, so a step's token count names its groups.
fn response(g: usize) -> Vec<u32> {
    (0..1usize << g).map(|t| 6 + (t % 9) as u32).collect()
}

#[test]
fn step_members_are_the_responses_each_optimizer_step_trained_on() {
    // 1. Rollout order: groups 0-5 of two samples each, a group the score stage dropped
    //    (`x`, between them, so dropping it changes the groups' order if it is counted) and
    //    an empty response in group 2 (nothing to train on).
    let mut ids: Vec<(String, bool, Vec<u32>)> = Vec::new();
    for g in 0..6 {
        if g == 3 {
            ids.push(("x".into(), false, response(2)));
            ids.push(("x".into(), false, response(2)));
        }
        ids.push((format!("p{g}"), true, response(g)));
        ids.push((format!("p{g}"), true, response(g)));
        if g == 2 {
            ids.push((format!("p{g}"), true, Vec::new()));
        }
    }
    let step_rows: Vec<StepRow<'_>> = ids
        .iter()
        .map(|(id, kept, r)| StepRow {
            prompt_id: id,
            kept: *kept,
            response_tokens: r.len(),
        })
        .collect();
    let s = deltarl_update::Settings {
        optimizer_steps: 3,
        ..common::settings()
    };
    let iter = 4;
    let members = step_members(&s, iter, &step_rows);

    // 2. By hand: three steps of two whole groups; every kept, non-empty row in exactly one.
    assert_eq!(members.len(), 3);
    let mut seen: Vec<usize> = members.iter().flatten().copied().collect();
    seen.sort_unstable();
    let want: Vec<usize> = (0..ids.len())
        .filter(|&i| ids[i].1 && !ids[i].2.is_empty())
        .collect();
    assert_eq!(seen, want);
    for step in &members {
        let mut groups: Vec<&str> = step.iter().map(|&i| ids[i].0.as_str()).collect();
        groups.dedup();
        assert_eq!(groups.len(), 2, "{groups:?}");
        for g in groups {
            let whole = (0..ids.len())
                .filter(|&i| ids[i].0 == g && !ids[i].2.is_empty())
                .all(|i| step.contains(&i));
            assert!(whole, "group {g} split across steps");
        }
    }

    // 3. The update's own steps: the rows the shell would keep, through `run`; each step's
    //    recorded tokens are those of `step_members`' step (group sizes are powers of two,
    //    so the sum names the pair of groups).
    let rows: Vec<TrainRow> = ids
        .iter()
        .filter(|r| r.1)
        .map(|(id, _, r)| TrainRow {
            prompt_id: id.clone(),
            prompt_ids: vec![3, 4, 5],
            response_ids: r.clone(),
            old_logprobs: vec![-2.0; r.len()],
            advantage: 0.5,
            coeff: vec![1.0; r.len()],
            shift: Vec::new(),
        })
        .collect();
    let (_dir, policy) = common::tiny_policy();
    let mut opt = AdamW::new(
        &policy.vs,
        AdamWSettings {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    );
    let out =
        deltarl_update::run(&s, iter, &policy, &mut opt, None, &rows, None, &mut |_| {}).unwrap();
    let recorded: Vec<u64> = out.iter().map(|r| r.tokens).collect();
    let ours: Vec<u64> = members
        .iter()
        .map(|m| m.iter().map(|&i| ids[i].2.len() as u64).sum())
        .collect();
    assert_eq!(recorded, ours);
    // Not vacuous: the steps differ in tokens, so the order of the steps is checked too.
    assert!(ours.windows(2).all(|w| w[0] != w[1]), "{ours:?}");
}
