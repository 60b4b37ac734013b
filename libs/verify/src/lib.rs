//! Math answer extraction and equivalence (no libtorch).
//!
//! * [`extract`] finds the last `\boxed{...}` / `\fbox{...}` with balanced braces. Two
//!   named policies ([`Policy`]): `boxed` (only the last box; the training default) and
//!   `lenient` (several boxes on the last line together, then answer phrases — "The answer
//!   is", "Final Answer:", "**Answer:**" — then `####`, then the number the response ends
//!   with, in math-verify's order; the default of `deltarl eval` and `deltarl verify`).
//! * [`equivalent`] normalises LaTeX (`\leq`, `\geqslant`, `\lt`, `\ne`, `\cfrac`,
//!   `\textnormal`, `\mathrm{e}`, `{,}` separators, percent words, units, matrix
//!   environments as nested tuples, a decimal comma where it cannot group thousands) and
//!   compares numbers exactly as rationals (integers of any size, decimals, fractions,
//!   mixed numbers, percentages, scientific notation); a decimal of four or more places
//!   against an exact value by rounding (`|d - v| <= 10^-places`); tuples / intervals /
//!   sets element-wise (a written set never equals a written tuple; lists of tuples
//!   unordered); inequalities in one variable as their intervals; `a \pm b` as a pair;
//!   labelled answers (`x = 11`, `f(x) = 1`, `(p,q) = (3,2)`, a chain's last side) by their
//!   right side; two equations up to sides and a non-zero factor; everything else as
//!   expressions evaluated numerically, or as normalised strings.
//!
//! # Agreement with HF math-verify
//!
//! `tests/cases.jsonl` (436 cases from the answer styles of math500, aime24/25, amc23,
//! minerva_math, olympiadbench and gsm8k, made and labelled by `tests/make_cases.py`)
//! agrees with math-verify on 435 of 436 (99.8 %). The one deliberate disagreement:
//!
//! | gold | prediction | math-verify | ours | why |
//! |---|---|---|---|---|
//! | `5.3e3` | `\boxed{5 . 3 e 3}` | false | true | LaTeX ignores spaces; `5 . 3 e 3` typesets as `5.3e3` |
//!
//! Digits separated only by spaces (`1 3`) are never joined into one number, as
//! math-verify does not either; a comma and a space separate items (`32, 349`).
//!
//! # Answers others wrote
//!
//! `tests/written.jsonl` (320 cases written here, 63 kinds) labels each case with the
//! verdict intended under each policy; every case gets it (`tests/written.rs`). Where the
//! label deliberately differs from math-verify the case's `note` says why (a tuple is not
//! a set; `2x = 4` does not answer 4; an inequality denotes its interval; `\mathrm{e}`;
//! a decimal comma; a choice written with its value).
//!
//! The second round's kinds: digit groups apart by spaces (`1 000`) or `,\!`; a decimal
//! comma beside a gold decimal (`1,22`, `0,111`, unless a space follows the comma);
//! currency signs and units after a number (`€`, `m²`, `\text{ cm}^3`); `percentage`;
//! an answer phrase above display math (`**Answer**` then `\[ 9 \]`); the end of a chat
//! turn (`<|im_end|>`, `<|im_start|>`, ...: what follows is not the answer, under either
//! policy) and MATH's "I hope it is correct."; JSON-escaped LaTeX (`\\boxed{...}`);
//! unicode relations (`≥`, `≤`, `≠`); a negated variable (`-x > -1` is `x < 1`); `|z| > 2`
//! as the union of its intervals; `x = 1/3 \approx 0.33` by its exact part; `;` between
//! items; labelled ratios (`V_1:V_2 = 11:21`); `\sec`, `\csc`, `\cot` and powers of
//! functions (`\tan^2 y`).
//!
//! The third round's kinds, all under the lenient policy's last-number fallback, which now
//! reads the final sentence: the number a response ends with; else the final sentence's
//! last inline math, or its last number written as prose writes it (`1,000.99€`, `2,74 $`,
//! the European `€ 1.250,50`, `12 m²`), when at most three words and no number, comma or
//! further math follow ("Therefore $x \geq 5$ is the solution.", "So there are 12 apples
//! left.") and the sentence does not hedge ("Maybe", "Checking ... fails", "if", "not":
//! such a sentence gives nothing). An `Answer` heading before display or inline math
//! (`Answer \[ 9 \]`, `Answer \( (9+1) \)`); an answer phrase that introduces a
//! sentence ("Final Answer: The largest value is 34") gives that sentence's last math or
//! number. A gold written with a unit word after its number (`$125$ miles`) is that
//! number, as `125\text{ miles}` already was; a gold that is a worked solution without a
//! box gives the answer the lenient policy reads in it. Under either policy a prediction with
//! three words of two letters or more is a sentence, never a bare answer ("So the matrix
//! is $M$." needs its box under the strict policy). The number a response ends with is not
//! its answer when it is an operand of what comes before it (`1/2`, `2^2`, `\frac{1}{2}`,
//! `10^{3}`, `3 - 2`, `\sqrt 2` are not 2), and a ratio it ends with is read whole ("The
//! ratio is 3:2" answers `3:2`). `\emptyset`, `\varnothing` and `∅` are one set.
//!
//! Deliberately graded otherwise than math-verify's defaults, beyond the table above: a
//! set written as one (`{1,3}`) never equals a pair (`(1,3)`); a decimal of fewer than
//! four places never stands for a fraction (`0.33` is not 1/3, in a matrix or not); two
//! boxes in a list equal one box holding both (`\boxed{1}, \boxed{2}` is `1, 2`: the
//! boxes are one answer written in parts); matrix arithmetic with numeric entries is
//! evaluated where nothing else stands beside it (`2I - M` is its value; `x - M`, `M^T`
//! stay as written), which math-verify does not do. `deltarl bench verify` prints both
//! agreements for both policies. Every gold
//! answer of the seven benchmark files verifies against itself when boxed
//! (`tests/agreement.rs`).
//!
//! Every call is bounded: inputs over [`MAX_INPUT`] bytes and numbers over
//! [`MAX_DIGITS`] digits are "not equal"; the expression evaluator has a step budget. No
//! global state, so it is safe on any thread.

mod decimal;
mod ending;
mod expr;
mod extract;
mod matrix;
mod normalize;
mod number;
mod options;
mod relations;

pub use extract::{extract, Extraction};
pub use normalize::normalize;
pub use number::Rational;
pub use options::{ExtractOptions, Fallback, Policy, MAX_DIGITS, MAX_INPUT};

use decimal::{approximates, comma_decimal};

/// A gold answer as written, or the content of its boxes when it has them (all of them:
/// `\boxed{1}, \boxed{-2}` is the list `1, -2`); a gold that is a worked solution without
/// a box (three or more lines or sentences of prose) gives the answer the lenient policy
/// reads in it.
fn gold_answer(gold: &str) -> String {
    let every_box = ExtractOptions {
        joined_boxes: true,
        ..ExtractOptions::default()
    };
    if let Some(e) = extract(gold, &every_box) {
        return e.answer;
    }
    if bare(gold) {
        return gold.to_string();
    }
    extract(gold, &Policy::Lenient.options()).map_or_else(|| gold.to_string(), |e| e.answer)
}

/// Grades a whole response against a gold answer: extraction, then equivalence.
/// Returns the extracted answer (if any) and the verdict.
pub fn grade(response: &str, gold: &str, opts: &ExtractOptions) -> (Option<String>, bool) {
    match extract(response, opts) {
        Some(e) => {
            let ok = equivalent(&e.answer, &gold_answer(gold));
            (Some(e.answer), ok)
        }
        None => (None, false),
    }
}

/// Grades a prediction that may be a whole response or a bare answer (boxed policy).
pub fn verify(pred: &str, gold: &str) -> bool {
    verify_with(pred, gold, Policy::Boxed)
}

/// [`verify`] under an extraction policy. A bare prediction is compared whole first, so
/// the lenient policy's last-number fallback never cuts `\frac{1}{2}` down to `2`.
pub fn verify_with(pred: &str, gold: &str, policy: Policy) -> bool {
    let gold = gold_answer(gold);
    // Boxes first (under the lenient policy several on the last line count together).
    let boxes = ExtractOptions {
        joined_boxes: policy == Policy::Lenient,
        ..ExtractOptions::default()
    };
    if let Some(e) = extract(pred, &boxes) {
        return equivalent(&e.answer, &gold);
    }
    if bare(pred) && equivalent(pred, &gold) {
        return true;
    }
    match policy {
        Policy::Boxed => false,
        Policy::Lenient => {
            extract(pred, &policy.options()).is_some_and(|e| equivalent(&e.answer, &gold))
        }
    }
}

/// A prediction that is an answer, not a response: one line with at most two words of
/// prose, two letters or more ("So the matrix is $M$." is a sentence; LaTeX commands and
/// units in `\text{}` do not count as prose here).
fn bare(pred: &str) -> bool {
    let words = pred
        .split_whitespace()
        .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_alphabetic()))
        .count();
    !pred.trim().contains('\n') && words <= 2
}

/// Whether two extracted answers denote the same mathematical object.
pub fn equivalent(pred: &str, gold: &str) -> bool {
    if pred.len() > MAX_INPUT || gold.len() > MAX_INPUT {
        return false;
    }
    let (p, g) = (normalize(pred), normalize(gold));
    if p.is_empty() || g.is_empty() {
        return false;
    }
    if p == g {
        return true;
    }
    // "1,22" against "1.22": beside a decimal point a comma between digits is a decimal
    // comma, unless a space follows it ("3, 5" is a list).
    let spaced = |raw: &str| raw.contains(", ") || raw.contains(",\n");
    for (c, d, raw) in [(&p, &g, pred), (&g, &p, gold)] {
        let Some(c) = comma_decimal(c).filter(|_| d.contains('.') && !spaced(raw)) else {
            continue;
        };
        if let (Some(a), Some(b)) = (Rational::parse(&c), Rational::parse(d)) {
            return a == b;
        }
    }
    // Answers in words compare without case ("Monday", "monday"); short ones may be
    // products of names (`xy`) and go on to the expression rules.
    let word = |s: &str| s.len() >= 3 && s.chars().all(|c| c.is_ascii_alphabetic());
    if word(&p) && word(&g) && p.eq_ignore_ascii_case(&g) {
        return true;
    }
    // Multiple-choice letters: "(B)", "B", "\text{(B)}" all normalise to "b".
    let letter = |s: &str| {
        let t = s.trim_matches(|c| c == '(' || c == ')');
        (t.len() == 1 && t.chars().all(|c| c.is_ascii_alphabetic())).then(|| t.to_string())
    };
    if let (Some(a), Some(b)) = (letter(&p), letter(&g)) {
        return a == b;
    }
    // A choice with its value, "(B) 12", against a gold letter.
    if let Some(b) = letter(&g) {
        let choice = p.strip_prefix('(').and_then(|r| r.get(..2));
        if let Some(c) = choice.filter(|c| c.ends_with(')')) {
            return c[..1].eq_ignore_ascii_case(&b);
        }
    }
    // `a \pm b` is the pair {a + b, a - b}.
    if let Some(p2) = relations::plus_minus(&p) {
        return same(&p2, &relations::plus_minus(&g).unwrap_or(g));
    }
    if let Some(g2) = relations::plus_minus(&g) {
        return same(&p, &g2);
    }
    // Two equations: the same up to sides and a non-zero factor.
    if p.contains('=') && g.contains('=') && relations::same_equation(&p, &g) {
        return true;
    }
    // Equations and assignments: compare right-hand sides ("x = 3", "f(x) = 1",
    // "(p,q) = (3,2)" vs a bare gold), and of a chain the last side ("x = 5+5+1 = 11").
    let rhs = |s: &str| -> Option<String> {
        let (l, _) = s.split_once('=')?;
        let (_, r) = s.rsplit_once('=')?;
        if l.ends_with(['<', '>', '!']) || r.is_empty() {
            return None;
        }
        relations::label(l).then(|| r.to_string())
    };
    if let Some(r) = rhs(&p) {
        if rhs(&g).is_none() && same(&r, &g) {
            return true;
        }
    }
    if let Some(r) = rhs(&g) {
        if rhs(&p).is_none() && same(&p, &r) {
            return true;
        }
    }
    same(&p, &g)
}

/// Equivalence of two normalised answers.
fn same(p: &str, g: &str) -> bool {
    if p == g {
        return true;
    }
    // Inequalities compare as the intervals they describe.
    let (pi, gi) = (relations::interval(p), relations::interval(g));
    if pi.is_some() || gi.is_some() {
        let (a, b) = (
            pi.unwrap_or_else(|| p.to_string()),
            gi.unwrap_or_else(|| g.to_string()),
        );
        return a == b || (!a.contains('<') && !b.contains('<') && same(&a, &b));
    }
    if let (Some(a), Some(b)) = (collection(p), collection(g)) {
        return same_collection(&a, &b);
    }
    let values = || Some((expr::evaluate(p)?, expr::evaluate(g)?));
    if let (Some(a), Some(b)) = (Rational::parse(p), Rational::parse(g)) {
        return a == b || values().is_some_and(|(a, b)| approximates(p, g, a, b));
    }
    values().is_some_and(|(a, b)| expr::close(a, b) || approximates(p, g, a, b))
}

/// A tuple, interval or set: brackets and top-level elements.
struct Collection {
    open: char,
    close: char,
    items: Vec<String>,
    /// Written with its brackets (a bare list `1, 2` is not).
    bracketed: bool,
}

/// Items of a list compare like answers: `x=2` against `2` by its right side.
fn same_item(x: &str, y: &str) -> bool {
    let value = |s: &str| -> Option<String> {
        let (l, r) = s.split_once('=')?;
        (relations::label(l) && !r.contains('=') && !r.is_empty()).then(|| r.to_string())
    };
    match (value(x), value(y)) {
        (Some(a), None) => same(&a, y),
        (None, Some(b)) => same(x, &b),
        _ => same(x, y),
    }
}

/// Whether the bracket opening `s` closes at its last character.
fn encloses(s: &str) -> bool {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + c.len_utf8() == s.len();
                }
            }
            _ => {}
        }
    }
    false
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

fn collection(s: &str) -> Option<Collection> {
    let first = s.chars().next()?;
    let last = s.chars().last()?;
    let bracketed =
        matches!(first, '(' | '[' | '{') && matches!(last, ')' | ']' | '}') && encloses(s);
    if bracketed && s.len() >= 2 {
        let inner = &s[1..s.len() - 1];
        let items = split_top(inner);
        if items.len() >= 2 || first == '{' {
            return Some(Collection {
                open: first,
                close: last,
                items,
                bracketed: true,
            });
        }
    }
    let items = split_top(s);
    (items.len() >= 2).then_some(Collection {
        open: '{',
        close: '}',
        items,
        bracketed: false,
    })
}

fn same_collection(a: &Collection, b: &Collection) -> bool {
    if a.items.len() != b.items.len() {
        return false;
    }
    // A set written as one is never a tuple or an interval written as one.
    let set = |c: &Collection| c.bracketed && c.open == '{';
    let ordered = |c: &Collection| c.bracketed && c.open != '{';
    if (set(a) && ordered(b)) || (ordered(a) && set(b)) {
        return false;
    }
    let unordered = a.open == '{' || b.open == '{';
    if unordered {
        let mut used = vec![false; b.items.len()];
        return a.items.iter().all(|x| {
            if let Some(j) = (0..b.items.len()).find(|&j| !used[j] && same_item(x, &b.items[j])) {
                used[j] = true;
                true
            } else {
                false
            }
        });
    }
    // Tuples and intervals: the ends must match (open vs closed matters).
    a.open == b.open
        && a.close == b.close
        && a.items.iter().zip(&b.items).all(|(x, y)| same_item(x, y))
}

#[cfg(test)]
mod tests;
