//! The built-in tasks: their problems, splits and prompts, the warm start's worked examples,
//! and the built-in datasets `data.source` can name ([`Builtin`]).

use deltarl_schemas::seed::Rng;
use deltarl_schemas::PromptRow;

use crate::row::math_row;
use crate::{code, words};
use crate::{
    distinct, split_of_id, Split, CHARS, FILLER_LETTERS, FILLER_WORD_LEN, STEPS_EXTRA,
    VARIED_PHRASES,
};

/// A built-in task: the problems of this crate in one solution format, with the
/// character vocabulary that format needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// `7*13=91 45+91=136 \boxed{136}`.
    #[default]
    Arith,
    /// `first 7*13=91. then 45+91=136. so the answer is \boxed{136}`.
    Steps,
    /// `tiny-steps` with each connective in one of three phrasings ([`VARIED_PHRASES`]).
    Varied,
    /// `tiny-steps` with 32 filler words of random letters ([`FILLER_LETTERS`]) after its
    /// answer ([`Task::filler_words`]).
    Filler,
    /// `tiny-steps-filler` at the higher dose: 80 filler words.
    Filler80,
    /// `def f(x):return 3*x+7` from `f(0)=7 f(1)=10 f(2)=13`, graded by running it
    /// ([`code`]).
    Code,
}

impl Task {
    pub const ALL: [Task; 6] = [
        Task::Arith,
        Task::Steps,
        Task::Varied,
        Task::Filler,
        Task::Filler80,
        Task::Code,
    ];

    /// The `data.source` that names the task.
    pub fn source(self) -> &'static str {
        match self {
            Task::Arith => "tiny-arith",
            Task::Steps => "tiny-steps",
            Task::Varied => "tiny-steps-varied",
            Task::Filler => "tiny-steps-filler",
            Task::Filler80 => "tiny-steps-filler-80",
            Task::Code => "tiny-code",
        }
    }

    /// How many filler words of [`FILLER_WORD_LEN`] random letters a solution has after its
    /// answer: the dose F of the dose-response test (`tiny-steps` is its dose 0). At 32,
    /// filler is over 70 % of every solution's tokens; at 80, over 85 %, and enough that
    /// filler is most of the net update on wrong answers too (docs/results.md §15c). The
    /// tests `filler_is_most_of_every_solution` check both bounds on the longest and
    /// shortest problems.
    pub fn filler_words(self) -> usize {
        match self {
            Task::Filler => 32,
            Task::Filler80 => 80,
            Task::Arith | Task::Steps | Task::Varied | Task::Code => 0,
        }
    }

    /// The task a `data.source` names, if it names one.
    pub fn from_source(source: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|t| t.source() == source)
    }

    /// The characters of the task's vocabulary, in id order after the special tokens.
    pub fn chars(self) -> String {
        match self {
            Task::Arith => CHARS.to_string(),
            Task::Steps | Task::Varied | Task::Filler | Task::Filler80 => {
                format!("{CHARS}{STEPS_EXTRA}")
            }
            Task::Code => format!("{CHARS}{}", code::CODE_EXTRA),
        }
    }

    /// Number of tokens of the task's vocabulary (specials included).
    pub fn vocab_size(self) -> usize {
        3 + self.chars().chars().count()
    }

    /// The worked solution of arithmetic problem `p` in this format; `wrong` as in
    /// [`Problem::solution`]. `tiny-steps-varied` and `tiny-steps-filler` use their first
    /// (longest) wordings. `None` for `tiny-code`, whose problems are not these.
    pub fn solution(self, p: &Problem, wrong: Option<(usize, i64)>) -> Option<String> {
        self.phrased(p, wrong, &[])
    }

    /// [`Task::solution`] with the wordings `pick` chooses, one index a choice (missing
    /// ones 0): `tiny-steps-varied`'s three connectives (into [`VARIED_PHRASES`]),
    /// `tiny-steps-filler`'s [`Task::filler_words`] x [`FILLER_WORD_LEN`] filler letters (into
    /// [`FILLER_LETTERS`]); ignored by the other tasks.
    pub fn phrased(
        self,
        p: &Problem,
        wrong: Option<(usize, i64)>,
        pick: &[usize],
    ) -> Option<String> {
        let (prod, sum) = p.steps(wrong);
        let choice = |i: usize, n: usize| pick.get(i).copied().unwrap_or(0) % n;
        Some(match self {
            Task::Code => return None,
            Task::Arith => format!(
                "{}*{}={prod} {}+{prod}={sum} \\boxed{{{sum}}}",
                p.b, p.c, p.a
            ),
            Task::Steps => format!(
                "first {}*{}={prod}. then {}+{prod}={sum}. so the answer is \\boxed{{{sum}}}",
                p.b, p.c, p.a
            ),
            Task::Varied => {
                let [first, then, so] =
                    [0, 1, 2].map(|i| VARIED_PHRASES[i][choice(i, VARIED_PHRASES[i].len())]);
                format!(
                    "{first} {}*{}={prod}. {then} {}+{prod}={sum}. {so} \\boxed{{{sum}}}",
                    p.b, p.c, p.a
                )
            }
            Task::Filler | Task::Filler80 => {
                // tiny-steps' solution, then the filler after its answer.
                let letters: Vec<char> = FILLER_LETTERS.chars().collect();
                let words: Vec<String> = (0..self.filler_words())
                    .map(|w| {
                        (0..FILLER_WORD_LEN)
                            .map(|l| letters[choice(w * FILLER_WORD_LEN + l, letters.len())])
                            .collect()
                    })
                    .collect();
                format!(
                    "{} {}",
                    Task::Steps.phrased(p, wrong, &[])?,
                    words.join(" ")
                )
            }
        })
    }

    /// The question and answer with the most tokens (largest numbers, an error that adds a
    /// digit), for context checks.
    pub fn longest_example(self) -> (String, String) {
        match self {
            Task::Code => {
                let p = code::Linear::LONGEST;
                (p.question(), p.solution(Some((1, 3))))
            }
            Task::Arith | Task::Steps | Task::Varied | Task::Filler | Task::Filler80 => {
                let p = Problem::LONGEST;
                let text = self.solution(&p, Some((0, 3))).unwrap_or_default();
                (p.question(), text)
            }
        }
    }
}

/// One synthetic problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub a: u32,
    pub b: u32,
    pub c: u32,
}

impl Problem {
    /// The problem with the longest text (every number at its largest), for context checks.
    pub const LONGEST: Problem = Problem {
        a: 99,
        b: 19,
        c: 19,
    };

    /// Draws a problem from a seeded generator.
    pub fn draw(rng: &mut Rng) -> Self {
        Problem {
            a: rng.below(100) as u32,
            b: 2 + rng.below(18) as u32,
            c: 2 + rng.below(18) as u32,
        }
    }

    pub fn question(&self) -> String {
        format!("{}+{}*{}=?", self.a, self.b, self.c)
    }

    pub fn answer(&self) -> u32 {
        self.a + self.b * self.c
    }

    /// The worked solution in the compact format; `wrong` puts an error of `delta` in the
    /// given step (0 = product, 1 = sum), carried through to the boxed answer.
    pub fn solution(&self, wrong: Option<(usize, i64)>) -> String {
        Task::Arith.solution(self, wrong).unwrap_or_default()
    }

    /// The product and the sum as a solution writes them, with `wrong`'s error carried.
    fn steps(&self, wrong: Option<(usize, i64)>) -> (i64, i64) {
        let off = |step: usize| match wrong {
            Some((s, d)) if s == step => d,
            _ => 0,
        };
        let p = (i64::from(self.b * self.c) + off(0)).max(0);
        let s = (i64::from(self.a) + p + off(1)).max(0);
        (p, s)
    }

    /// The stable id of this problem.
    pub fn id(&self) -> String {
        format!("arith-{}-{}-{}", self.a, self.b, self.c)
    }

    /// The problem an id names ([`Problem::id`]); `None` for anything else.
    pub fn from_id(id: &str) -> Option<Problem> {
        let mut parts = id.strip_prefix("arith-")?.split('-').map(str::parse::<u32>);
        let p = Problem {
            a: parts.next()?.ok()?,
            b: parts.next()?.ok()?,
            c: parts.next()?.ok()?,
        };
        parts.next().is_none().then_some(p)
    }
}

/// The split of an arithmetic problem.
pub fn split_of(p: &Problem) -> Split {
    split_of_id(&p.id())
}

/// `n` distinct problems of one split, drawn deterministically from `seed` (the problem
/// space has 100 * 18 * 18 = 32,400 items: ample for any n used here).
pub fn problems(split: Split, n: usize, seed: u64) -> Vec<Problem> {
    distinct(split, n, seed, 1_000_000, Problem::draw, Problem::id)
}

/// Problems as prompt rows of `task` (the input table of rollout and eval).
pub fn prompt_rows(task: Task, problems: &[Problem]) -> Vec<PromptRow> {
    problems
        .iter()
        .map(|p| math_row(p.id(), p.question(), p.answer(), task.source()))
        .collect()
}

/// Fixed seed of the generated training problems, so every run sees the same problems.
const TRAIN_SEED: u64 = 20_260_101;
/// Fixed seed of the held-out problems.
const TEST_SEED: u64 = 7;

impl Task {
    /// The task's first `n` training prompts (the same problems for every arithmetic task;
    /// `tiny-code` has about 720).
    pub fn train_prompts(self, n: usize) -> Vec<PromptRow> {
        match self {
            Task::Code => code::prompt_rows(&code::problems(Split::Train, n, TRAIN_SEED)),
            _ => prompt_rows(self, &problems(Split::Train, n, TRAIN_SEED)),
        }
    }

    /// The task's first `n` held-out prompts (the same problems for every arithmetic task;
    /// `tiny-code` has about 80).
    pub fn test_prompts(self, n: usize) -> Vec<PromptRow> {
        match self {
            Task::Code => code::prompt_rows(&code::problems(Split::Test, n, TEST_SEED)),
            _ => prompt_rows(self, &problems(Split::Test, n, TEST_SEED)),
        }
    }

    /// The name of the task's held-out benchmark (`tiny-arith-test`).
    pub fn heldout_name(self) -> String {
        Builtin::Tiny(self).heldout_name()
    }
}

/// A built-in dataset `data.source` can name: one of the tiny model's tasks, or the word
/// problems for a pretrained model ([`words`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Tiny(Task),
    Words,
}

impl Builtin {
    /// The `data.source` names of every built-in dataset.
    pub fn sources() -> Vec<&'static str> {
        Task::ALL
            .iter()
            .map(|t| t.source())
            .chain([words::SOURCE])
            .collect()
    }

    /// The built-in dataset a `data.source` names, if it names one.
    pub fn from_source(source: &str) -> Option<Builtin> {
        match Task::from_source(source) {
            Some(t) => Some(Builtin::Tiny(t)),
            None => (source == words::SOURCE).then_some(Builtin::Words),
        }
    }

    /// The `data.source` that names it.
    pub fn source(self) -> &'static str {
        match self {
            Builtin::Tiny(t) => t.source(),
            Builtin::Words => words::SOURCE,
        }
    }

    /// The tiny model's task, when it is one (what a warm start can train on).
    pub fn tiny(self) -> Option<Task> {
        match self {
            Builtin::Tiny(t) => Some(t),
            Builtin::Words => None,
        }
    }

    /// The first `n` training prompts.
    pub fn train_prompts(self, n: usize) -> Vec<PromptRow> {
        match self {
            Builtin::Tiny(t) => t.train_prompts(n),
            Builtin::Words => words::prompt_rows(&words::problems(Split::Train, n, TRAIN_SEED)),
        }
    }

    /// The first `n` held-out prompts.
    pub fn test_prompts(self, n: usize) -> Vec<PromptRow> {
        match self {
            Builtin::Tiny(t) => t.test_prompts(n),
            Builtin::Words => words::prompt_rows(&words::problems(Split::Test, n, TEST_SEED)),
        }
    }

    /// The name of the held-out benchmark (`tiny-arith-test`, `word-problems-test`).
    pub fn heldout_name(self) -> String {
        format!("{}-test", self.source())
    }
}

/// A warm-start example of `task`: prompt text and target text (solution, EOS added by the
/// caller). With probability `wrong_frac` one step is off by 1..=3 (either sign).
pub fn warmstart_example(
    task: Task,
    rng: &mut Rng,
    template: &str,
    wrong_frac: f64,
) -> (String, String) {
    if task == Task::Code {
        let (p, wrong) = code::warmstart_example(rng, wrong_frac);
        let prompt = deltarl_schemas::render_template(template, &p.question());
        return (prompt, p.solution(wrong));
    }
    let p = loop {
        let p = Problem::draw(rng);
        if split_of(&p) == Split::Train {
            break p;
        }
    };
    let wrong = (rng.uniform() < wrong_frac).then(|| {
        let step = rng.below(2) as usize;
        let mag = 1 + rng.below(3) as i64;
        (step, if rng.below(2) == 0 { mag } else { -mag })
    });
    // Only the varied and filler tasks draw wordings: the other tasks' examples stay as
    // they were (the same draws from `rng`).
    let pick: Vec<usize> = match task {
        Task::Varied => (0..3)
            .map(|i| rng.below(VARIED_PHRASES[i].len() as u64) as usize)
            .collect(),
        Task::Filler | Task::Filler80 => (0..task.filler_words() * FILLER_WORD_LEN)
            .map(|_| rng.below(FILLER_LETTERS.len() as u64) as usize)
            .collect(),
        Task::Arith | Task::Steps | Task::Code => Vec::new(),
    };
    (
        deltarl_schemas::render_template(template, &p.question()),
        task.phrased(&p, wrong, &pick).unwrap_or_default(),
    )
}

/// Number of tokens of the compact task's character vocabulary (specials included).
pub fn vocab_size() -> usize {
    Task::Arith.vocab_size()
}
