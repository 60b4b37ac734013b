//! `word-problems`: short English word problems for a small pretrained instruct model
//! (SmolLM2-135M-Instruct's level), in four kinds, one drawn uniformly per problem:
//!
//! ```text
//! Add       Mia has 4 marbles and gets 2 more. How many marbles does Mia have now?
//! Total     Leo has 6 red cards and 9 blue cards. How many cards does Leo have in total?
//! Multiply  Sam has 3 bags with 5 apples in each bag. How many apples does Sam have?
//! Subtract  Ben has 8 books and gives away 6. How many books does Ben have left?
//! ```
//!
//! Their difficulty for that model, measured with `deltarl eval` on the 200 held-out
//! problems the eval stage draws (46-53 a kind; the prompt and grading of
//! `configs/smollm2-math.toml`): greedy it answered 33 %, 42 %, 30 % and 12 % of them,
//! sampled at the configuration's temperature 0.6 (4 answers a problem) 24 %, 23 %, 19 %
//! and 13 %.
//!
//! The answer is a whole number; the question carries no instruction (the configuration's
//! template adds one). Unlike the `tiny-*` tasks there is no character vocabulary and no
//! worked solution: the model brings its own tokenizer, and nothing is warm-started.
//! Splits hash the problem's id as every built-in task does ([`crate::split_of_id`]); the
//! space has 12 names x 12 items x (25 + 81 + 16 + 35) numbers = 22,608 problems.

use deltarl_schemas::seed::Rng;
use deltarl_schemas::PromptRow;

use crate::Split;

/// The `data.source` of the task.
pub const SOURCE: &str = "word-problems";

const NAMES: [&str; 12] = [
    "Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Max", "Emma", "Leo", "Zoe", "Jack", "Nora",
];
const ITEMS: [&str; 12] = [
    "apples", "books", "marbles", "stickers", "pencils", "cookies", "cards", "shells", "balloons",
    "toys", "coins", "flowers",
];

/// A problem's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `a + b` as "gets b more", a and b in 1..=5.
    Add,
    /// `a + b` as red and blue things in total, a and b in 1..=9.
    Total,
    /// `a * b` as bags of b, a and b in 2..=5.
    Multiply,
    /// `a - b` as "gives away b", a in 3..=9, b in 1..a (the hardest for the base).
    Subtract,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Add, Kind::Total, Kind::Multiply, Kind::Subtract];

    /// The kind's name in problem ids.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Add => "add",
            Kind::Total => "total",
            Kind::Multiply => "mul",
            Kind::Subtract => "sub",
        }
    }
}

/// One word problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    pub kind: Kind,
    pub name: &'static str,
    pub item: &'static str,
    pub a: u32,
    pub b: u32,
}

impl Word {
    /// Draws a problem: a kind uniformly, then its numbers, a name and an item.
    pub fn draw(rng: &mut Rng) -> Self {
        let kind = Kind::ALL[rng.below(Kind::ALL.len() as u64) as usize];
        let name = NAMES[rng.below(NAMES.len() as u64) as usize];
        let item = ITEMS[rng.below(ITEMS.len() as u64) as usize];
        let mut int = |lo: u32, hi: u32| lo + rng.below(u64::from(hi - lo + 1)) as u32;
        let (a, b) = match kind {
            Kind::Add => (int(1, 5), int(1, 5)),
            Kind::Total => (int(1, 9), int(1, 9)),
            Kind::Multiply => (int(2, 5), int(2, 5)),
            Kind::Subtract => {
                let a = int(3, 9);
                (a, int(1, a - 1))
            }
        };
        Word {
            kind,
            name,
            item,
            a,
            b,
        }
    }

    pub fn question(&self) -> String {
        let Word {
            name, item, a, b, ..
        } = self;
        match self.kind {
            Kind::Add => format!(
                "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
            ),
            Kind::Total => format!(
                "{name} has {a} red {item} and {b} blue {item}. How many {item} does {name} \
                 have in total?"
            ),
            Kind::Multiply => format!(
                "{name} has {a} bags with {b} {item} in each bag. How many {item} does {name} have?"
            ),
            Kind::Subtract => format!(
                "{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?"
            ),
        }
    }

    pub fn answer(&self) -> u32 {
        match self.kind {
            Kind::Add | Kind::Total => self.a + self.b,
            Kind::Multiply => self.a * self.b,
            Kind::Subtract => self.a - self.b,
        }
    }

    /// The stable id of this problem.
    pub fn id(&self) -> String {
        let Word {
            name, item, a, b, ..
        } = self;
        format!("words-{}-{a}-{b}-{name}-{item}", self.kind.name())
    }
}

/// `n` distinct problems of one split, drawn deterministically from `seed`.
pub fn problems(split: Split, n: usize, seed: u64) -> Vec<Word> {
    crate::distinct(split, n, seed, 10_000_000, Word::draw, Word::id)
}

/// Problems as prompt rows (the input table of rollout and eval).
pub fn prompt_rows(problems: &[Word]) -> Vec<PromptRow> {
    problems
        .iter()
        .map(|p| crate::row::math_row(p.id(), p.question(), p.answer(), SOURCE))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_answers_and_ids_are_hand_checkable() {
        let p = Word {
            kind: Kind::Subtract,
            name: "Ben",
            item: "books",
            a: 8,
            b: 6,
        };
        assert_eq!(
            p.question(),
            "Ben has 8 books and gives away 6. How many books does Ben have left?"
        );
        assert_eq!(p.answer(), 2);
        assert_eq!(p.id(), "words-sub-8-6-Ben-books");
        let q = Word {
            kind: Kind::Total,
            ..p
        };
        assert_eq!(q.answer(), 14);
        assert_eq!(
            q.question(),
            "Ben has 8 red books and 6 blue books. How many books does Ben have in total?"
        );
        assert_eq!(
            Word {
                kind: Kind::Multiply,
                ..p
            }
            .answer(),
            48
        );
    }

    /// Every kind is drawn, numbers stay in their ranges (a subtraction never goes below
    /// one), and the splits are disjoint and reproducible.
    #[test]
    fn draws_cover_the_kinds_within_their_ranges() {
        let train = problems(Split::Train, 2000, 1);
        let test = problems(Split::Test, 300, 2);
        assert_eq!((train.len(), test.len()), (2000, 300));
        for k in Kind::ALL {
            let n = train.iter().filter(|p| p.kind == k).count();
            // Uniform over 4 kinds: 500 expected, sd sqrt(2000 * 0.25 * 0.75) = 19.4; six
            // sd either side.
            assert!((384..=616).contains(&n), "{k:?}: {n}");
        }
        for p in train.iter().chain(&test) {
            let ok = match p.kind {
                Kind::Add => (1..=5).contains(&p.a) && (1..=5).contains(&p.b),
                Kind::Total => (1..=9).contains(&p.a) && (1..=9).contains(&p.b),
                Kind::Multiply => (2..=5).contains(&p.a) && (2..=5).contains(&p.b),
                Kind::Subtract => (3..=9).contains(&p.a) && (1..p.a).contains(&p.b),
            };
            assert!(ok, "{p:?}");
            assert!(p.answer() >= 1);
        }
        let ids: std::collections::HashSet<String> = train.iter().map(Word::id).collect();
        assert_eq!(ids.len(), train.len());
        assert!(test.iter().all(|p| !ids.contains(&p.id())));
        assert_eq!(problems(Split::Test, 300, 2), test);
    }
}
