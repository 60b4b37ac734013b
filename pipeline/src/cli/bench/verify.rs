//! `deltarl bench verify`: agreement of our verifier with HF math-verify and with the
//! intended verdicts, and verifications per second against math-verify.

use anyhow::{Context, Result};
use deltarl_verify::{verify_with, Policy};

use super::baseline::{self, Asset, Assets};
use super::timing::{median_seconds, Run};

/// One labelled case of a verifier case file.
struct Case {
    pred: String,
    gold: String,
    /// The file's label (`expected` or `intended`).
    label: bool,
    /// The strict policy's label (`boxed`, else the label).
    boxed: bool,
}

fn read_cases(a: &Asset, label: &str) -> Result<Vec<Case>> {
    a.text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let at = || format!("{}:{}", a.name, i + 1);
            let v: serde_json::Value =
                serde_json::from_str(l).with_context(|| format!("{}: not JSON", at()))?;
            let field = |k: &str| {
                v[k].as_str()
                    .map(str::to_string)
                    .with_context(|| format!("{}: no string `{k}`", at()))
            };
            let flag = v[label]
                .as_bool()
                .with_context(|| format!("{}: no boolean `{label}`", at()))?;
            Ok(Case {
                pred: field("pred")?,
                gold: field("gold")?,
                label: flag,
                boxed: v["boxed"].as_bool().unwrap_or(flag),
            })
        })
        .collect()
}

/// "right / all" of `cases` under `policy` against `label`.
fn agreement(cases: &[Case], policy: Policy, label: impl Fn(usize, &Case) -> bool) -> String {
    let n = cases
        .iter()
        .enumerate()
        .filter(|(i, c)| verify_with(&c.pred, &c.gold, policy) == label(*i, c))
        .count();
    format!("{n}/{}", cases.len())
}

pub fn run(run: Run) -> Result<()> {
    // Two case files: `cases.jsonl` labelled by math-verify (`expected`), and the
    // hand-written `written.jsonl` labelled with the intended verdicts.
    let cases = read_cases(&baseline::VERIFY_CASES, "expected")?;
    let mine = read_cases(&baseline::VERIFY_WRITTEN, "intended")?;
    let assets = Assets::write(&[
        &baseline::MATH_VERIFY,
        &baseline::VERIFY_CASES,
        &baseline::VERIFY_WRITTEN,
    ])?;
    let theirs_on_mine: Vec<bool> = serde_json::from_str(&baseline::run_text(&[
        assets.path(&baseline::MATH_VERIFY),
        "verdicts".into(),
        assets.path(&baseline::VERIFY_WRITTEN),
    ])?)
    .context("math-verify's verdicts on written.jsonl")?;
    anyhow::ensure!(
        theirs_on_mine.len() == mine.len(),
        "math-verify gave {} verdicts for the {} cases of written.jsonl",
        theirs_on_mine.len(),
        mine.len()
    );
    let mv = |i: usize| theirs_on_mine[i];
    let mv_intended = mine.iter().enumerate().filter(|(i, c)| mv(*i) == c.label);
    let mv_intended = mv_intended.count();
    // Single-threaded, like the Python baseline; the score stage adds rayon.
    let ours = median_seconds(run.reps, || {
        for c in &cases {
            std::hint::black_box(deltarl_verify::verify(&c.pred, &c.gold));
        }
    });
    let theirs = baseline::run_number(&[
        assets.path(&baseline::MATH_VERIFY),
        assets.path(&baseline::VERIFY_CASES),
        run.reps.to_string(),
    ])?;
    let n = cases.len() as f64;
    let row = |name: &str, a: String, b: String, c: String| {
        println!("  {name:<44} {a:>9} {b:>9} {c:>11}");
    };
    println!("verify: agreement (cases right / cases)");
    row("", "boxed".into(), "lenient".into(), "math-verify".into());
    row(
        "cases.jsonl vs math-verify",
        agreement(&cases, Policy::Boxed, |_, c| c.label),
        agreement(&cases, Policy::Lenient, |_, c| c.label),
        "-".into(),
    );
    row(
        "written.jsonl vs intended labels",
        agreement(&mine, Policy::Boxed, |_, c| c.boxed),
        agreement(&mine, Policy::Lenient, |_, c| c.label),
        format!("{mv_intended}/{}", mine.len()),
    );
    row(
        "written.jsonl vs math-verify",
        agreement(&mine, Policy::Boxed, |i, _| mv(i)),
        agreement(&mine, Policy::Lenient, |i, _| mv(i)),
        "-".into(),
    );
    println!(
        "speed: {} cases, one thread, median of {}",
        cases.len(),
        run.reps
    );
    println!("  deltarl      {:>12.0} verifications/s", n / ours);
    println!("  math-verify  {:>12.0} verifications/s", n / theirs);
    println!("  speed-up {:.1}x", theirs / ours);
    Ok(())
}
