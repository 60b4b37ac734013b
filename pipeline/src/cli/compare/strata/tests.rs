//! The strata command's numbers by hand: comparisons written as files, read back.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::cli::compare::outcome::run_name;
use deltarl_schemas::{EvalRow, FileMeta, FinishReason, Stage};

/// Ten graded answers of which `tenths` are right.
fn write_rows(path: &Path, tenths: u32) {
    let rows: Vec<EvalRow> = (0..10)
        .map(|i| EvalRow {
            benchmark: "heldout".into(),
            problem_id: format!("p{i}"),
            sample_idx: 0,
            correct: i < tenths,
            response_len: 1,
            extracted: None,
            finish_reason: FinishReason::Stop,
            data_source: None,
            outcome: None,
        })
        .collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let meta = FileMeta::new(Stage::Eval.name(), "test");
    deltarl_schemas::atomic_write(path, |w| deltarl_schemas::write_table(w, &rows, &meta)).unwrap();
}

/// A comparison as `compare` leaves it: `runs` is (arm, seed, sampled, greedy) in
/// tenths, the base's (sampled, greedy) too; the final iteration is 2.
fn comparison(runs: &Path, name: &str, base: (u32, u32), arms: &[(&str, u64, u32, u32)]) {
    let folder = runs.join(name);
    write_rows(&folder.join("base-sampled.parquet"), base.0);
    write_rows(&folder.join("base-eval.parquet"), base.1);
    std::fs::create_dir_all(folder.join("configs")).unwrap();
    let mut csv = String::from("variant,seed,iter,eval_accuracy\n");
    for &(arm, seed, sampled, greedy) in arms {
        std::fs::write(folder.join(format!("configs/{arm}-s{seed}.toml")), "").unwrap();
        csv += &format!("{arm},{seed},1,0.0\n{arm},{seed},2,0.0\n");
        let run = run_name(name, arm, seed);
        write_rows(&folder.join(format!("sampled/{run}.parquet")), sampled);
        write_rows(&runs.join(format!("{run}/iter-0002/eval.parquet")), greedy);
    }
    std::fs::write(folder.join("compare.csv"), csv).unwrap();
}

fn args(comparisons: &[&str], control: Option<&str>, method: Option<&str>) -> Args {
    Args {
        comparisons: comparisons.iter().map(|c| c.to_string()).collect(),
        baseline: "dapo".into(),
        margin_share: 0.25,
        primary: ReadoutKind::Sampled,
        control: control.map(String::from),
        method: method.map(String::from),
    }
}

fn cells<'a>(text: &'a str, arm: &str, nth: usize) -> Vec<&'a str> {
    let row = text
        .lines()
        .filter(|l| l.starts_with(&format!("| {arm} |")))
        .nth(nth)
        .unwrap_or_else(|| panic!("{text}"));
    row.split('|').map(str::trim).collect()
}

/// Two bases by hand (sampled accuracies in tenths; greedy all 0.5, so no gain there):
///
/// | base | seed | base | dapo | oracle | delta |
/// | A | 1, 2, 3 | 0.2 | 0.5, 0.6, 0.4 | 0.8, 0.8, 0.7 | 0.6, 0.6, 0.5 |
/// | B | 1, 2    | 0.4 | 0.6, 0.6      | 0.9, 0.8      | 0.7, 0.6      |
///
/// DAPO gains 0.3 on A and 0.2 on B: 0.26 seed-weighted, a margin of 0.065. oracle −
/// dapo: 0.3, 0.2, 0.3 / 0.3, 0.2; mean 0.26; within-base squares 0.02/3 + 0.005 =
/// 0.011667 on 3 df; se sqrt(0.011667 / 3 / 5) = 0.027889; t = 9.323, p = 0.00261 (t(3)'s
/// closed form); interval 0.26 ± 3.182446 se = [0.1712, 0.3488]. delta − dapo: 0.1, 0,
/// 0.1 / 0.1, 0; mean 0.06, the same se; p = 0.1205, TOST p at ±0.065 = 0.4346. Holm:
/// 0.0052 and 0.1205. The rule: the oracle is sensitive, delta realises 0.06 / 0.26 =
/// 23 % of its difference.
#[test]
fn two_bases_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path();
    let g = 5;
    comparison(
        runs,
        "a",
        (2, g),
        &[
            ("dapo", 1, 5, g),
            ("dapo", 2, 6, g),
            ("dapo", 3, 4, g),
            ("oracle", 1, 8, g),
            ("oracle", 2, 8, g),
            ("oracle", 3, 7, g),
            ("delta", 1, 6, g),
            ("delta", 2, 6, g),
            ("delta", 3, 5, g),
        ],
    );
    comparison(
        runs,
        "b",
        (4, g),
        &[
            ("dapo", 1, 6, g),
            ("dapo", 2, 6, g),
            ("oracle", 1, 9, g),
            ("oracle", 2, 8, g),
            ("delta", 1, 7, g),
            ("delta", 2, 6, g),
        ],
    );
    let text = args(&["a", "b"], Some("oracle"), Some("delta"))
        .report(runs)
        .unwrap();
    assert!(
        text.contains("dapo gained +0.2600 over the base (a: 0.2000 → +0.3000; b: 0.4000 → +0.2000), so the margin is 25 % of it: ±0.0650"),
        "{text}"
    );
    // Printed to 4 (means, intervals) or 3 (p) decimals; the hand values above are
    // exact to those digits, the t quantile given to 7.
    let o = cells(&text, "oracle", 0);
    assert_eq!(
        (o[2], o[3], o[4], o[5], o[6]),
        ("5", "+0.2600", "[+0.1712, +0.3488] (3)", "0.003", "0.005"),
        "{text}"
    );
    assert_eq!(o[8], "+0.300, +0.200, +0.300 / +0.300, +0.200");
    let d = cells(&text, "delta", 0);
    assert_eq!(
        (d[3], d[5], d[6], d[7]),
        ("+0.0600", "0.121", "0.121", "0.435"),
        "{text}"
    );
    assert!(
        text.contains("Decision (the rule, on the sampled readout): sensitive: oracle differs from dapo, above it (Holm p 0.005); delta realises 23 % of oracle's difference (+0.0600 of +0.2600)"),
        "{text}"
    );
    // The greedy readout (secondary): no gain, so no margin, and no decision there.
    assert!(text.contains("greedy readout (secondary)"), "{text}");
    assert_eq!(cells(&text, "oracle", 1)[7], "n/a (no gain)");
    assert_eq!(text.matches("Decision").count(), 1, "{text}");
    // The same bases read from the oracle's side: dapo as the control is 0.26 below it,
    // with the same spread (p 0.00261); delta − oracle is −0.2 on every seed (p 0), so
    // Holm multiplies dapo's p by 1: 0.003. The decision says which side.
    let mut from_oracle = args(&["a", "b"], Some("dapo"), None);
    from_oracle.baseline = "oracle".into();
    let text = from_oracle.report(runs).unwrap();
    assert!(
        text.contains("sensitive: dapo differs from oracle, below it (Holm p 0.003)"),
        "{text}"
    );

    // Refusals name what is wrong: a seed one arm lacks, arms that differ, a control
    // that is not an arm, a method without a control, a base or an arm named twice.
    comparison(runs, "c", (2, g), &[("dapo", 1, 5, g), ("delta", 2, 5, g)]);
    let e = args(&["c"], None, None).report(runs).unwrap_err();
    assert!(
        format!("{e:#}").contains("comparison c: delta ran seeds [2], dapo [1]"),
        "{e:#}"
    );
    let e = args(&["a", "c"], None, None).report(runs).unwrap_err();
    assert!(
        format!("{e:#}").contains("comparison c has arms [\"dapo\", \"delta\"]"),
        "{e:#}"
    );
    let e = args(&["a"], Some("ktae"), None).report(runs).unwrap_err();
    assert!(format!("{e:#}").contains("\"ktae\" is not an arm"), "{e:#}");
    let e = args(&["a"], None, Some("delta")).report(runs).unwrap_err();
    assert!(format!("{e:#}").contains("name the control"), "{e:#}");
    // A comparison that was never made is named as such, not as a missing file in it.
    let e = args(&["a", "nope"], None, None).report(runs).unwrap_err();
    assert!(
        format!("{e:#}").contains("--comparison nope: no comparison folder"),
        "{e:#}"
    );
    // A base named twice, an arm in two roles.
    let e = args(&["a", "b", "a"], None, None).report(runs).unwrap_err();
    assert!(
        format!("{e:#}").contains("--comparison a is given twice"),
        "{e:#}"
    );
    let e = args(&["a"], Some("dapo"), None).report(runs).unwrap_err();
    assert!(
        format!("{e:#}").contains("--control \"dapo\" is also --baseline"),
        "{e:#}"
    );
    let e = args(&["a"], Some("oracle"), Some("oracle"))
        .report(runs)
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("--method \"oracle\" is also --control"),
        "{e:#}"
    );
    std::fs::remove_file(runs.join("b/base-sampled.parquet")).unwrap();
    let e = args(&["a", "b"], None, None).report(runs).unwrap_err();
    assert!(format!("{e:#}").contains("base-sampled.parquet"), "{e:#}");
}
