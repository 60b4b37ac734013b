//! LaTeX normalisation: a canonical spelling of an answer, before any parsing.

/// Replaces `\cmd{x}` by `x` (content kept) for text-like commands.
fn unwrap_command(s: &str, cmd: &str, drop_units: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find(cmd) {
        let after = &rest[pos + cmd.len()..];
        if !after.starts_with('{') {
            out.push_str(&rest[..pos + cmd.len()]);
            rest = after;
            continue;
        }
        let mut depth = 0;
        let mut end = None;
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            out.push_str(rest);
            return out;
        };
        let inner = &after[1..end];
        let before = &rest[..pos];
        out.push_str(before);
        // "x = 2 \text{ or } x = 3": the connective separates answers.
        if matches!(inner.trim(), "or" | "and") {
            out.push(',');
            rest = &after[end + 1..];
            continue;
        }
        // A word after a number is a unit ("5 \text{ cm}"): drop it.
        let is_unit = drop_units
            && !out.trim().is_empty()
            && out
                .trim_end()
                .ends_with(|c: char| c.is_ascii_digit() || c == '}')
            && inner
                .trim()
                .chars()
                .all(|c| c.is_alphabetic() || c == ' ' || c == '^')
            && !inner.trim().is_empty();
        rest = &after[end + 1..];
        if is_unit {
            // "8 \text{ cm}^3": the unit's exponent goes with it.
            for power in ["^2", "^3", "^{2}", "^{3}"] {
                if let Some(r) = rest.strip_prefix(power) {
                    rest = r;
                    break;
                }
            }
        } else {
            out.push_str(inner);
        }
    }
    out.push_str(rest);
    out
}

/// `\frac12` -> `\frac{1}{2}`, `\sqrt2` -> `\sqrt{2}`.
fn brace_short_args(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 6)].iter().collect();
        let (cmd, nargs) = if rest.starts_with("\\frac") {
            ("\\frac", 2)
        } else if rest.starts_with("\\sqrt") {
            ("\\sqrt", 1)
        } else {
            out.push(chars[i]);
            i += 1;
            continue;
        };
        out.push_str(cmd);
        i += cmd.len();
        for _ in 0..nargs {
            match chars.get(i) {
                Some('{') | Some('[') | None => break,
                Some(c) if c.is_ascii_alphanumeric() => {
                    out.push('{');
                    out.push(*c);
                    out.push('}');
                    i += 1;
                }
                _ => break,
            }
        }
    }
    out
}

fn strip_thousands(s: &str) -> String {
    // Only when the whole answer is a number written with groups of three.
    let t = s.trim_start_matches('-');
    let int_part = t.split('.').next().unwrap_or("");
    let groups: Vec<&str> = int_part.split(',').collect();
    let ok = groups.len() > 1
        && !groups[0].is_empty()
        && groups[0].len() <= 3
        // A number never starts with a 0 before its thousands: `0,111` is not 111.
        && !groups[0].starts_with('0')
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_digit()))
        && groups[1..].iter().all(|g| g.len() == 3)
        && t[int_part.len()..]
            .trim_start_matches('.')
            .chars()
            .all(|c| c.is_ascii_digit());
    if ok {
        s.replace(',', "")
    } else {
        s.to_string()
    }
}

/// Matrix environments (`pmatrix`, `bmatrix`, `matrix`, `array`) as nested tuples: rows
/// split at `\\`, cells at `&`; one row or one column is a flat tuple, so entries compare
/// element-wise as any tuple does. A pair of brackets right around it is dropped (the
/// array's `\left( ... \right)`). Sums, scalar multiples and products of matrices with
/// numeric entries are evaluated first ([`crate::matrix`]).
fn matrices(s: &str) -> String {
    const ENVS: [&str; 4] = ["pmatrix", "bmatrix", "matrix", "array"];
    let mut text = Vec::new();
    let mut cells = Vec::new();
    // The text before the matrix being read starts here.
    let mut from = 0;
    let mut at = 0;
    while let Some(found) = s[at..].find("\\begin{") {
        let pos = at + found;
        let after = &s[pos + 6..];
        let Some(env) = ENVS.iter().find(|e| after.starts_with(&format!("{{{e}}}"))) else {
            at = pos + 6;
            continue;
        };
        let end_tag = format!("\\end{{{env}}}");
        let body_start = pos + 6 + env.len() + 2;
        let Some(end) = s[body_start..].find(&end_tag) else {
            break;
        };
        let mut body = &s[body_start..body_start + end];
        // array's column spec: `{cc}`.
        if *env == "array" && body.starts_with('{') {
            body = body.find('}').map_or(body, |i| &body[i + 1..]);
        }
        let rows: Vec<Vec<String>> = body
            .split("\\\\")
            .map(|r| {
                r.split('&')
                    .map(|c| c.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .filter(|r| r.iter().any(|c| !c.is_empty()))
            .collect();
        let mut before = &s[from..pos];
        let mut next = body_start + end + end_tag.len();
        let (b, a) = (before.trim_end(), s[next..].trim_start());
        let a = a.strip_prefix("\\right").unwrap_or(a);
        if (b.ends_with('(') && a.starts_with(')')) || (b.ends_with('[') && a.starts_with(']')) {
            let b = &b[..b.len() - 1];
            before = b.strip_suffix("\\left").unwrap_or(b);
            next = s.len() - a.len() + 1;
        }
        text.push(before);
        cells.push(rows);
        from = next;
        at = next;
    }
    text.push(&s[from..]);
    let number = |c: &str| crate::number::Rational::parse(&normalize(c));
    let (text, cells) = crate::matrix::fold(
        crate::matrix::Pieces {
            text,
            matrices: cells,
        },
        &number,
    );
    let mut out = String::with_capacity(s.len());
    for (t, rows) in text.iter().zip(&cells) {
        out.push_str(t);
        out.push_str(&crate::matrix::tuples(rows));
    }
    if let Some(last) = text.last() {
        out.push_str(last);
    }
    out
}

/// `1000,99` -> `1000.99`: a comma is a decimal comma only where it cannot group
/// thousands (four or more digits before it, one or two after) and nothing else is there.
fn decimal_comma(s: &str) -> Option<String> {
    let (int, frac) = s.split_once(',')?;
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    let int_digits = int.trim_start_matches('-');
    (digits(int_digits) && int_digits.len() >= 4 && digits(frac) && frac.len() <= 2)
        .then(|| format!("{int}.{frac}"))
}

/// `1#000#000` (digit groups marked apart by spaces) as `1000000` when every group after
/// the first has three digits and the first one to three.
fn space_thousands(t: &str) -> Option<String> {
    let body = t.strip_prefix('-').unwrap_or(t);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let groups: Vec<&str> = int.split('#').collect();
    let digits = |g: &str| !g.is_empty() && g.chars().all(|c| c.is_ascii_digit());
    let ok = groups.len() >= 2
        && groups.iter().all(|g| digits(g))
        && groups[0].len() <= 3
        && groups[1..].iter().all(|g| g.len() == 3)
        && frac.chars().all(|c| c.is_ascii_digit());
    ok.then(|| t.replace('#', ""))
}

/// Units written after a number without `\text{}` (spaces are gone): `12m²`, `5km`.
/// Single letters other than `m` are left alone (`5s` may be an expression).
const UNITS: [&str; 24] = [
    "km/h", "m/s", "cm²", "cm³", "mm²", "mm³", "km²", "km³", "m²", "m³", "cm^2", "cm^3", "m^2",
    "m^3", "km", "cm", "mm", "kg", "mg", "ml", "mL", "min", "sec", "m",
];

/// A number followed by one of [`UNITS`]: the number.
fn strip_unit(t: &str) -> Option<String> {
    UNITS.iter().find_map(|u| {
        let n = t.strip_suffix(u)?;
        let body = n.strip_prefix('-').unwrap_or(n);
        (!body.is_empty()
            && body.starts_with(|c: char| c.is_ascii_digit())
            && body
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '/')))
        .then(|| n.to_string())
    })
}

/// A number followed by a word of three or more letters (spaces are gone: `125miles`,
/// a gold written `$125$ miles`): the number, as `125\text{ miles}` is. Shorter letters
/// stay (`5s`, `2x` may be expressions).
fn unit_word(t: &str) -> Option<String> {
    let split = t.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, word) = t.split_at(split);
    let body = n.strip_prefix('-').unwrap_or(n);
    (word.len() >= 3
        && word.chars().all(|c| c.is_ascii_alphabetic())
        && body.starts_with(|c: char| c.is_ascii_digit())
        && body.chars().all(|c| c.is_ascii_digit() || c == '.'))
    .then(|| n.to_string())
}

/// `\ne` as `!=` where it is the whole command (not the start of `\neg`, `\nearrow`).
fn not_equal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find("\\ne") {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 3..];
        if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            out.push_str("\\ne");
        } else {
            out.push_str("!=");
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Canonical spelling of an answer: no delimiters, spacing, units, degrees, percent,
/// dollar signs, thousands separators or trailing punctuation; `\dfrac`/`\tfrac` as
/// `\frac`; no spaces.
pub fn normalize(s: &str) -> String {
    let s = crate::extract::unescape_doubled(s);
    // "x = 1/3 \approx 0.33": the exact part is the answer.
    let s = match s.find("\\approx").or_else(|| s.find('≈')) {
        Some(pos) if pos > 0 => &s[..pos],
        _ => &s[..],
    };
    let mut t = s.trim().to_string();
    // Before the spacing commands go: `\\ ` separates matrix rows.
    if t.contains("\\begin{") {
        t = matrices(&t);
    }
    if t.contains("\\ne") {
        t = not_equal(&t);
    }
    for (from, to) in [
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\cfrac", "\\frac"),
        // A thousands separator kept from spacing: `14{,}916`.
        ("{,}", ","),
        ("\\mathrm{e}", "e"),
        ("\\left", ""),
        ("\\right", ""),
        ("\\displaystyle", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\:", ""),
        ("\\qquad", ""),
        ("\\quad", ""),
        ("\\ ", ""),
        ("~", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\circ", ""),
        ("\\degree", ""),
        ("°", ""),
        ("\\%", ""),
        ("%", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\(", ""),
        ("\\)", ""),
        ("\\[", ""),
        ("\\]", ""),
        ("\\cdot", "*"),
        ("\\times", "*"),
        ("\\div", "/"),
        // Longest commands first: `\le` must not eat the start of `\leq`.
        ("\\leqslant", "<="),
        ("\\geqslant", ">="),
        ("\\leq", "<="),
        ("\\geq", ">="),
        ("\\neq", "!="),
        ("\\le", "<="),
        ("\\ge", ">="),
        ("\\lt", "<"),
        ("\\gt", ">"),
        ("−", "-"),
        ("≤", "<="),
        ("≥", ">="),
        ("≠", "!="),
        ("×", "*"),
        ("·", "*"),
        ("÷", "/"),
        ("∞", "oo"),
        ("π", "\\pi"),
        ("∪", "\\cup"),
        ("√", "\\sqrt"),
        // Currency signs around a number.
        ("€", ""),
        ("£", ""),
        ("¥", ""),
        ("₹", ""),
        ("\\euro", ""),
        ("\\pounds", ""),
        ("\\infty", "oo"),
        // The empty set's two LaTeX spellings and its symbol.
        ("\\varnothing", "\\emptyset"),
        ("∅", "\\emptyset"),
        ("\\lbrace", "{"),
        ("\\rbrace", "}"),
        ("\\{", "{"),
        ("\\}", "}"),
    ] {
        if t.contains(from) {
            t = t.replace(from, to);
        }
    }
    for cmd in [
        "\\textbf",
        "\\mathbf",
        "\\mathrm",
        "\\textrm",
        "\\textnormal",
        "\\textit",
        "\\mathit",
        "\\mbox",
        "\\text",
    ] {
        if t.contains(cmd) {
            t = unwrap_command(&t, cmd, true);
        }
    }
    // "2 or 3", "x = 1 and x = 4": answers joined by a connective, as a list.
    for connective in [" or ", " and "] {
        if t.contains(connective) {
            t = t.replace(connective, ",");
        }
    }
    // A comma followed by a space separates items ("32, 349"), never digit groups.
    let spaced_comma = t
        .char_indices()
        .any(|(i, c)| c == ',' && t[i + 1..].starts_with(char::is_whitespace));
    // Digits separated only by spaces are not one number ("1 3" is not 13): keep a mark.
    let chars: Vec<char> = t.chars().collect();
    let mut spaced = String::with_capacity(t.len());
    for (i, &c) in chars.iter().enumerate() {
        if c.is_whitespace() {
            let prev = chars[..i].iter().rev().find(|c| !c.is_whitespace());
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if prev.is_some_and(char::is_ascii_digit)
                && next.is_some_and(char::is_ascii_digit)
                && !spaced.ends_with('#')
            {
                spaced.push('#');
            }
        } else {
            spaced.push(c);
        }
    }
    let mut t = spaced;
    // "x \in [1, 2]" -> "[1, 2]".
    if let Some(pos) = t.find("\\in") {
        if !t[pos + 3..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            t = t[pos + 3..].to_string();
        }
    }
    let t = t.trim_end_matches(['.', ',', ';']).to_string();
    // "(1; 2)": a semicolon separates items as a comma does.
    let t = t.replace(';', ",");
    // "1 000 000": digit groups of three apart are one number (not "1 3").
    let t = space_thousands(&t).unwrap_or(t);
    // "28 percent", "28 pct" (spaces are gone by now): the word after a number.
    let t = ["percentagepoints", "percentage", "percent", "pct"]
        .iter()
        .find_map(|w| {
            t.strip_suffix(w)
                .filter(|n| n.ends_with(|c: char| c.is_ascii_digit()))
                .map(str::to_string)
        })
        .unwrap_or(t);
    let t = strip_unit(&t).unwrap_or(t);
    let t = unit_word(&t).unwrap_or(t);
    let t = brace_short_args(&t);
    let t = if spaced_comma {
        t
    } else {
        decimal_comma(&t).unwrap_or_else(|| strip_thousands(&t))
    };
    // "\text{(B)}" -> "(B)"; a lone capital letter compares case-insensitively.
    if t.len() <= 3 && t.chars().any(|c| c.is_ascii_uppercase()) {
        let inner = t.trim_matches(|c| c == '(' || c == ')');
        if inner.len() == 1 {
            return inner.to_ascii_lowercase();
        }
    }
    t
}
