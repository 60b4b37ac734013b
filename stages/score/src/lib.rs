//! The score stage: grade every response (math by the verifier, in parallel; code by running
//! it against its tests in the sandbox), rewards with the DAPO overlong penalty, group
//! advantages (GRPO / Dr.GRPO) and the dynamic-sampling flag.

use std::collections::BTreeMap;
use std::io::{Read, Write};

mod settings;
pub use settings::{AdvantageKind, Settings};

use deltarl_code::{Grader, Verdict};
use deltarl_schemas::{read_table, write_table, FileMeta, RewardKind, RolloutRow, ScoreRow};
use deltarl_verify::grade;
use rayon::prelude::*;

/// Errors of the score stage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
    #[error("{file}: {source}")]
    Code {
        file: String,
        source: deltarl_code::RowsError,
    },
    #[error(transparent)]
    Sandbox(#[from] deltarl_code::Error),
    /// A reward or advantage that is not a finite f32: never written. Every input to them
    /// is checked at the configuration, so this names the one key that scales them.
    #[error(
        "{file}: prompt {prompt_id:?} sample {sample_idx}: {what} = {value} is not a finite \
         number (correctness reward {correctness}, overlong penalty {penalty}); nothing was \
         written: check config key `score.overlong_factor`"
    )]
    NonFinite {
        file: String,
        prompt_id: String,
        sample_idx: u32,
        what: &'static str,
        value: f32,
        correctness: f64,
        penalty: f64,
    },
}

/// `min(-(L - (Lmax - Lbuf)) / Lbuf * factor, 0)`.
pub fn overlong_penalty(len: usize, max_len: usize, buffer: usize, factor: f64) -> f64 {
    if buffer == 0 {
        return 0.0;
    }
    let expected = max_len as f64 - buffer as f64;
    (-(len as f64 - expected) / buffer as f64 * factor).min(0.0)
}

/// Group advantages: `(R - mean) / (std + 1e-6)` with the unbiased std, or `R - mean`.
/// A group of one gets mean 0 and std 1 (as the authors' code does); a group whose rewards
/// are all equal gets 0.
pub fn advantages(rewards: &[f64], std_normalize: bool) -> Vec<f64> {
    let n = rewards.len();
    if n == 0 {
        return Vec::new();
    }
    let (mean, std) = if n == 1 {
        (0.0, 1.0)
    } else {
        let mean = rewards.iter().sum::<f64>() / n as f64;
        let var = rewards.iter().map(|r| (r - mean) * (r - mean)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt())
    };
    if n > 1 && rewards.iter().all(|&r| r == rewards[0]) {
        return vec![0.0; n];
    }
    rewards
        .iter()
        .map(|r| {
            if std_normalize {
                (r - mean) / (std + 1e-6)
            } else {
                r - mean
            }
        })
        .collect()
}

/// The grade of one response, whichever the reward.
struct Graded {
    extracted: Option<String>,
    /// The correctness reward (before the overlong penalty).
    reward: f64,
    correct: bool,
    code: Option<Verdict>,
}

/// Pure core: one score row per rollout row, in the same order. Math responses are
/// verified on rayon's threads; code responses run in `grader`'s sandbox (required when
/// there are any). `file` names the rollouts in errors.
pub fn run(
    s: &Settings,
    rollouts: &[RolloutRow],
    grader: Option<&Grader>,
    file: &str,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<ScoreRow>, Error> {
    let code =
        deltarl_code::grade_rows(rollouts, grader, progress).map_err(|source| Error::Code {
            file: file.to_string(),
            source,
        })?;
    // Code rows were graded above (their verdicts); math rows are verified here.
    let (extract, pass_reward) = (s.extract_options(), s.code.reward);
    let graded: Vec<Graded> = rollouts
        .par_iter()
        .zip(code)
        .map(|(r, verdict)| match verdict {
            // The program moves to `extracted`; the rest of the verdict fills the code columns.
            Some(mut v) => Graded {
                extracted: v.program.take(),
                reward: v.reward(pass_reward),
                correct: v.outcome == deltarl_code::CodeOutcome::Passed,
                code: Some(v),
            },
            None => {
                let (extracted, correct) = grade(&r.response_text, &r.gold, &extract);
                progress(1);
                Graded {
                    extracted,
                    reward: if correct { 1.0 } else { 0.0 },
                    correct,
                    code: None,
                }
            }
        })
        .collect();
    let mut rows: Vec<ScoreRow> = rollouts
        .iter()
        .zip(graded)
        .map(|(r, g)| {
            let len = r.response_token_ids.len();
            let penalty = s
                .overlong
                .map_or(0.0, |(max, buf, f)| overlong_penalty(len, max, buf, f));
            ScoreRow {
                prompt_id: r.prompt_id.clone(),
                sample_idx: r.sample_idx,
                gold: r.gold.clone(),
                extracted: g.extracted,
                correct: g.correct,
                reward: (g.reward + penalty) as f32,
                advantage: 0.0,
                kept: true,
                response_len: len as u32,
                overlong_penalty: penalty as f32,
                data_source: r.data_source.clone(),
                reward_kind: r.reward_kind,
                outcome: g.code.as_ref().map(|v| v.outcome),
                cases_passed: g.code.as_ref().map(|v| v.passed),
                cases_total: g.code.as_ref().map(|v| v.total),
                detail: g.code.and_then(|v| v.detail),
            }
        })
        .collect();
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, r) in rollouts.iter().enumerate() {
        groups.entry(r.prompt_id.as_str()).or_default().push(i);
    }
    for idx in groups.values() {
        let rewards: Vec<f64> = idx.iter().map(|&i| f64::from(rows[i].reward)).collect();
        let adv = advantages(&rewards, s.std_normalize());
        let uniform = rewards.iter().all(|&r| r == rewards[0]);
        for (&i, a) in idx.iter().zip(adv) {
            rows[i].advantage = a as f32;
            rows[i].kept = !(s.dynamic_sampling && uniform);
        }
    }
    // No stage records a non-finite value: the next stage would fail on it, naming a
    // prompt rather than the setting.
    for r in &rows {
        for (what, value) in [("reward", r.reward), ("advantage", r.advantage)] {
            if !value.is_finite() {
                let penalty = f64::from(r.overlong_penalty);
                return Err(Error::NonFinite {
                    file: file.to_string(),
                    prompt_id: r.prompt_id.clone(),
                    sample_idx: r.sample_idx,
                    what,
                    value,
                    correctness: f64::from(r.reward) - penalty,
                    penalty,
                });
            }
        }
    }
    Ok(rows)
}

/// Thin Parquet shell around [`run`]; `grader` makes the sandbox, called only when some
/// response is graded as code (a math-only batch never needs one).
pub fn run_io<R: Read, W: Write + Send>(
    s: &Settings,
    rollouts: (R, &str),
    grader: &dyn Fn() -> Result<Grader, deltarl_code::Error>,
    out: W,
    meta: FileMeta,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<ScoreRow>, Error> {
    let (rows, _) = read_table::<RolloutRow, _>(rollouts.0, rollouts.1)?;
    let grader = match rows.iter().any(|r| r.reward_kind == RewardKind::Code) {
        true => Some(grader()?),
        false => None,
    };
    let scores = run(s, &rows, grader.as_ref(), rollouts.1, progress)?;
    let meta = meta.with(
        "settings",
        serde_json::to_string(&s.recorded()).unwrap_or_default(),
    );
    write_table(out, &scores, &meta)?;
    Ok(scores)
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarl_schemas::FinishReason;

    #[test]
    fn advantages_by_hand() {
        // Rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3).
        let a = advantages(&[1.0, 0.0, 0.0, 1.0], true);
        let s = (1.0f64 / 3.0).sqrt();
        // The same f64 formula on two values: a few 2^-53 (~1e-16); 1e-12 is slack.
        assert!((a[0] - 0.5 / (s + 1e-6)).abs() < 1e-12 && (a[1] + 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert_eq!(advantages(&[1.0, 0.0], false), vec![0.5, -0.5]);
        assert_eq!(advantages(&[1.0, 1.0, 1.0], true), vec![0.0; 3]);
        // A group of one: mean 0, std 1.
        assert_eq!(advantages(&[0.7], true), vec![0.7 / (1.0 + 1e-6)]);
        assert!(advantages(&[], true).is_empty());
    }

    #[test]
    fn overlong_penalty_by_hand() {
        // Lmax 20, buffer 4: no penalty up to 16 tokens, -1 at 20.
        assert_eq!(overlong_penalty(16, 20, 4, 1.0), 0.0);
        assert_eq!(overlong_penalty(18, 20, 4, 1.0), -0.5);
        assert_eq!(overlong_penalty(20, 20, 4, 1.0), -1.0);
        assert_eq!(overlong_penalty(3, 20, 4, 1.0), 0.0);
    }

    /// A penalty past f32's range would make the reward -inf and every advantage of its
    /// group NaN: refused, naming the key, with nothing returned to write.
    #[test]
    fn a_non_finite_reward_is_refused_naming_the_factor() {
        let rollouts = vec![row("a", 0, "\\boxed{7}", 20), row("a", 1, "\\boxed{8}", 5)];
        let s = Settings {
            advantage: AdvantageKind::Grpo,
            overlong: Some((20, 4, 1e300)),
            dynamic_sampling: false,
            extract: deltarl_verify::Policy::Boxed,
            extract_fallbacks: Vec::new(),
            code: deltarl_code::CodeOptions::default(),
        };
        let e = run(&s, &rollouts, None, "rollouts.parquet", &|_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rollouts.parquet") && e.contains("\"a\" sample 0: reward = -inf"),
            "{e}"
        );
        assert!(e.contains("score.overlong_factor"), "{e}");
        // At the configuration's greatest factor (100) the same rows score finitely.
        let s = Settings {
            overlong: Some((20, 4, 100.0)),
            ..s
        };
        let rows = run(&s, &rollouts, None, "rollouts.parquet", &|_| {}).unwrap();
        assert!(rows
            .iter()
            .all(|r| r.reward.is_finite() && r.advantage.is_finite()));
    }

    fn row(pid: &str, k: u32, text: &str, len: usize) -> RolloutRow {
        RolloutRow {
            prompt_id: pid.into(),
            sample_idx: k,
            prompt: String::new(),
            prompt_token_ids: vec![1],
            response_token_ids: vec![5; len],
            response_text: text.into(),
            old_logprobs: vec![-1.0; len],
            finish_reason: FinishReason::Stop,
            policy_iter: 0,
            gold: "7".into(),
            data_source: None,
            reward_kind: Default::default(),
        }
    }

    #[test]
    fn scores_groups_and_dynamic_sampling() {
        let rollouts = vec![
            row("a", 0, "\\boxed{7}", 5),
            row("a", 1, "\\boxed{8}", 5),
            row("b", 0, "\\boxed{7}", 5),
            row("b", 1, "\\boxed{7}", 5),
        ];
        let s = Settings {
            advantage: AdvantageKind::Grpo,
            overlong: None,
            dynamic_sampling: true,
            extract: deltarl_verify::Policy::Boxed,
            extract_fallbacks: Vec::new(),
            code: deltarl_code::CodeOptions::default(),
        };
        let mut buf = Vec::new();
        let mut src = Vec::new();
        deltarl_schemas::write_table(&mut src, &rollouts, &FileMeta::new("rollout", "h")).unwrap();
        let out = run_io(
            &s,
            (src.as_slice(), "rollouts.parquet"),
            &|| unreachable!("no code responses"),
            &mut buf,
            FileMeta::new("score", "h"),
            &|_| {},
        )
        .unwrap();
        assert_eq!(
            out.iter().map(|r| r.correct).collect::<Vec<_>>(),
            [true, false, true, true]
        );
        assert!(out[0].advantage > 0.0 && out[1].advantage < 0.0);
        assert_eq!(
            out.iter().map(|r| r.kept).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        assert_eq!(out[2].advantage, 0.0);
        let (back, _) = read_table::<ScoreRow, _>(buf.as_slice(), "scores.parquet").unwrap();
        assert_eq!(back, out);
    }
}
