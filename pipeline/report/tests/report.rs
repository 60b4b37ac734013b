//! The report on hand-made run directories: every aggregate checked against numbers worked
//! out by hand, incomplete and stale stages left out, bad input named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use deltarl_report::{iteration_table, to_csv, value, write_report, Metric, COLUMNS};
use deltarl_schemas::{
    layout, write_path, CoeffRow, CoeffsSummary, EvalRow, FeatureRow, FileMeta, FinishReason,
    Manifest, Mismatch, RolloutRow, ScoreRow, Stage, Table, UpdateRow, UpdateSummary,
};

fn put<T: Table>(run: &Path, iter: u32, stage: Stage, rows: &[T], summary: serde_json::Value) {
    let dir = layout::iter_dir(run, iter);
    std::fs::create_dir_all(dir.join("manifest")).unwrap();
    let file = layout::output_path(run, iter, stage);
    write_path(&file, rows, &FileMeta::new(stage.name(), "cfg")).unwrap();
    write_manifest(run, iter, stage, summary);
}

fn write_manifest(run: &Path, iter: u32, stage: Stage, summary: serde_json::Value) {
    Manifest {
        stage,
        iter,
        config_hash: "cfg".into(),
        seed: 0,
        inputs: Default::default(),
        outputs: Default::default(),
        rows: 0,
        seconds: 0.0,
        version: "test".into(),
        summary,
        settings: serde_json::Value::Null,
        compute: None,
    }
    .write(&layout::manifest_path(run, iter, stage))
    .unwrap();
}

fn rollout(sample: u32, finish: FinishReason) -> RolloutRow {
    RolloutRow {
        prompt_id: "p".into(),
        sample_idx: sample,
        prompt: "Q".into(),
        prompt_token_ids: vec![5],
        response_token_ids: vec![6, 7],
        response_text: "ab".into(),
        old_logprobs: vec![-0.1, -0.2],
        finish_reason: finish,
        policy_iter: 0,
        gold: "1".into(),
        data_source: None,
        reward_kind: Default::default(),
    }
}

fn score(sample: u32, correct: bool, len: u32) -> ScoreRow {
    ScoreRow {
        prompt_id: "p".into(),
        sample_idx: sample,
        gold: "1".into(),
        extracted: Some("1".into()),
        correct,
        reward: if correct { 1.0 } else { 0.0 },
        advantage: if correct { 1.0 } else { -1.0 },
        kept: sample != 3,
        response_len: len,
        overlong_penalty: 0.0,
        data_source: None,
        reward_kind: Default::default(),
        outcome: None,
        cases_passed: None,
        cases_total: None,
        detail: None,
    }
}

fn feature(sample: u32, entropy: Vec<f32>) -> FeatureRow {
    FeatureRow {
        prompt_id: "p".into(),
        sample_idx: sample,
        dim: 1,
        precision: deltarl_schemas::Precision::F32,
        features: vec![0.5; entropy.len()],
        token_prob: vec![0.5; entropy.len()],
        logprob: vec![-0.7; entropy.len()],
        entropy,
    }
}

fn update(step: u32, clip_frac: f64, kl: f64) -> UpdateRow {
    UpdateRow {
        step,
        loss: 0.1,
        clip_frac,
        grad_norm: 2.0 * f64::from(step + 1),
        entropy: 1.0,
        tokens: 10,
        lr: 1e-5,
        kl,
        approx_kl_old: 0.0,
    }
}

fn eval(i: u32, correct: bool) -> EvalRow {
    EvalRow {
        benchmark: "heldout".into(),
        problem_id: format!("h{i}"),
        sample_idx: 0,
        correct,
        response_len: 4,
        extracted: None,
        finish_reason: FinishReason::Stop,
        data_source: None,
        outcome: None,
    }
}

/// Run "r": iteration 1 complete; iteration 2 has rollout and score files but score is
/// stale (an upstream rerun) and features has a file without a manifest (killed mid-way).
/// Run "q": one iteration, rollout and score only.
fn make_runs(root: &Path) {
    let r = root.join("r");
    put(
        &r,
        1,
        Stage::Rollout,
        &[
            rollout(0, FinishReason::Stop),
            rollout(1, FinishReason::Length),
            rollout(2, FinishReason::Stop),
            rollout(3, FinishReason::Stop),
        ],
        serde_json::json!({}),
    );
    put(
        &r,
        1,
        Stage::Score,
        &[
            score(0, true, 2),
            score(1, false, 4),
            score(2, true, 6),
            score(3, false, 8),
        ],
        serde_json::json!({}),
    );
    // Token mean (1+2+3)/3 = 2, not the mean of row means (1.5+3)/2 = 2.25.
    put(
        &r,
        1,
        Stage::Features,
        &[feature(0, vec![1.0, 2.0]), feature(1, vec![3.0])],
        serde_json::json!({}),
    );
    // Positive side: 1.0, 1.1, ..., 2.0 -> p10 = 1.1, p90 = 1.9 (linear), spread 0.8.
    // Negative side: 0.5, 0.7 -> p10 = 0.52, p90 = 0.68, spread 0.16.
    let pos: Vec<f32> = (0..=10).map(|k| 1.0 + 0.1 * k as f32).collect();
    put(
        &r,
        1,
        Stage::Coeffs,
        &[
            CoeffRow {
                prompt_id: "p".into(),
                sample_idx: 0,
                coeff: pos[..5].to_vec(),
                advantage: 1.0,
                shift: None,
            },
            CoeffRow {
                prompt_id: "p".into(),
                sample_idx: 2,
                coeff: pos[5..].to_vec(),
                advantage: 0.5,
                shift: None,
            },
            CoeffRow {
                prompt_id: "p".into(),
                sample_idx: 1,
                coeff: vec![0.5, 0.7],
                advantage: -1.0,
                shift: None,
            },
            CoeffRow {
                prompt_id: "p".into(),
                sample_idx: 3,
                coeff: vec![9.0],
                advantage: 0.0,
                shift: None,
            },
        ],
        serde_json::to_value(CoeffsSummary {
            cos_before: 0.99,
            cos_after: 0.98,
            grad_coeff_pos: 1.25,
            grad_coeff_neg: 0.75,
            ..CoeffsSummary::default()
        })
        .unwrap(),
    );
    put(
        &r,
        1,
        Stage::Update,
        &[update(0, 0.1, 0.0), update(1, 0.3, 0.02)],
        serde_json::to_value(UpdateSummary {
            responses: 3,
            skipped_steps: 0,
            loss: None,
            grad_norm: None,
            clip_frac: None,
            entropy: None,
            kl: None,
            approx_kl_old: None,
            mismatch: Mismatch {
                tokens: 8,
                mean_abs: 0.125,
                max_abs: 0.25,
                k3: 0.0625,
                frac_over_0_1: 0.5,
            },
        })
        .unwrap(),
    );
    put(
        &r,
        1,
        Stage::Eval,
        &[eval(0, true), eval(1, true), eval(2, false), eval(3, true)],
        serde_json::json!({}),
    );
    put(
        &r,
        2,
        Stage::Rollout,
        &[
            rollout(0, FinishReason::Length),
            rollout(1, FinishReason::Length),
        ],
        serde_json::json!({}),
    );
    put(
        &r,
        2,
        Stage::Score,
        &[score(0, true, 3)],
        serde_json::json!({}),
    );
    std::fs::write(layout::stale_path(&r, 2, Stage::Score), "{}").unwrap();
    write_path(
        &layout::iter_dir(&r, 2).join("features.parquet"),
        &[feature(0, vec![7.0])],
        &FileMeta::new("features", "cfg"),
    )
    .unwrap();

    let q = root.join("q");
    put(
        &q,
        1,
        Stage::Rollout,
        &[rollout(0, FinishReason::Stop)],
        serde_json::json!({}),
    );
    put(
        &q,
        1,
        Stage::Score,
        &[score(0, false, 10)],
        serde_json::json!({}),
    );
}

/// The fixtures' values are small dyadic numbers whose f64 means polars computes exactly;
/// 1e-6 only absorbs the CSV's and the table's formatting, which print them in full.
fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-6)
}

#[test]
fn aggregates_match_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    make_runs(dir.path());
    let runs = vec!["r".to_string(), "q".to_string()];
    let df = iteration_table(dir.path(), &runs).unwrap();
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, COLUMNS);
    assert_eq!(df.height(), 3, "r/1, r/2, q/1 in the order given");
    let run = |row| {
        df.column("run")
            .unwrap()
            .str()
            .unwrap()
            .get(row)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (run(0), run(1), run(2)),
        ("r".into(), "r".into(), "q".into())
    );
    assert!(close(value(&df, "iter", 1), 2.0));

    // r, iteration 1, where every stage ran: every metric has a source.
    let v = |c: &str| value(&df, c, 0);
    for m in Metric::ALL {
        assert!(v(m.name()).is_some(), "no value for {m:?}");
    }
    assert!(close(v("reward_mean"), 0.5));
    assert!(close(v("accuracy"), 0.5));
    assert!(close(v("response_len"), 5.0));
    assert!(close(v("truncated"), 0.25));
    assert!(close(v("kept"), 0.75));
    assert!(close(v("entropy"), 2.0), "{:?}", v("entropy"));
    assert!(close(v("clip_frac"), 0.2));
    assert!(close(v("kl"), 0.01));
    assert!(close(v("grad_norm"), 3.0));
    assert!(close(v("cos_before"), 0.99));
    assert!(close(v("cos_after"), 0.98));
    assert!(close(v("coeff_grad_pos"), 1.25));
    assert!(close(v("coeff_grad_neg"), 0.75));
    assert!(close(v("mismatch_max_abs"), 0.25));
    assert!(close(v("mismatch_k3"), 0.0625));
    // (sum 1.0..2.0 = 16.5) + 0.5 + 0.7 + 9.0 over 14 tokens.
    assert!(close(v("coeff_mean"), (16.5 + 1.2 + 9.0) / 14.0));
    assert!(
        close(v("coeff_spread_pos"), 0.8),
        "{:?}",
        v("coeff_spread_pos")
    );
    assert!(
        close(v("coeff_spread_neg"), 0.16),
        "{:?}",
        v("coeff_spread_neg")
    );
    assert!(close(v("eval_accuracy"), 0.75));

    // r, iteration 2: rollout counts; the stale score and the manifest-less features don't.
    let v = |c: &str| value(&df, c, 1);
    assert!(close(v("truncated"), 1.0));
    for c in [
        "reward_mean",
        "accuracy",
        "entropy",
        "cos_before",
        "eval_accuracy",
    ] {
        assert_eq!(v(c), None, "{c}");
    }
    // q: only rollout and score.
    let v = |c: &str| value(&df, c, 2);
    assert!(close(v("accuracy"), 0.0) && close(v("response_len"), 10.0));
    assert_eq!(v("eval_accuracy"), None);

    // CSV: header, one line per row, nulls as empty cells.
    let csv = String::from_utf8(to_csv(&mut df.clone()).unwrap()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], COLUMNS.join(","));
    assert_eq!(lines.len(), 4);
    assert!(lines[2].starts_with("r,2,,"), "{}", lines[2]);
}

#[test]
fn report_files_are_written_and_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    make_runs(dir.path());
    let runs = vec!["r".to_string(), "q".to_string()];
    let out = dir.path().join("out");
    write_report(dir.path(), &runs, &out).unwrap();
    let (csv, png) = (
        std::fs::read(out.join("report.csv")).unwrap(),
        std::fs::read(out.join("report.png")).unwrap(),
    );
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
    write_report(dir.path(), &runs, &out).unwrap();
    assert_eq!(std::fs::read(out.join("report.csv")).unwrap(), csv);
    assert_eq!(std::fs::read(out.join("report.png")).unwrap(), png);
    // No temporary files left behind.
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
    assert_eq!(names.len(), 3);
}

/// Accuracy by benchmark and data_source, worked out by hand: training responses from two
/// sources (and one without), held-out answers from two benchmark files.
#[test]
fn the_breakdown_splits_accuracy_by_benchmark_and_source() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    let src = |r: ScoreRow, d: Option<&str>| ScoreRow {
        data_source: d.map(str::to_string),
        ..r
    };
    put(
        &s,
        1,
        Stage::Score,
        &[
            src(score(0, true, 1), Some("gsm8k")),
            src(score(1, false, 1), Some("gsm8k")),
            src(score(2, true, 1), Some("gsm8k")),
            src(score(3, true, 1), Some("math")),
            src(score(4, false, 1), None),
        ],
        serde_json::json!({}),
    );
    let ev = |i: u32, bench: &str, d: &str, correct: bool| EvalRow {
        benchmark: bench.into(),
        data_source: Some(d.into()),
        ..eval(i, correct)
    };
    put(
        &s,
        1,
        Stage::Eval,
        &[
            ev(0, "aime", "aime", false),
            ev(1, "aime", "aime", true),
            ev(2, "mix", "amc", true),
            ev(3, "mix", "olympiad", false),
        ],
        serde_json::json!({}),
    );
    let by = deltarl_report::breakdown_table(dir.path(), &["s".to_string()]).unwrap();
    let rows: Vec<(String, Option<String>, f64, f64)> = (0..by.height())
        .map(|r| {
            let s = |c: &str| {
                by.column(c)
                    .unwrap()
                    .str()
                    .unwrap()
                    .get(r)
                    .map(str::to_string)
            };
            (
                s("benchmark").unwrap(),
                s("data_source"),
                value(&by, "responses", r).unwrap(),
                value(&by, "accuracy", r).unwrap(),
            )
        })
        .collect();
    let row =
        |b: &str, d: Option<&str>, n: f64, acc: f64| (b.to_string(), d.map(str::to_string), n, acc);
    assert_eq!(
        rows,
        vec![
            row("aime", Some("aime"), 2.0, 0.5),
            row("mix", Some("amc"), 1.0, 1.0),
            row("mix", Some("olympiad"), 1.0, 0.0),
            row("train", Some("gsm8k"), 3.0, 2.0 / 3.0),
            row("train", Some("math"), 1.0, 1.0),
            row("train", None, 1.0, 0.0),
        ]
    );
    assert!(deltarl_report::informative(&by));
    let text = deltarl_report::breakdown_text(&by);
    assert!(text.contains("gsm8k") && text.contains("0.6667"), "{text}");
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    make_runs(dir.path());
    let err = |runs: &[&str]| {
        let runs: Vec<String> = runs.iter().map(|s| s.to_string()).collect();
        iteration_table(dir.path(), &runs).unwrap_err().to_string()
    };
    assert!(err(&["nope"]).contains("nope") && err(&["nope"]).contains("does not exist"));
    assert!(err(&["../r"]).contains("plain name"));
    assert!(err(&[]).contains("no runs"));
    assert!(err(&["r", "r"]).contains("run r is given twice"));
    std::fs::create_dir_all(dir.path().join("empty")).unwrap();
    assert!(err(&["empty"]).contains("no iterations"));

    // A file of the wrong stage under a stage's name.
    let r = dir.path().join("r");
    let scores = layout::iter_dir(&r, 1).join("scores.parquet");
    write_path(&scores, &[eval(0, true)], &FileMeta::new("eval", "cfg")).unwrap();
    let e = err(&["r"]);
    assert!(
        e.contains("scores.parquet") && e.contains("\"eval\""),
        "{e}"
    );

    // A file that is not Parquet at all.
    std::fs::write(&scores, b"not parquet").unwrap();
    let e = err(&["r"]);
    assert!(e.contains("scores.parquet"), "{e}");

    // A coefficient summary without a field the report reads (as a renamed field would
    // leave it): the manifest and the field are named, no column goes silently empty.
    let q = dir.path().join("q");
    write_manifest(&q, 1, Stage::Coeffs, serde_json::json!({"cos_after": 0.5}));
    let e = err(&["q"]);
    assert!(e.contains("coeffs.json") && e.contains("cos_before"), "{e}");
}

/// A pruned iteration (`deltarl prune`: its features removed, its manifest kept) reads as
/// missing for the columns that file feeds, and the rest of the row is still read.
#[test]
fn a_pruned_file_reads_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    make_runs(dir.path());
    let features = deltarl_schemas::layout::output_path(&dir.path().join("r"), 1, Stage::Features);
    assert!(features.is_file());
    std::fs::remove_file(&features).unwrap();
    let runs = vec!["r".to_string(), "q".to_string()];
    let df = iteration_table(dir.path(), &runs).unwrap();
    assert_eq!(value(&df, "entropy", 0), None);
    assert!(close(value(&df, "accuracy", 0), 0.5));
    assert!(close(value(&df, "grad_norm", 0), 3.0));
}
