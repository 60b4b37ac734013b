//! Recipes: a published training set turned into the prompts the paper trains on.
//!
//! The hub's DAPO-Math-17k (verl's Parquet layout) is not the set its authors train on as
//! it stands: it holds each of its ~17.9k problems 100 times (1.79 M rows), and every user
//! message wraps the problem in DAPO's own instruction ("… of the form Answer: $Answer …"),
//! which contradicts a `\boxed{}` template and boxed-only grading. The `dapo-math` recipe
//! (1) strips that instruction, exactly, from each problem, (2) keeps each distinct problem
//! once, in the order of its first row, and (3) drops a problem that appears with two
//! different golds, since no rule tells which is right — counting each case, so a user sees
//! what was done to the file.
//!
//! The core is streaming: rows are pushed one at a time ([`Preparer::push`]) and only the
//! distinct problems are held, so the 1.79 M-row file never sits in memory whole.

use std::collections::HashMap;

use deltarl_schemas::{PromptRow, RewardKind};
use serde::Serialize;

/// A published training set a recipe knows how to prepare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recipe {
    /// DAPO-Math-17k (`BytedTsinghua-SIA/DAPO-Math-17k`), in the hub's layout or any layout
    /// `data.source` reads.
    DapoMath,
}

/// DAPO's instruction before the problem, as every row of the hub's file has it.
pub const DAPO_PREFIX: &str = "Solve the following math problem step by step. The last line of your response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n";
/// DAPO's reminder after the problem.
pub const DAPO_SUFFIX: &str = "\n\nRemember to put your answer on its own line after \"Answer:\".";
/// What is left of DAPO's instruction in a problem whose prefix or suffix differs from the
/// exact text (counted as `instruction_left`, never silently trained on).
const DAPO_MARK: &str = "Answer: $Answer";

/// How many examples of dropped conflicting problems the summary names.
const CONFLICT_EXAMPLES: usize = 5;

impl Recipe {
    /// The recipe's name on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Recipe::DapoMath => "dapo-math",
        }
    }

    /// The prefix of the ids it writes (`dapo-math-0`, `dapo-math-1`, …).
    fn id_prefix(self) -> &'static str {
        match self {
            Recipe::DapoMath => "dapo-math",
        }
    }

    /// The instruction wrapped around each problem: (prefix, suffix, a mark of either).
    fn instruction(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Recipe::DapoMath => (DAPO_PREFIX, DAPO_SUFFIX, DAPO_MARK),
        }
    }
}

/// Why a row cannot be prepared; `place` says where it is in the input (`row 12`, `line 3`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecipeError {
    #[error("{place}: the recipe {recipe} takes math problems, but this record is routed to the code reward")]
    NotMath { place: String, recipe: &'static str },
    #[error("{place}: the problem is empty once the instruction is stripped")]
    EmptyProblem { place: String },
    #[error("{place}: the gold answer (`answer` / `reward_model.ground_truth`) is empty")]
    EmptyAnswer { place: String },
    #[error("the input holds no rows")]
    NoRows,
    #[error("every problem was dropped ({conflicting} had conflicting golds)")]
    NothingLeft { conflicting: usize },
}

/// How the rows carried the recipe's instruction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InstructionCounts {
    /// Rows with both the exact prefix and the exact suffix (the hub's layout).
    pub both: usize,
    pub prefix_only: usize,
    pub suffix_only: usize,
    /// Rows without either (a copy already stripped).
    pub neither: usize,
    /// Rows that still mention the instruction after stripping (a variant wording): kept,
    /// and counted so it is seen.
    pub left: usize,
}

/// A problem dropped because its rows disagree on the gold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// Where its first row is.
    pub place: String,
    /// Its distinct golds, in order of appearance.
    pub golds: Vec<String>,
}

/// What a recipe did to its input (printed, and written beside the output).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecipeSummary {
    pub recipe: Recipe,
    /// Rows in the input.
    pub rows_read: usize,
    pub instruction: InstructionCounts,
    /// Distinct problems (whitespace runs compared as one space, after stripping).
    pub distinct_problems: usize,
    /// Rows that repeat a problem seen before (`rows_read - distinct_problems`).
    pub repeated_rows: usize,
    /// Distinct problems dropped because their rows carry more than one gold.
    pub conflicting_problems: usize,
    /// Up to five of them.
    pub conflict_examples: Vec<Conflict>,
    /// Problems written.
    pub written: usize,
}

/// One distinct problem seen so far.
struct Entry {
    row: PromptRow,
    place: String,
    golds: Vec<String>,
}

/// The recipe's state over a stream of rows.
pub struct Preparer {
    recipe: Recipe,
    entries: Vec<Entry>,
    by_key: HashMap<String, usize>,
    rows_read: usize,
    instruction: InstructionCounts,
}

impl Preparer {
    pub fn new(recipe: Recipe) -> Preparer {
        Preparer {
            recipe,
            entries: Vec::new(),
            by_key: HashMap::new(),
            rows_read: 0,
            instruction: InstructionCounts::default(),
        }
    }

    /// Takes one input row, read by the layouts `data.source` knows; `place` says where it
    /// is in the input, for errors and the summary.
    pub fn push(&mut self, row: PromptRow, place: &str) -> Result<(), RecipeError> {
        if row.reward_kind != RewardKind::Math {
            return Err(RecipeError::NotMath {
                place: place.into(),
                recipe: self.recipe.name(),
            });
        }
        self.rows_read += 1;
        // 1. Strip the instruction, exactly, and count how it was found.
        let (prefix, suffix, mark) = self.recipe.instruction();
        let text = row.problem.as_str();
        let (text, had_prefix) = match text.strip_prefix(prefix) {
            Some(t) => (t, true),
            None => (text, false),
        };
        let (text, had_suffix) = match text.strip_suffix(suffix) {
            Some(t) => (t, true),
            None => (text, false),
        };
        let counter = match (had_prefix, had_suffix) {
            (true, true) => &mut self.instruction.both,
            (true, false) => &mut self.instruction.prefix_only,
            (false, true) => &mut self.instruction.suffix_only,
            (false, false) => &mut self.instruction.neither,
        };
        *counter += 1;
        let problem = text.trim();
        if problem.contains(mark) {
            self.instruction.left += 1;
        }
        if problem.is_empty() {
            return Err(RecipeError::EmptyProblem {
                place: place.into(),
            });
        }
        let gold = row.answer.trim();
        if gold.is_empty() {
            return Err(RecipeError::EmptyAnswer {
                place: place.into(),
            });
        }
        // 2. One entry per problem; whitespace runs count as one space, so a copy that
        // differs only in line breaks is the same problem.
        let key = problem.split_whitespace().collect::<Vec<_>>().join(" ");
        match self.by_key.get(&key) {
            Some(&i) => {
                let golds = &mut self.entries[i].golds;
                if !golds.iter().any(|g| g == gold) {
                    golds.push(gold.to_string());
                }
            }
            None => {
                self.by_key.insert(key, self.entries.len());
                self.entries.push(Entry {
                    row: PromptRow {
                        problem: problem.to_string(),
                        answer: gold.to_string(),
                        ..row
                    },
                    place: place.into(),
                    golds: vec![gold.to_string()],
                });
            }
        }
        Ok(())
    }

    /// The prepared prompts (ids `<recipe>-0`, `<recipe>-1`, … in order of first
    /// appearance) and what was done.
    pub fn finish(self) -> Result<(Vec<PromptRow>, RecipeSummary), RecipeError> {
        if self.rows_read == 0 {
            return Err(RecipeError::NoRows);
        }
        let distinct_problems = self.entries.len();
        let mut rows = Vec::with_capacity(distinct_problems);
        let mut conflicts = Vec::new();
        // 3. A problem with two golds is dropped: which one is right is not in the data.
        for e in self.entries {
            if e.golds.len() > 1 {
                conflicts.push(Conflict {
                    place: e.place,
                    golds: e.golds,
                });
                continue;
            }
            let id = format!("{}-{}", self.recipe.id_prefix(), rows.len());
            rows.push(PromptRow { id, ..e.row });
        }
        if rows.is_empty() {
            return Err(RecipeError::NothingLeft {
                conflicting: conflicts.len(),
            });
        }
        let summary = RecipeSummary {
            recipe: self.recipe,
            rows_read: self.rows_read,
            instruction: self.instruction,
            distinct_problems,
            repeated_rows: self.rows_read - distinct_problems,
            conflicting_problems: conflicts.len(),
            conflict_examples: conflicts.into_iter().take(CONFLICT_EXAMPLES).collect(),
            written: rows.len(),
        };
        Ok((rows, summary))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(problem: &str, answer: &str) -> PromptRow {
        PromptRow {
            id: "ignored".into(),
            problem: problem.into(),
            answer: answer.into(),
            data_source: Some("math_dapo".into()),
            system: None,
            reward_kind: RewardKind::Math,
        }
    }

    fn wrapped(problem: &str) -> String {
        format!("{DAPO_PREFIX}{problem}{DAPO_SUFFIX}")
    }

    /// The hub's shape by hand: three problems, each repeated, one with two golds, one
    /// copy already stripped and one differing only in whitespace.
    #[test]
    fn strips_dedups_and_drops_conflicts() {
        let mut p = Preparer::new(Recipe::DapoMath);
        let inputs = [
            (wrapped("What is $1+1$?"), "2"),
            (wrapped("Find $x$."), "3"),
            (wrapped("What is $1+1$?"), "2"),
            ("What is\n$1+1$?".to_string(), " 2 "), // stripped copy, other whitespace
            (wrapped("Find $x$."), "4"),            // a second gold: dropped
            (wrapped("Compute $2^3$."), "8"),
            (format!("{DAPO_PREFIX}Half-wrapped."), "1"),
        ];
        for (i, (problem, answer)) in inputs.iter().enumerate() {
            p.push(row(problem, answer), &format!("row {}", i + 1))
                .unwrap();
        }
        let (rows, s) = p.finish().unwrap();
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r.id.as_str(), r.problem.as_str(), r.answer.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("dapo-math-0", "What is $1+1$?", "2"),
                ("dapo-math-1", "Compute $2^3$.", "8"),
                ("dapo-math-2", "Half-wrapped.", "1"),
            ]
        );
        assert_eq!(rows[0].data_source.as_deref(), Some("math_dapo"));
        assert_eq!(
            s.instruction,
            InstructionCounts {
                both: 5,
                prefix_only: 1,
                suffix_only: 0,
                neither: 1,
                left: 0
            }
        );
        assert_eq!(
            (s.rows_read, s.distinct_problems, s.repeated_rows),
            (7, 4, 3)
        );
        assert_eq!((s.conflicting_problems, s.written), (1, 3));
        assert_eq!(
            s.conflict_examples,
            [Conflict {
                place: "row 2".into(),
                golds: vec!["3".into(), "4".into()]
            }]
        );
        // Invariant: every row read is a written problem, a repeat, or a dropped one's.
        assert_eq!(s.written + s.conflicting_problems, s.distinct_problems);
    }

    #[test]
    fn a_variant_instruction_is_counted_not_hidden() {
        let mut p = Preparer::new(Recipe::DapoMath);
        let variant = "Solve this. The last line should be Answer: $Answer.\n\nWhat is 2?";
        p.push(row(variant, "2"), "line 1").unwrap();
        let (rows, s) = p.finish().unwrap();
        assert_eq!(rows[0].problem, variant);
        assert_eq!((s.instruction.neither, s.instruction.left), (1, 1));
    }

    #[test]
    fn errors_name_the_place() {
        let mut p = Preparer::new(Recipe::DapoMath);
        let err = p.push(row(&wrapped("  "), "1"), "row 4").unwrap_err();
        assert_eq!(
            err.to_string(),
            "row 4: the problem is empty once the instruction is stripped"
        );
        let err = p.push(row("x", " "), "row 5").unwrap_err();
        assert!(
            err.to_string().starts_with("row 5: the gold answer"),
            "{err}"
        );
        let code = PromptRow {
            reward_kind: RewardKind::Code,
            ..row("def f(): pass", "{}")
        };
        let err = p.push(code, "line 9").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 9: the recipe dapo-math takes math"),
            "{err}"
        );
        assert_eq!(
            Preparer::new(Recipe::DapoMath).finish().unwrap_err(),
            RecipeError::NoRows
        );
        let mut p = Preparer::new(Recipe::DapoMath);
        p.push(row("q", "1"), "row 1").unwrap();
        p.push(row("q", "2"), "row 2").unwrap();
        assert_eq!(
            p.finish().unwrap_err(),
            RecipeError::NothingLeft { conflicting: 1 }
        );
    }
}
