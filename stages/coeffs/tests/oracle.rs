//! The oracle estimator (`oracle-tokens`) on a batch small enough to check by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_coeffs::{estimate, Estimator, Response, Settings};
use deltarl_data::Task;

fn resp<'a>(idx: u32, adv: f32, kept: bool, f: &'a [f32], shared: &'a [bool]) -> Response<'a> {
    Response {
        prompt_id: "p",
        sample_idx: idx,
        advantage: adv,
        reward: 0.0,
        token_ids: &[],
        kept,
        features: f,
        entropy: &[0.5; 3][..f.len() / 2],
        token_prob: &[],
        shared,
    }
}

const F: [f32; 6] = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];

fn oracle(value: f64) -> Settings {
    Settings::new(Estimator::OracleTokens {
        task: Task::Varied,
        value,
    })
    .unwrap()
}

#[test]
fn labelled_tokens_get_the_value_the_others_one() {
    let labels = [true, false, true];
    let batch = [
        resp(0, 1.0, true, &F, &labels),
        resp(1, -1.0, true, &F, &[false, false, true]),
        // Not kept (dynamic sampling): 0 everywhere, whatever its labels.
        resp(2, 0.0, false, &F, &labels),
    ];
    let out = estimate(&oracle(0.0), 2, &batch).unwrap();
    assert_eq!(
        out.coeffs,
        vec![vec![0.0, 1.0, 0.0], vec![1.0, 1.0, 0.0], vec![0.0; 3]]
    );
    let out = estimate(&oracle(0.25), 2, &batch).unwrap();
    assert_eq!(out.coeffs[0], vec![0.25, 1.0, 0.25]);
    // Value 1 is DAPO's coefficients exactly.
    let dapo = estimate(&Settings::new(Estimator::Uniform).unwrap(), 2, &batch).unwrap();
    assert_eq!(
        estimate(&oracle(1.0), 2, &batch).unwrap().coeffs,
        dapo.coeffs
    );
}

#[test]
fn missing_labels_and_unlabelled_tasks_are_refused_by_name() {
    let batch = [resp(4, 1.0, true, &F, &[true])];
    let e = estimate(&oracle(0.0), 2, &batch).unwrap_err().to_string();
    assert!(
        e.contains("sample_idx 4") && e.contains("1 token labels for 3 tokens"),
        "{e}"
    );
    for task in [Task::Arith, Task::Code] {
        let e = Settings::new(Estimator::OracleTokens { task, value: 0.0 }).unwrap_err();
        assert!(e.to_string().contains(task.source()), "{e}");
    }
    for value in [-0.5, f64::NAN] {
        let e = Settings::new(Estimator::OracleTokens {
            task: Task::Steps,
            value,
        });
        assert!(e.is_err(), "value {value}");
    }
}

fn first_error(value: f64) -> Settings {
    Settings::new(Estimator::OraclePrefix {
        task: Task::Steps,
        value,
    })
    .unwrap()
}

#[test]
fn the_first_error_oracle_reweights_only_wrong_answers_correct_prefixes() {
    // Labels = before the first error. A right answer (A > 0) is labelled throughout but
    // keeps 1 everywhere: only a negative advantage pushes shared right text down.
    let batch = [
        resp(0, 1.0, true, &F, &[true, true, true]),
        resp(1, -1.0, true, &F, &[true, true, false]),
        resp(2, -0.5, true, &F, &[true, false, false]),
        // A zero advantage (an all-right or all-wrong group): nothing to undo.
        resp(3, 0.0, true, &F, &[true, true, true]),
        resp(4, -1.0, false, &F, &[true, true, true]),
    ];
    let out = estimate(&first_error(0.0), 2, &batch).unwrap();
    assert_eq!(
        out.coeffs,
        vec![
            vec![1.0; 3],
            vec![0.0, 0.0, 1.0],
            vec![0.0, 1.0, 1.0],
            vec![1.0; 3],
            vec![0.0; 3],
        ]
    );
    assert_eq!(
        estimate(&first_error(0.5), 2, &batch).unwrap().coeffs[1],
        vec![0.5, 0.5, 1.0]
    );
    // Value 1 is DAPO bit for bit.
    let dapo = estimate(&Settings::new(Estimator::Uniform).unwrap(), 2, &batch).unwrap();
    assert_eq!(
        estimate(&first_error(1.0), 2, &batch).unwrap().coeffs,
        dapo.coeffs
    );
    // The code task has no arithmetic first error; tiny-arith has.
    let e = Settings::new(Estimator::OraclePrefix {
        task: Task::Code,
        value: 0.0,
    })
    .unwrap_err();
    assert!(e.to_string().contains("tiny-code"), "{e}");
    assert!(Settings::new(Estimator::OraclePrefix {
        task: Task::Arith,
        value: 0.0
    })
    .is_ok());
    let e = estimate(&first_error(0.0), 2, &[resp(5, -1.0, true, &F, &[])]).unwrap_err();
    assert!(e.to_string().contains("0 token labels for 3 tokens"), "{e}");
}

/// The filler oracle (`oracle-filler`) reweights every response's labelled tokens as
/// `oracle-tokens` does (its labels are the filler, `Task::filler_tokens`), is
/// DAPO at value 1, and is refused on tasks without filler, by name.
#[test]
fn the_filler_oracle_reweights_labelled_tokens_of_every_response() {
    let filler = |value| {
        Settings::new(Estimator::OracleFiller {
            task: Task::Filler,
            value,
        })
        .unwrap()
    };
    let batch = [
        resp(0, 1.0, true, &F, &[true, false, true]),
        resp(1, -1.0, true, &F, &[false, true, true]),
        resp(2, 0.0, false, &F, &[true, true, true]),
    ];
    let out = estimate(&filler(0.0), 2, &batch).unwrap();
    assert_eq!(
        out.coeffs,
        vec![vec![0.0, 1.0, 0.0], vec![1.0, 0.0, 0.0], vec![0.0; 3]]
    );
    let dapo = estimate(&Settings::new(Estimator::Uniform).unwrap(), 2, &batch).unwrap();
    assert_eq!(
        estimate(&filler(1.0), 2, &batch).unwrap().coeffs,
        dapo.coeffs
    );
    // tiny-steps is the dose 0: accepted, and its labels (none, even after the box) make
    // the oracle at value 0 DAPO's coefficients bit for bit.
    let dose0 = Settings::new(Estimator::OracleFiller {
        task: Task::Steps,
        value: 0.0,
    })
    .unwrap();
    let none = Task::Steps
        .filler_tokens(&["so ", "\\boxed{4}", " ab"])
        .unwrap();
    let batch = [
        resp(0, 1.0, true, &F, &none),
        resp(1, -1.0, true, &F, &none),
        resp(2, 0.0, false, &F, &none),
    ];
    let uniform = Settings::new(Estimator::Uniform).unwrap();
    assert_eq!(
        estimate(&dose0, 2, &batch).unwrap().coeffs,
        estimate(&uniform, 2, &batch).unwrap().coeffs
    );
    for task in [Task::Arith, Task::Varied, Task::Code] {
        let e = Settings::new(Estimator::OracleFiller { task, value: 0.0 }).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("oracle-filler") && e.contains(task.source()),
            "{e}"
        );
    }
}
