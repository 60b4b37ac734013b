//! Matrix arithmetic written out: sums, differences, scalar multiples and products of
//! matrices whose entries are numbers (`2\begin{pmatrix}1&0\\0&1\end{pmatrix} -
//! \begin{pmatrix}0&1\\1&0\end{pmatrix}`), evaluated exactly, so that an answer written as
//! the arithmetic equals its value and is compared entry by entry as any matrix is.
//! Also how a matrix is then written for comparison: its rows as tuples ([`tuples`]).
//!
//! Only what is unambiguous is evaluated: every entry and scalar a rational number, the
//! shapes compatible, and nothing but a boundary (`=`, punctuation, prose, the end) on
//! either side of the expression: `x\begin{pmatrix}...`, `A + \begin{pmatrix}...`,
//! `\begin{pmatrix}...\end{pmatrix}^2` or `^T` stay as written.

use crate::number::Rational;

/// Reads a cell or a scalar as a number (the caller's normalisation then
/// [`Rational::parse`]); passed in so that this module does not name the normaliser that
/// calls it.
pub(crate) type Number<'a> = &'a dyn Fn(&str) -> Option<Rational>;

/// Multiply-adds one expression may cost (a 30 x 30 product is 27,000).
const MAX_STEPS: usize = 100_000;
/// Entries a value may have: a column times a row of 300 (an answer of 1,500 bytes) would
/// otherwise write out 90,000.
const MAX_CELLS: usize = 1_024;

/// A string with its matrix environments taken out: `text[0] m[0] text[1] m[1] ... text[k]`.
pub(crate) struct Pieces<'a> {
    pub text: Vec<&'a str>,
    /// Each matrix's cells, row by row, as written (trimmed).
    pub matrices: Vec<Vec<Vec<String>>>,
}

/// How a matrix joins the one before it.
#[derive(Clone, Copy, PartialEq)]
enum Join {
    Add,
    Sub,
    Product,
}

type Matrix = Vec<Vec<Rational>>;

/// A number written as an answer's scalar (`2`, `-\frac{1}{2}`, `0.5`).
fn scalar(s: &str, number: Number<'_>) -> Option<Rational> {
    let s = s.trim();
    if s.is_empty() || s.contains("\\begin") {
        return None;
    }
    if s == "-" {
        return Rational::parse("-1");
    }
    number(s)
}

/// `s` without a trailing product sign (`2 \cdot`), and whether it had one.
fn strip_product(s: &str) -> (&str, bool) {
    let t = s.trim_end();
    for sign in ["\\cdot", "\\times", "*"] {
        if let Some(r) = t.strip_suffix(sign) {
            return (r.trim_end(), true);
        }
    }
    (t, false)
}

/// The text between two matrices as a join and the scalar of the second: ``, `\cdot`
/// (product); `+`, `- 2`, `+ \frac{1}{2} \cdot` (sum or difference, with a scalar).
fn connector(t: &str, number: Number<'_>) -> Option<(Join, Option<Rational>)> {
    let t = t.trim();
    if t.is_empty() || matches!(t, "\\cdot" | "\\times" | "*") {
        return Some((Join::Product, None));
    }
    let (join, rest) = match t.as_bytes()[0] {
        b'+' => (Join::Add, &t[1..]),
        b'-' => (Join::Sub, &t[1..]),
        _ => return None,
    };
    let (rest, _) = strip_product(rest);
    let rest = rest.trim();
    if rest.is_empty() {
        return Some((join, None));
    }
    Some((join, Some(scalar(rest, number)?)))
}

/// The text before an expression: where it may start (nothing, `=`, an opening bracket,
/// punctuation or a word of prose before it) and the scalar written right before the
/// first matrix, if any, with the length of the text that stays before that scalar.
/// None: something else multiplies or adds to it (`x`, `A +`).
fn lead(t: &str, number: Number<'_>) -> Option<(usize, Option<Rational>)> {
    let (body, product) = strip_product(t);
    let start = scalar_start(body);
    let tail = &body[start..];
    if tail.is_empty() {
        return (!product).then_some((t.len(), None));
    }
    if let Some(v) = scalar(tail, number) {
        // `x - M` is a difference, not `x` times `-M`: a sign starts the expression only
        // where nothing stands before it.
        let before = body[..start].trim_end();
        let open = before.is_empty() || before.ends_with(['=', '(', '[', '{', ',', ';', ':', '$']);
        return (open || !tail.starts_with(['-', '+'])).then_some((start, Some(v)));
    }
    // A word of prose ("is", "equals") may come right before it.
    let prose = tail.len() >= 2 && tail.chars().all(|c| c.is_ascii_alphabetic());
    (prose && !product).then_some((t.len(), None))
}

/// Where the last top-level item of `t` begins: after its last `=`, punctuation, opening
/// bracket or space outside braces (`= \frac{1}{2}` begins at the `\`).
fn scalar_start(t: &str) -> usize {
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in t.char_indices() {
        match c {
            '{' if depth == 0
                && !t[..i].ends_with(|c: char| c.is_ascii_alphabetic() || c == '}') =>
            {
                start = i + 1;
            }
            '{' => depth += 1,
            '}' => depth = (depth - 1).max(0),
            '=' | '$' | ',' | ';' | ':' | '(' | '[' | ' ' | '\n' if depth == 0 => start = i + 1,
            _ => {}
        }
    }
    start
}

/// The text after an expression may follow it: nothing, punctuation, a closing bracket,
/// `=`, or prose. Not an operator, a power (`^T`) or a symbol that multiplies it.
fn trail(t: &str) -> bool {
    let t = t.trim_start();
    let Some(c) = t.chars().next() else {
        return true;
    };
    if matches!(c, '.' | ',' | ';' | ':' | '$' | ')' | ']' | '}' | '=') {
        return true;
    }
    if let Some(r) = t.strip_prefix('\\') {
        return [")", "]", "right", "end", "quad", "qquad", "text", "\\"]
            .iter()
            .any(|w| r.starts_with(w));
    }
    let word: String = t.chars().take_while(char::is_ascii_alphabetic).collect();
    word.len() >= 2 && !t[word.len()..].starts_with(['^', '_', '('])
}

fn parse(cells: &[Vec<String>], number: Number<'_>) -> Option<Matrix> {
    let width = cells.first()?.len();
    if width == 0 || cells.iter().any(|r| r.len() != width) {
        return None;
    }
    cells
        .iter()
        .map(|r| r.iter().map(|c| scalar(c, number)).collect())
        .collect()
}

fn checked(v: Rational, steps: &mut usize) -> Option<Rational> {
    *steps += 1;
    (*steps <= MAX_STEPS && v.fits()).then_some(v)
}

fn scale(m: Matrix, k: &Rational, steps: &mut usize) -> Option<Matrix> {
    m.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|x| checked(x.mul(k.clone())?, steps))
                .collect()
        })
        .collect()
}

fn add(a: Matrix, b: Matrix, steps: &mut usize) -> Option<Matrix> {
    if a.len() != b.len() || a[0].len() != b[0].len() {
        return None;
    }
    a.into_iter()
        .zip(b)
        .map(|(r, s)| {
            r.into_iter()
                .zip(s)
                .map(|(x, y)| checked(x.add(y)?, steps))
                .collect()
        })
        .collect()
}

fn product(a: &Matrix, b: &Matrix, steps: &mut usize) -> Option<Matrix> {
    let (n, k, m) = (a.len(), a[0].len(), b[0].len());
    if b.len() != k || n * m > MAX_CELLS {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for row in a {
        let mut r = Vec::with_capacity(m);
        for j in 0..m {
            let mut sum = Rational::zero();
            for (x, brow) in row.iter().zip(b) {
                sum = checked(sum.add(x.clone().mul(brow[j].clone())?)?, steps)?;
            }
            r.push(sum);
        }
        out.push(r);
    }
    Some(out)
}

/// Evaluates the terms in order, products before sums: each is the join to the one
/// before, the scalar written before it and the matrix.
fn evaluate(terms: Vec<(Join, Option<Rational>, Matrix)>) -> Option<Matrix> {
    let mut steps = 0;
    let mut total: Option<Matrix> = None;
    // The product being formed, and whether it is subtracted.
    let mut current: Option<Matrix> = None;
    let mut negative = false;
    for (join, k, m) in terms {
        let m = match k {
            Some(k) => scale(m, &k, &mut steps)?,
            None => m,
        };
        match (join, current.take()) {
            (Join::Product, Some(c)) => current = Some(product(&c, &m, &mut steps)?),
            (_, previous) => {
                if let Some(c) = previous {
                    total = Some(close(total, c, negative, &mut steps)?);
                }
                negative = join == Join::Sub;
                current = Some(m);
            }
        }
    }
    close(total, current?, negative, &mut steps)
}

/// `total + term` (or `- term`).
fn close(total: Option<Matrix>, term: Matrix, negative: bool, steps: &mut usize) -> Option<Matrix> {
    let term = if negative {
        term.into_iter()
            .map(|r| r.into_iter().map(Rational::neg).collect())
            .collect()
    } else {
        term
    };
    match total {
        None => Some(term),
        Some(t) => add(t, term, steps),
    }
}

/// The expression that starts at matrix `j`, if it is one to evaluate: the matrix after
/// its last, how much of the text before it stays (a scalar before it is part of it), and
/// its value.
fn expression(p: &Pieces<'_>, j: usize, number: Number<'_>) -> Option<(usize, usize, Matrix)> {
    let (keep, k) = lead(p.text[j], number)?;
    let mut end = j + 1;
    let mut joins = Vec::new();
    while end < p.matrices.len() {
        let Some(c) = connector(p.text[end], number) else {
            break;
        };
        joins.push(c);
        end += 1;
    }
    if joins.is_empty() && k.is_none() || !trail(p.text[end]) {
        return None;
    }
    let mut terms = vec![(Join::Product, k, parse(&p.matrices[j], number)?)];
    for (i, (join, k)) in joins.into_iter().enumerate() {
        terms.push((join, k, parse(&p.matrices[j + 1 + i], number)?));
    }
    Some((end, keep, evaluate(terms)?))
}

/// The pieces with every expression of matrices replaced by its value, in the same layout
/// (`text.len() == matrices.len() + 1`); `number` reads each entry and scalar.
pub(crate) fn fold(p: Pieces<'_>, number: Number<'_>) -> (Vec<String>, Vec<Vec<Vec<String>>>) {
    let mut text = vec![p.text[0].to_string()];
    let mut matrices = Vec::with_capacity(p.matrices.len());
    let mut j = 0;
    while j < p.matrices.len() {
        if let Some((end, keep, value)) = expression(&p, j, number) {
            if let Some(t) = text.last_mut() {
                t.truncate(keep);
            }
            matrices.push(
                value
                    .iter()
                    .map(|r| r.iter().map(ToString::to_string).collect())
                    .collect(),
            );
            text.push(p.text[end].to_string());
            j = end;
        } else {
            matrices.push(p.matrices[j].clone());
            text.push(p.text[j + 1].to_string());
            j += 1;
        }
    }
    (text, matrices)
}

/// A matrix's rows as a tuple of tuples; one row or one column as one flat tuple.
pub(crate) fn tuples(rows: &[Vec<String>]) -> String {
    let tuple = |cells: &[String]| format!("({})", cells.join(","));
    if rows.len() == 1 {
        tuple(&rows[0])
    } else if rows.iter().all(|r| r.len() == 1) {
        tuple(&rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>())
    } else {
        let inner: Vec<String> = rows.iter().map(|r| tuple(r)).collect();
        format!("({})", inner.join(","))
    }
}
