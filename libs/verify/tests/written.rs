//! The hand-written case file (`written.jsonl`): answers written the way others write
//! them, each labelled with the verdict a careful grader intends under the lenient policy
//! (`intended`) and, where it differs, under the strict one (`boxed`: no box, no reward).
//! Where the label deliberately differs from math-verify the case's `note` says so and why
//! (`deltarl bench verify` prints both agreements).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

use deltarl_verify::{verify_with, Policy};

/// The kinds of answers the file must cover: the first round's 26, then the second's,
/// then the third's, then matrix arithmetic, then answers
/// that end with an operand of an expression, then the empty set's spellings.
const KINDS: [&str; 63] = [
    "answer-phrase",
    "box-wins",
    "last-number",
    "several-boxes",
    "labelled",
    "inequality",
    "cfrac",
    "textnormal",
    "euler",
    "pm",
    "thousands",
    "percent-word",
    "units",
    "decimal-comma",
    "tuple-list",
    "tuple-vs-set",
    "interval",
    "matrix",
    "equation",
    "approximation",
    "mc-letter",
    "plain",
    "chain",
    "answer-phrase-box",
    "connective",
    "words",
    "space-thousands",
    "decimal-comma-context",
    "currency-unit",
    "percentage-word",
    "answer-display-math",
    "template-debris",
    "escaped-latex",
    "joined-boxes-text",
    "gold-solution",
    "relation-spellings",
    "negated-inequality",
    "interval-chain",
    "abs-union",
    "approximate-suffix",
    "matrix-envs",
    "tuple-semicolon",
    "or-list",
    "labelled-ratio",
    "repeated-tuples",
    "trig-identity",
    "commutative",
    "text-sentence",
    "interval-member",
    "boxes-vs-one",
    "locale-prose",
    "answer-heading-math",
    "relation-sentence",
    "matrix-sentence",
    "last-sentence",
    "box-units-text",
    "interval-not-number",
    "display-not-answer",
    "hedged-sentence",
    "gold-solution-prose",
    "matrix-arithmetic",
    "ends-with-operand",
    "empty-set",
];

#[test]
fn every_written_case_gets_its_intended_verdict_in_both_policies() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/written.jsonl"))
            .unwrap();
    let mut kinds = BTreeSet::new();
    let mut wrong = Vec::new();
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (id, kind) = (v["id"].as_str().unwrap(), v["kind"].as_str().unwrap());
        let (pred, gold) = (v["pred"].as_str().unwrap(), v["gold"].as_str().unwrap());
        let intended = v["intended"].as_bool().unwrap();
        let boxed = v["boxed"].as_bool().unwrap_or(intended);
        kinds.insert(kind.to_string());
        n += 1;
        for (policy, want) in [(Policy::Lenient, intended), (Policy::Boxed, boxed)] {
            let got = verify_with(pred, gold, policy);
            if got != want {
                wrong.push(format!(
                    "{id} {kind} {policy:?}: gold {gold:?} pred {pred:?}: {got}, intended {want}"
                ));
            }
        }
    }
    let missing: Vec<_> = KINDS.iter().filter(|k| !kinds.contains(**k)).collect();
    assert!(missing.is_empty(), "kinds without a case: {missing:?}");
    assert!(n >= 100, "{n} cases");
    assert!(
        wrong.is_empty(),
        "{} of {n} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
