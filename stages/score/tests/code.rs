//! Code responses scored in the sandbox next to math ones (needs bubblewrap: `make sandbox`).

use deltarl_code::{CodeOptions, Grader, PassReward, RowsError, Tests};
use deltarl_schemas::{CodeOutcome, FinishReason, RewardKind, RolloutRow};
use deltarl_score::{run, AdvantageKind, Error, Settings};
use deltarl_verify::Policy;

fn row(pid: &str, k: u32, text: &str, gold: &str, kind: RewardKind) -> RolloutRow {
    RolloutRow {
        prompt_id: pid.into(),
        sample_idx: k,
        prompt: String::new(),
        prompt_token_ids: vec![1],
        response_token_ids: vec![5; 4],
        response_text: text.into(),
        old_logprobs: vec![-1.0; 4],
        finish_reason: FinishReason::Stop,
        policy_iter: 0,
        gold: gold.into(),
        data_source: None,
        reward_kind: kind,
    }
}

fn settings(pass_reward: PassReward) -> Settings {
    Settings {
        advantage: AdvantageKind::Drgrpo,
        overlong: None,
        dynamic_sampling: true,
        extract: Policy::Boxed,
        extract_fallbacks: Vec::new(),
        code: CodeOptions {
            reward: pass_reward,
            ..CodeOptions::default()
        },
    }
}

#[test]
fn code_and_math_in_one_batch() {
    let tests = r#"{"asserts":{"cases":["assert double(2) == 4","assert double(0) == 0"]}}"#;
    let rollouts = vec![
        row(
            "c",
            0,
            "```python\ndef double(x): return 2 * x\n```",
            tests,
            RewardKind::Code,
        ),
        row(
            "c",
            1,
            "```python\ndef double(x): return x + 2\n```",
            tests,
            RewardKind::Code,
        ),
        row("c", 2, "I cannot.", tests, RewardKind::Code),
        row("m", 0, "\\boxed{4}", "4", RewardKind::Math),
        row("m", 1, "\\boxed{5}", "4", RewardKind::Math),
    ];
    let grader = Grader::new(deltarl_code::Settings::default()).expect("make sandbox");
    let out = run(
        &settings(PassReward::All),
        &rollouts,
        Some(&grader),
        "r.parquet",
        &|_| {},
    )
    .unwrap();
    let outcomes: Vec<_> = out.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Some(CodeOutcome::Passed),
            Some(CodeOutcome::WrongAnswer),
            Some(CodeOutcome::NoProgram),
            None,
            None
        ]
    );
    assert_eq!(
        out.iter().map(|r| r.reward).collect::<Vec<_>>(),
        [1.0, 0.0, 0.0, 1.0, 0.0]
    );
    // Dr.GRPO advantages within each group: code mean 1/3, math mean 1/2 (f32 advantages:
    // 2/3 rounds by ≤ 2^-24·2/3 = 4e-8; 1e-6 leaves 25x).
    assert!(
        (out[0].advantage - 2.0 / 3.0).abs() < 1e-6 && (out[1].advantage + 1.0 / 3.0).abs() < 1e-6
    );
    assert_eq!(
        (out[1].cases_passed, out[1].cases_total),
        (Some(1), Some(2))
    );
    assert_eq!(out[1].detail.as_deref(), Some("AssertionError"));
    assert_eq!(
        out[0].extracted.as_deref(),
        Some("def double(x): return 2 * x\n")
    );
    assert_eq!(out[3].reward_kind, RewardKind::Math);
    // The fraction reward: `x + 2` passes double(2) == 4 only.
    let out = run(
        &settings(PassReward::Fraction),
        &rollouts,
        Some(&grader),
        "r.parquet",
        &|_| {},
    )
    .unwrap();
    assert_eq!((out[1].reward, out[1].cases_passed), (0.5, Some(1)));
}

#[test]
fn bad_tests_and_a_missing_sandbox_are_refused_by_name() {
    let rollouts = vec![row("p7", 0, "```python\nx=1\n```", "42", RewardKind::Code)];
    let err = run(
        &settings(PassReward::All),
        &rollouts,
        None,
        "it1/rollouts.parquet",
        &|_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Code { source: RowsError::Tests { prompt_id, .. }, .. } if prompt_id == "p7"),
        "{err}"
    );
    assert!(err.to_string().contains("it1/rollouts.parquet"), "{err}");
    let ok = Tests::Stdio {
        cases: vec![deltarl_code::StdioCase {
            input: String::new(),
            output: "1".into(),
        }],
    };
    let rollouts = vec![row("p8", 0, "print(1)", &ok.to_gold(), RewardKind::Code)];
    let err = run(
        &settings(PassReward::All),
        &rollouts,
        None,
        "r.parquet",
        &|_| {},
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Code {
                source: RowsError::NoSandbox { count: 1 },
                ..
            }
        ),
        "{err}"
    );
}
