//! The tests of one code prompt, in one canonical form (stored as JSON in the prompt's
//! `answer` and the rollouts' `gold`), and the program they run against.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tests of one prompt. Every format the field uses maps to one of three.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Tests {
    /// Code run after the program in its namespace; a case passes when it raises nothing
    /// (HumanEval's `check(entry_point)`, MBPP's `assert` lines).
    Asserts {
        cases: Vec<String>,
        /// Run once before the cases (MBPP's `test_setup_code` and imports).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        setup: String,
        /// The code the model was asked to complete (HumanEval's prompt).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// The function the cases call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry_point: Option<String>,
    },
    /// The program reads `input` on stdin and must print `output` (APPS, CodeContests,
    /// verl's code sets), compared after trailing whitespace is dropped from each line and
    /// trailing blank lines from the end.
    Stdio { cases: Vec<StdioCase> },
    /// `fn_name(*args)` must return `output` (TACO, LiveCodeBench's functional tests); a
    /// `class Solution` method of that name is called when there is no such function.
    Call {
        fn_name: String,
        cases: Vec<CallCase>,
    },
}

/// One stdin/stdout case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdioCase {
    pub input: String,
    pub output: String,
}

/// One function-call case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallCase {
    pub args: Vec<Value>,
    pub output: Value,
}

impl Tests {
    /// The tests stored in a gold column; the error says what is wrong with them.
    pub fn parse(gold: &str) -> Result<Tests, String> {
        let tests: Tests = serde_json::from_str(gold)
            .map_err(|e| format!("not a code test set ({e}); expected {{\"asserts\"|\"stdio\"|\"call\": {{\"cases\": [...]}}}}"))?;
        if tests.is_empty() {
            return Err("a code test set with no cases".into());
        }
        Ok(tests)
    }

    /// The canonical JSON (what the gold column holds).
    pub fn to_gold(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The number of cases.
    pub fn len(&self) -> usize {
        match self {
            Tests::Asserts { cases, .. } => cases.len(),
            Tests::Stdio { cases } => cases.len(),
            Tests::Call { cases, .. } => cases.len(),
        }
    }

    /// Whether there are no cases.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The program run for a response's code: with a prompt to complete (HumanEval), a
    /// response that does not define the entry point continues the prompt (completion
    /// style), and one that does gets the prompt's imports (a chat model rewrites the whole
    /// function, often without `from typing import List`).
    pub fn program(&self, code: &str) -> String {
        let Tests::Asserts {
            prompt: Some(prompt),
            entry_point: Some(entry),
            ..
        } = self
        else {
            return code.to_string();
        };
        let defines = code.lines().any(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("async ").unwrap_or(l);
            l.strip_prefix("def ")
                .and_then(|r| r.strip_prefix(entry.as_str()))
                .is_some_and(|r| r.trim_start().starts_with('('))
        });
        if !defines {
            return format!("{prompt}{code}");
        }
        let imports: Vec<&str> = prompt
            .lines()
            .filter(|l| l.starts_with("import ") || l.starts_with("from "))
            .collect();
        if imports.is_empty() {
            code.to_string()
        } else {
            format!("{}\n{code}", imports.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_round_trips_and_bad_gold_is_named() {
        let t = Tests::Stdio {
            cases: vec![StdioCase {
                input: "1 2\n".into(),
                output: "3\n".into(),
            }],
        };
        assert_eq!(
            t.to_gold(),
            r#"{"stdio":{"cases":[{"input":"1 2\n","output":"3\n"}]}}"#
        );
        assert_eq!(Tests::parse(&t.to_gold()).unwrap(), t);
        assert!(Tests::parse("42")
            .unwrap_err()
            .contains("not a code test set"));
        assert!(Tests::parse(r#"{"stdio":{"cases":[]}}"#)
            .unwrap_err()
            .contains("no cases"));
        assert!(Tests::parse(r#"{"stdio":{"cases":[],"x":1}}"#).is_err());
    }

    #[test]
    fn completion_and_whole_function_programs() {
        let t = Tests::Asserts {
            cases: vec!["check(f)".into()],
            setup: String::new(),
            prompt: Some(
                "from typing import List\n\ndef f(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n"
                    .into(),
            ),
            entry_point: Some("f".into()),
        };
        // A body continues the prompt.
        assert_eq!(
            t.program("    return sum(xs)\n"),
            "from typing import List\n\ndef f(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n    return sum(xs)\n"
        );
        // A whole function gets the imports only; `def fx(` is not `def f(`.
        assert_eq!(
            t.program("def f(xs: List[int]) -> int:\n    return sum(xs)\n"),
            "from typing import List\ndef f(xs: List[int]) -> int:\n    return sum(xs)\n"
        );
        assert!(t
            .program("def fx(a):\n    return 1\n")
            .ends_with("\"\"\"Sum.\"\"\"\ndef fx(a):\n    return 1\n"));
    }
}
