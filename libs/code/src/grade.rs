//! Grading programs in the sandbox: one harness run per response, a bounded pool of them in
//! parallel, each case's outcome folded into one [`Verdict`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use deltarl_sandbox::{Exit, Limits, Sandbox};
use deltarl_schemas::CodeOutcome;
use serde::{Deserialize, Serialize};

use crate::spec::Tests;

/// The harness, run with `python -c`.
const HARNESS: &str = include_str!("harness.py");

/// Seconds a run may take past its cases' time: the interpreter's start and the harness.
const STARTUP: Duration = Duration::from_secs(5);

/// How passing cases become a reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PassReward {
    /// 1 when every case passes, else 0 (cases stop at the first failure).
    #[default]
    All,
    /// The fraction of cases passed (every case runs).
    Fraction,
}

/// Validated grading settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    pub reward: PassReward,
    /// Time of one case (one call, one assertion block, one stdin run).
    pub case_timeout: Duration,
    /// Time of a whole response's run, all cases together.
    pub run_timeout: Duration,
    /// Address space of each process of the program.
    pub memory_bytes: u64,
    /// The interpreter (it must be inside the sandbox's read-only folders, e.g. `/usr`).
    pub python: PathBuf,
    /// Programs run at once.
    #[serde(skip)]
    pub workers: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reward: PassReward::All,
            case_timeout: Duration::from_secs(4),
            run_timeout: Duration::from_secs(30),
            memory_bytes: 4 << 30,
            python: PathBuf::from("/usr/bin/python3"),
            workers: 4,
        }
    }
}

/// How one response did.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub outcome: CodeOutcome,
    /// Cases passed (before the first failure, unless every case runs).
    pub passed: u32,
    pub total: u32,
    /// The program that ran (`None`: the response had none).
    pub program: Option<String>,
    /// What went wrong, briefly.
    pub detail: Option<String>,
}

impl Verdict {
    /// The reward: 1 or 0, or the fraction passed.
    pub fn reward(&self, how: PassReward) -> f64 {
        match how {
            PassReward::All => f64::from(u8::from(self.outcome == CodeOutcome::Passed)),
            PassReward::Fraction if self.total == 0 => 0.0,
            PassReward::Fraction => f64::from(self.passed) / f64::from(self.total),
        }
    }
}

/// Why code cannot be graded here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run code rewards: {0}")]
    Sandbox(#[from] deltarl_sandbox::Error),
    #[error("cannot run code rewards: {0}")]
    Settings(String),
    #[error("cannot run code rewards: the test harness does not work in the sandbox with {python}: {detail}")]
    Harness { python: String, detail: String },
}

/// Grades programs: a checked sandbox and the settings.
#[derive(Debug)]
pub struct Grader {
    sandbox: Sandbox,
    settings: Settings,
}

impl Grader {
    /// Checks the sandbox, the interpreter, and that the harness passes a known-good
    /// program inside, before anything is graded.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        let sandbox = Sandbox::detect()?;
        sandbox.check_visible(&settings.python)?;
        let grader = Grader { sandbox, settings };
        let probe = Tests::Asserts {
            cases: vec!["assert x == 1".into()],
            setup: String::new(),
            prompt: None,
            entry_point: None,
        };
        let v = grader.grade("```python\nx = 1\n```", &probe);
        if v.outcome != CodeOutcome::Passed {
            return Err(Error::Harness {
                python: grader.settings.python.display().to_string(),
                detail: v.detail.unwrap_or_else(|| format!("{:?}", v.outcome)),
            });
        }
        Ok(grader)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Grades one response against its tests.
    pub fn grade(&self, response: &str, tests: &Tests) -> Verdict {
        let total = tests.len() as u32;
        let Some(code) = crate::extract::program(response) else {
            return Verdict {
                outcome: CodeOutcome::NoProgram,
                passed: 0,
                total,
                program: None,
                detail: None,
            };
        };
        let program = tests.program(&code);
        let s = &self.settings;
        let nonce =
            deltarl_schemas::sha256_hex(format!("{program}\0{}", tests.to_gold()).as_bytes());
        let nonce = &nonce[..24];
        let job = serde_json::json!({
            "nonce": nonce,
            "program": program,
            "tests": tests,
            "case_timeout": s.case_timeout.as_secs_f64(),
            "run_all": s.reward == PassReward::Fraction,
        });
        let cases_time = s.case_timeout * total.max(1);
        let wall = (cases_time + STARTUP).min(s.run_timeout);
        let limits = Limits {
            wall,
            cpu_seconds: wall.as_secs() + 1,
            memory_bytes: s.memory_bytes,
            ..Limits::default()
        };
        let argv: [&Path; 3] = [&s.python, Path::new("-c"), Path::new(HARNESS)];
        let run = self.sandbox.run(&argv, job.to_string().as_bytes(), &limits);
        let mut v = match run {
            Ok(out) => fold(nonce, total, &out),
            Err(e) => Verdict {
                outcome: CodeOutcome::SandboxFailure,
                passed: 0,
                total,
                program: None,
                detail: Some(e.to_string()),
            },
        };
        v.program = Some(program);
        v
    }

    /// Grades many responses on `settings.workers` threads; `progress` is called once per
    /// response. The verdicts come back in the order of `jobs`.
    pub fn grade_all(
        &self,
        jobs: &[(&str, &Tests)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Vec<Verdict> {
        let next = AtomicUsize::new(0);
        let mut out: Vec<Option<Verdict>> = vec![None; jobs.len()];
        let done: Vec<Vec<(usize, Verdict)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..self.settings.workers.max(1))
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some((response, tests)) = jobs.get(i) else {
                                return mine;
                            };
                            mine.push((i, self.grade(response, tests)));
                            progress(1);
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        });
        for (i, v) in done.into_iter().flatten() {
            out[i] = Some(v);
        }
        out.into_iter()
            .map(|v| {
                v.unwrap_or(Verdict {
                    outcome: CodeOutcome::SandboxFailure,
                    passed: 0,
                    total: 0,
                    program: None,
                    detail: Some("a grading thread panicked".into()),
                })
            })
            .collect()
    }
}

/// One case's report from the harness.
#[derive(Deserialize)]
struct Case {
    i: u32,
    outcome: String,
    detail: Option<String>,
}

/// The harness's reports (lines prefixed with the nonce) and how the run ended, as one
/// verdict: the outcome of the first case that did not pass, in case order.
fn fold(nonce: &str, total: u32, out: &deltarl_sandbox::Output) -> Verdict {
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut ready, mut done, mut passed) = (false, false, 0u32);
    let mut seen = std::collections::BTreeSet::new();
    let mut failed: Option<(CodeOutcome, Option<String>)> = None;
    for line in text.lines() {
        let Some(report) = line.strip_prefix(nonce).and_then(|l| l.strip_prefix(' ')) else {
            continue;
        };
        match report {
            "ready" => ready = true,
            "done" => done = true,
            _ => {
                let Some(case) = report
                    .strip_prefix("case ")
                    .and_then(|c| serde_json::from_str::<Case>(c).ok())
                else {
                    continue;
                };
                if case.i >= total || !seen.insert(case.i) {
                    continue;
                }
                match CodeOutcome::from_name(&case.outcome) {
                    Some(CodeOutcome::Passed) => passed += 1,
                    Some(o) => {
                        failed.get_or_insert((o, case.detail));
                    }
                    None => {}
                }
            }
        }
    }
    let verdict = |outcome, detail| Verdict {
        outcome,
        passed,
        total,
        program: None,
        detail,
    };
    if !ready {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("no output").to_string();
        return verdict(
            CodeOutcome::SandboxFailure,
            Some(format!(
                "the harness did not start ({:?}): {last}",
                out.exit
            )),
        );
    }
    if let Some((outcome, detail)) = failed {
        return verdict(outcome, detail);
    }
    match (done, out.exit) {
        (true, _) if passed == total => verdict(CodeOutcome::Passed, None),
        (true, _) => verdict(
            CodeOutcome::RuntimeError,
            Some(format!("the harness reported {passed} of {total} cases")),
        ),
        // SIGXCPU (24) past the CPU limit, as bubblewrap reports it.
        (false, Exit::WallTimeout | Exit::Code(152)) => verdict(CodeOutcome::TimeLimit, None),
        (false, exit) => verdict(
            CodeOutcome::RuntimeError,
            Some(format!("the program ended the test harness ({exit:?})")),
        ),
    }
}
