//! `tiny-code`: the built-in code task. Each problem is a linear function shown by three of
//! its values; the answer is a one-line Python function, graded by running it against
//! assertions in the sandbox (at the shown points and two more):
//!
//! ```text
//! Q: f(0)=7 f(1)=10 f(2)=13
//! A: def f(x):return 3*x+7
//! ```
//!
//! `b` is read off `f(0)`, `a` is `f(1) - f(0)`. The warm start's examples carry a planted
//! habit: when `f(0) >= 50`, most of them (70 %) write `b` one too high, so the base
//! learns to answer those problems wrongly when greedy and rightly only some of the time
//! when sampling; besides, a `wrong_frac` of all examples has `a` or `b` off by 1 to 3.
//! The base passes about half of the held-out problems, and RL has a signal to unlearn the
//! habit from (the sampled right answers).

use deltarl_schemas::seed::Rng;
use deltarl_schemas::{PromptRow, RewardKind};

use crate::Split;

/// The characters `tiny-code` adds to the compact task's (after them, so ids of the shared
/// characters are unchanged).
pub const CODE_EXTRA: &str = "f()rtun";

/// The share of warm-start examples with `f(0) >= 50` that write `b` one too high.
pub const HIGH_B_WRONG: f64 = 0.7;

/// The points the tests check: the three shown and two the question does not show.
const TEST_POINTS: [u32; 5] = [0, 1, 2, 5, 9];

/// One problem: `f(x) = a*x + b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linear {
    pub a: u32,
    pub b: u32,
}

impl Linear {
    /// The problem with the longest text, for context checks.
    pub const LONGEST: Linear = Linear { a: 9, b: 99 };

    /// Draws a problem: `a` in 2..=9, `b` in 0..=99 (800 problems).
    pub fn draw(rng: &mut Rng) -> Self {
        Linear {
            a: 2 + rng.below(8) as u32,
            b: rng.below(100) as u32,
        }
    }

    pub fn value(&self, x: u32) -> u32 {
        self.a * x + self.b
    }

    pub fn question(&self) -> String {
        format!(
            "f(0)={} f(1)={} f(2)={}",
            self.value(0),
            self.value(1),
            self.value(2)
        )
    }

    /// The one-line answer; `wrong` = (0: `a`, 1: `b`; offset) writes that coefficient off.
    pub fn solution(&self, wrong: Option<(usize, i64)>) -> String {
        let off = |which: usize, v: u32| match wrong {
            Some((w, d)) if w == which => (i64::from(v) + d).max(0),
            _ => i64::from(v),
        };
        format!("def f(x):return {}*x+{}", off(0, self.a), off(1, self.b))
    }

    /// The tests, in the canonical form of the gold column: one assertion per point.
    pub fn tests(&self) -> String {
        let cases: Vec<String> = TEST_POINTS
            .iter()
            .map(|&x| format!("assert f({x})=={}", self.value(x)))
            .collect();
        serde_json::json!({ "asserts": { "cases": cases } }).to_string()
    }

    pub fn id(&self) -> String {
        format!("code-{}-{}", self.a, self.b)
    }
}

/// The split of a problem (as every built-in task splits: by a hash of its id).
pub fn split_of(p: &Linear) -> Split {
    crate::split_of_id(&p.id())
}

/// Up to `n` distinct problems of one split, drawn deterministically from `seed` (the
/// space is small: about 720 train and 80 held-out problems exist).
pub fn problems(split: Split, n: usize, seed: u64) -> Vec<Linear> {
    crate::distinct(split, n, seed, 200_000, Linear::draw, Linear::id)
}

/// Problems as prompt rows (graded as code).
pub fn prompt_rows(problems: &[Linear]) -> Vec<PromptRow> {
    problems
        .iter()
        .map(|p| PromptRow {
            id: p.id(),
            problem: p.question(),
            answer: p.tests(),
            data_source: Some("tiny-code".into()),
            system: None,
            reward_kind: RewardKind::Code,
        })
        .collect()
}

/// A warm-start example: a training problem and its error, if any: `b` one too high with
/// probability [`HIGH_B_WRONG`] when `b >= 50`, else with probability `wrong_frac` one
/// coefficient off by 1 to 3, either sign.
pub fn warmstart_example(rng: &mut Rng, wrong_frac: f64) -> (Linear, Option<(usize, i64)>) {
    let p = loop {
        let p = Linear::draw(rng);
        if split_of(&p) == Split::Train {
            break p;
        }
    };
    if p.b >= 50 && rng.uniform() < HIGH_B_WRONG {
        return (p, Some((1, 1)));
    }
    let wrong = (rng.uniform() < wrong_frac).then(|| {
        let which = rng.below(2) as usize;
        let mag = 1 + rng.below(3) as i64;
        (which, if rng.below(2) == 0 { mag } else { -mag })
    });
    (p, wrong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_by_hand() {
        let p = Linear { a: 3, b: 7 };
        assert_eq!(p.question(), "f(0)=7 f(1)=10 f(2)=13");
        assert_eq!(p.solution(None), "def f(x):return 3*x+7");
        assert_eq!(p.solution(Some((0, -2))), "def f(x):return 1*x+7");
        assert_eq!(p.solution(Some((1, 3))), "def f(x):return 3*x+10");
        assert_eq!(
            p.tests(),
            r#"{"asserts":{"cases":["assert f(0)==7","assert f(1)==10","assert f(2)==13","assert f(5)==22","assert f(9)==34"]}}"#
        );
        let train = problems(Split::Train, 10_000, 1);
        let test = problems(Split::Test, 10_000, 1);
        assert_eq!(train.len() + test.len(), 800);
        assert!(test.len() > 40 && test.len() < 120, "{}", test.len());
        let chars = format!("{}{CODE_EXTRA}", crate::CHARS);
        let longest = Linear::LONGEST.solution(Some((1, 3))) + &Linear::LONGEST.question();
        assert!(longest.chars().all(|c| chars.contains(c)), "{longest}");
    }
}
