//! Answers that are relations rather than values: inequalities as the intervals they
//! describe, `±` as the pair it stands for, and equations equal up to their sides and a
//! non-zero factor. All work on normalised strings (no spaces; `<=`, `>=`, `oo`).

use crate::expr;

/// What the answer names on the left of `=` or inside an inequality: names (letters,
/// commands), digits only in a subscript or a function's argument, and `(),_{}\'+-*:`
/// between them — `x`, `x_1`, `f(x)`, `g(3)`, `(p,q)`, `a+b`, `V_1:V_2` — but not `2x` or `x+1`,
/// whose number makes the right side something else than the answer.
pub fn label(l: &str) -> bool {
    let first_ok = l.starts_with(|c: char| c.is_ascii_alphabetic() || c == '(' || c == '\\');
    let (mut after_underscore, mut depth, mut after_name) = (false, 0i32, false);
    let chars_ok = l.chars().all(|c| {
        let in_argument = depth > 0 && after_name;
        let ok = c.is_ascii_alphabetic()
            || "(),_{}\\'+-*:".contains(c)
            || (c.is_ascii_digit() && (after_underscore || in_argument));
        match c {
            '(' => {
                depth += 1;
            }
            ')' => depth -= 1,
            _ => {}
        }
        if c == '(' {
            // An argument list follows a name: `f(`, not a tuple's `(`.
        } else if depth == 0 {
            after_name = c.is_ascii_alphabetic();
        }
        after_underscore = c == '_' || (after_underscore && (c.is_ascii_digit() || c == '{'));
        ok
    });
    first_ok && chars_ok && l.len() <= 16 && l.chars().any(|c| c.is_ascii_alphabetic())
}

#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    Less { closed: bool },
    Greater { closed: bool },
}

impl Cmp {
    /// The comparison read the other way round (`a < b` is `b > a`; `-x < b` is `x > -b`).
    fn flipped(self) -> Cmp {
        match self {
            Cmp::Less { closed } => Cmp::Greater { closed },
            Cmp::Greater { closed } => Cmp::Less { closed },
        }
    }
}

/// Splits `a<b<=c` into sides and comparisons; None without one or with `!=`.
fn chain(s: &str) -> Option<(Vec<&str>, Vec<Cmp>)> {
    if s.contains("!=") || s.contains('=') && !s.contains("<=") && !s.contains(">=") {
        return None;
    }
    let (mut sides, mut ops) = (Vec::new(), Vec::new());
    let (bytes, mut start, mut i) = (s.as_bytes(), 0, 0);
    while i < bytes.len() {
        let op = match bytes[i] {
            b'<' => Some(Cmp::Less {
                closed: bytes.get(i + 1) == Some(&b'='),
            }),
            b'>' => Some(Cmp::Greater {
                closed: bytes.get(i + 1) == Some(&b'='),
            }),
            _ => None,
        };
        if let Some(op) = op {
            sides.push(&s[start..i]);
            ops.push(op);
            i += if matches!(
                op,
                Cmp::Less { closed: true } | Cmp::Greater { closed: true }
            ) {
                2
            } else {
                1
            };
            start = i;
        } else {
            i += 1;
        }
    }
    sides.push(&s[start..]);
    (!ops.is_empty() && sides.iter().all(|x| !x.is_empty())).then_some((sides, ops))
}

fn bounds(lo: (&str, bool), hi: (&str, bool)) -> String {
    let open = if lo.1 { '[' } else { '(' };
    let close = if hi.1 { ']' } else { ')' };
    format!("{open}{},{}{close}", lo.0, hi.0)
}

/// `-793<a<10` -> `(-793,10)`, `2<=x<5` -> `[2,5)`, `x<=3` -> `(-oo,3]`, `x>1` ->
/// `(1,oo)`, `5>x>=1` -> `[1,5)`, `-x>-1` -> `(-oo,1)`, `|z|>2` -> `(-oo,-2)\cup(2,oo)`,
/// `|x|<=3` -> `[-3,3]`; None for anything else.
pub fn interval(s: &str) -> Option<String> {
    let (sides, ops) = chain(s)?;
    let less = |o: Cmp| matches!(o, Cmp::Less { .. });
    let closed = |o: Cmp| {
        matches!(
            o,
            Cmp::Less { closed: true } | Cmp::Greater { closed: true }
        )
    };
    let one_side = |x: &str, o: Cmp, b: &str| -> Option<String> {
        if let Some(v) = x.strip_prefix('|').and_then(|r| r.strip_suffix('|')) {
            if !label(v) || b.starts_with('-') {
                return None;
            }
            let nb = negate(b);
            return Some(if less(o) {
                bounds((&nb, closed(o)), (b, closed(o)))
            } else {
                format!(
                    "{}\\cup{}",
                    bounds(("-oo", false), (&nb, closed(o))),
                    bounds((b, closed(o)), ("oo", false))
                )
            });
        }
        label(x).then(|| {
            if less(o) {
                bounds(("-oo", false), (b, closed(o)))
            } else {
                bounds((b, closed(o)), ("oo", false))
            }
        })
    };
    // One side and a bound, the side first: `x < b` (a bound first flips the comparison).
    let one = |x: &str, o: Cmp, b: &str| -> Option<String> {
        if let Some(v) = x.strip_prefix('-').filter(|v| label(v)) {
            return one_side(v, o.flipped(), &negate(b));
        }
        one_side(x, o, b)
    };
    match (sides.as_slice(), ops.as_slice()) {
        ([a, x, b], [o1, o2]) if label(x) && less(*o1) == less(*o2) => Some(if less(*o1) {
            bounds((a, closed(*o1)), (b, closed(*o2)))
        } else {
            bounds((b, closed(*o2)), (a, closed(*o1)))
        }),
        ([x, b], [o]) if !is_bound(x) => one(x, *o, b),
        ([b, x], [o]) if !is_bound(x) => one(x, o.flipped(), b),
        _ => None,
    }
}

/// A side that is a bound, not what is bounded: a number or a constant expression.
fn is_bound(s: &str) -> bool {
    s.strip_prefix('-')
        .unwrap_or(s)
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// `-b` as written: `2` -> `-2`, `-2` -> `2`.
fn negate(b: &str) -> String {
    match b.strip_prefix('-') {
        Some(r) => r.to_string(),
        None => format!("-{b}"),
    }
}

/// `1\pm\sqrt{2}` -> `{1+\sqrt{2},1-\sqrt{2}}` (one `\pm` only).
pub fn plus_minus(s: &str) -> Option<String> {
    (s.matches("\\pm").count() == 1)
        .then(|| format!("{{{},{}}}", s.replace("\\pm", "+"), s.replace("\\pm", "-")))
}

/// Two equations are the same when `left - right` of one is a non-zero constant times
/// that of the other at every evaluation point (`y=2x+1`, `2x+1=y`, `2y=4x+2`).
pub fn same_equation(p: &str, g: &str) -> bool {
    let diff = |s: &str| -> Option<[f64; 3]> {
        let (l, r) = s.split_once('=')?;
        if r.contains('=') || l.is_empty() || r.is_empty() {
            return None;
        }
        expr::evaluate(&format!("({l})-({r})"))
    };
    let (Some(a), Some(b)) = (diff(p), diff(g)) else {
        return false;
    };
    let scale = a
        .iter()
        .chain(&b)
        .fold(0f64, |m, x| m.max(x.abs()))
        .max(1.0);
    if a.iter().all(|x| x.abs() <= 1e-9 * scale) || b.iter().all(|x| x.abs() <= 1e-9 * scale) {
        return false;
    }
    // The factor from the point where b is largest, checked at every point.
    let Some(k) = (0..3)
        .max_by(|&i, &j| b[i].abs().total_cmp(&b[j].abs()))
        .map(|i| a[i] / b[i])
    else {
        return false;
    };
    k.is_finite()
        && k != 0.0
        && a.iter()
            .zip(&b)
            .all(|(x, y)| (x - k * y).abs() <= 1e-8 * x.abs().max((k * y).abs()).max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inequalities_become_intervals() {
        assert_eq!(interval("-793<a<10").as_deref(), Some("(-793,10)"));
        assert_eq!(interval("2<=x<5").as_deref(), Some("[2,5)"));
        assert_eq!(interval("x<=3").as_deref(), Some("(-oo,3]"));
        assert_eq!(interval("x>1").as_deref(), Some("(1,oo)"));
        assert_eq!(interval("5>x>=1").as_deref(), Some("[1,5)"));
        assert_eq!(interval("3>=x").as_deref(), Some("(-oo,3]"));
        assert_eq!(interval("1<x>3"), None);
        assert_eq!(interval("-x>-1").as_deref(), Some("(-oo,1)"));
        assert_eq!(interval("-x<=2").as_deref(), Some("[-2,oo)"));
        assert_eq!(interval("|z|>2").as_deref(), Some("(-oo,-2)\\cup(2,oo)"));
        assert_eq!(interval("|x|<=3").as_deref(), Some("[-3,3]"));
        assert_eq!(interval("2>|x|").as_deref(), Some("(-2,2)"));
        assert_eq!(interval("|x|<-1"), None);
        assert_eq!(interval("2x<4"), None);
        assert_eq!(interval("(1,2)"), None);
    }

    #[test]
    fn equations_up_to_sides_and_factor() {
        assert!(same_equation("y=2x+1", "2x+1=y"));
        assert!(same_equation("2y=4x+2", "y=2x+1"));
        assert!(!same_equation("y=2x-1", "y=2x+1"));
        assert!(!same_equation("0=0", "x=x"));
        assert!(plus_minus("1\\pm\\sqrt{2}").is_some_and(|s| s == "{1+\\sqrt{2},1-\\sqrt{2}}"));
    }
}
