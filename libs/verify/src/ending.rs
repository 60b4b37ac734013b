//! The lenient fallbacks that read how a response ends: the number it ends with, and the
//! final sentence's last math or prose number before a short, unhedged close.

/// The byte after the last ASCII digit of `s`.
fn after_last_digit(s: &str) -> Option<usize> {
    s.rfind(|c: char| c.is_ascii_digit()).map(|i| i + 1)
}

/// LaTeX commands whose argument a number after them is: `\sqrt 2` is not 2.
const OPERATORS: [&str; 20] = [
    "\\sqrt", "\\frac", "\\dfrac", "\\tfrac", "\\cfrac", "\\cdot", "\\times", "\\div", "\\pm",
    "\\mp", "\\log", "\\ln", "\\lg", "\\exp", "\\sin", "\\cos", "\\tan", "\\cot", "\\sec", "\\csc",
];

/// Whether the number whose digits start at byte `start` of `s` is an operand of an
/// expression written before it (`1/2`, `2^2`, `\frac{1}{2}`, `10^{3}`, `x_2`, `3 - 2`,
/// `3-2`, `\sqrt 2`), so that it is not the answer alone. A sign after a space, `=` or
/// `:` is the number's own (`is -2`, `x = -2`).
fn operand(s: &str, start: usize) -> bool {
    let mut before = &s[..start];
    if let Some(rest) = before.strip_suffix('-') {
        // Straight after a digit, a letter or a closing bracket, a minus subtracts.
        if rest.ends_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, ')' | '}' | ']')) {
            return true;
        }
        before = rest;
    }
    let before = before.trim_end();
    // The second term of a ratio: `3:2`, `3 : 2` (not `Answer: 2`).
    if before
        .strip_suffix(':')
        .is_some_and(|r| r.trim_end().ends_with(|c: char| c.is_ascii_digit()))
    {
        return true;
    }
    let command = |text: &str| {
        let last = text
            .rsplit(|c: char| c.is_whitespace() || c == '$')
            .next()
            .unwrap_or("");
        OPERATORS.contains(&last)
    };
    // A group is an operand after `^`, `_`, another group (`\frac{1}{2}`) or an operator
    // (`\sqrt{2}`); after `\textbf` or `\text` it is the number written bold or as text.
    if let Some(open) = before.strip_suffix('{') {
        return open.ends_with(['^', '_', '}']) || command(open);
    }
    before.ends_with(['/', '^', '_', '+', '-', '×', '÷', '·']) || command(before)
}

/// The number a response ends with (only `.`, `$`, `*`, `)` and spaces after it), as
/// math-verify's last-expression fallback: "we obtain 42." counts, "it might be 13, but I
/// am not sure." does not, and neither does the last operand of an expression.
pub(crate) fn last_number(s: &str) -> Option<String> {
    // The sign-off of the MATH format ("... I hope it is correct.") is not the ending.
    let s = without_sign_off(s);
    let s = s.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '.' | '$' | '*' | ')'));
    if !s.ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let bytes = s.as_bytes();
    let end = after_last_digit(s)?;
    let digits_from = |end: usize| {
        let mut start = end;
        while start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b'.') {
            start -= 1;
        }
        start
    };
    let mut start = digits_from(end);
    // A ratio ends with its second term; the answer is both (`3:2`, `3 : 2`).
    if let Some(colon) = s[..start].trim_end().strip_suffix(':') {
        let first_end = colon.trim_end().len();
        let first = digits_from(first_end);
        if first < first_end {
            start = first;
        }
    }
    if operand(s, start) {
        return None;
    }
    if start > 0 && bytes[start - 1] == b'-' {
        start -= 1;
    }
    Some(s[start..end].trim_start_matches('.').to_string())
}

const HOPE: &str = "I hope it is correct.";

/// The response without the MATH format's sign-off and trailing space.
fn without_sign_off(s: &str) -> &str {
    let t = s.trim_end();
    t.len()
        .checked_sub(HOPE.len())
        .filter(|&i| t.is_char_boundary(i) && t[i..].eq_ignore_ascii_case(HOPE))
        .map_or(t, |i| t[..i].trim_end())
}

/// The final sentence: the last non-empty line, from its last ". " (a decimal point is
/// followed by a digit, not a space).
fn final_sentence(s: &str) -> &str {
    let line = without_sign_off(s)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let from = [". ", "! ", "? "]
        .iter()
        .filter_map(|b| line.rfind(b).map(|i| i + b.len()))
        .max()
        .unwrap_or(0);
    &line[from..]
}

/// Whether `tail` (what follows an answer in its sentence) is a short close: at most
/// three words ("after tax", "in total", "is the solution"), no number, no comma (", but
/// I am not sure" hedges), no further math.
fn short_close(tail: &str) -> bool {
    let tail = tail.trim_end_matches(['.', '!', '*', ' ', ')']);
    !tail.contains(|c: char| c.is_ascii_digit() || c == ',' || c == '=')
        && tail.split_whitespace().count() <= 3
}

/// Words that make a sentence a trial, a supposition or a rejection rather than a
/// conclusion: "Checking $n = 12$ shows it fails.", "Maybe $x = 4$ works.", "Suppose the
/// total is 15 apples." Their numbers and math are not answers.
const HEDGES: [&str; 20] = [
    "maybe",
    "perhaps",
    "might",
    "could",
    "if",
    "suppose",
    "assume",
    "check",
    "checking",
    "try",
    "trying",
    "test",
    "testing",
    "not",
    "no",
    "fails",
    "wrong",
    "incorrect",
    "never",
    "impossible",
];

/// Whether a sentence hedges (see [`HEDGES`]).
fn hedged(sentence: &str) -> bool {
    sentence
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| HEDGES.contains(&w.to_ascii_lowercase().as_str()))
}

/// The last inline math (`$...$` or `\(...\)`) of the final sentence, when only a short
/// close follows it and it does not hedge: "Therefore $x \geq 5$ is the solution.", "The
/// matrix is $\begin{bmatrix}...\end{bmatrix}$."
pub(crate) fn last_math(s: &str) -> Option<String> {
    let sentence = final_sentence(s);
    if hedged(sentence) {
        return None;
    }
    let (math, tail) = if let Some(end) = sentence.rfind("\\)") {
        let start = sentence[..end].rfind("\\(")?;
        (&sentence[start + 2..end], &sentence[end + 2..])
    } else {
        let end = sentence.rfind('$')?;
        let before = sentence[..end].trim_end_matches('$');
        let start = before.rfind('$')?;
        (
            before[start + 1..].trim_start_matches('$'),
            &sentence[end + 1..],
        )
    };
    let math = math.trim();
    (!math.is_empty() && short_close(tail)).then(|| math.to_string())
}

/// The last number of the final sentence written as prose writes it — thousands
/// separators, a decimal comma, a currency sign or unit beside it (`1,000.99€`, `2,74 $`,
/// `€ 1.250,50`, `12 m²`) — when only a short close follows and it does not hedge. A
/// number with both marks whose last one is a comma is written the European way and read
/// as such (`1.250,50` = 1250.50).
pub(crate) fn sentence_number(s: &str) -> Option<String> {
    let sentence = final_sentence(s);
    if hedged(sentence) {
        return None;
    }
    let bytes = sentence.as_bytes();
    let end = after_last_digit(sentence)?;
    let mut start = end;
    while start > 0 {
        let c = bytes[start - 1];
        let mark_between_digits = matches!(c, b'.' | b',')
            && start >= 2
            && bytes[start - 2].is_ascii_digit()
            && bytes[start].is_ascii_digit();
        if c.is_ascii_digit() || mark_between_digits {
            start -= 1;
        } else {
            break;
        }
    }
    if operand(sentence, start) || !short_close(&sentence[end..].replace(['$', '€', '£', '%'], " "))
    {
        return None;
    }
    let number = &sentence[start..end];
    let negative = start > 0 && bytes[start - 1] == b'-';
    let european = number
        .rfind(',')
        .zip(number.rfind('.'))
        .is_some_and(|(c, d)| c > d);
    let number = if european {
        number.replace('.', "").replace(',', ".")
    } else {
        number.to_string()
    };
    Some(if negative {
        format!("-{number}")
    } else {
        number
    })
}
