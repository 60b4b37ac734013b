//! Answer extraction from a model response.

use crate::ExtractOptions;

type Finder = fn(&str) -> Option<String>;

/// An extracted answer and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extraction {
    pub answer: String,
    pub method: &'static str,
}

/// The content of the balanced `{...}` group starting at byte `open` (which must be `{`).
fn balanced(s: &str, open: usize) -> Option<&str> {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                // An escaped brace (\{ or \}) does not open or close a group.
                i += 2;
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[open + 1..i]);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The last complete `\boxed{...}` or `\fbox{...}`; a truncated last box is skipped.
fn last_box(s: &str) -> Option<String> {
    let mut end = s.len();
    while end > 0 {
        let hay = &s[..end];
        let pos = match (hay.rfind("\\boxed"), hay.rfind("\\fbox")) {
            (Some(a), Some(b)) => a.max(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        let rest = &s[pos..];
        let name_len = if rest.starts_with("\\boxed") { 6 } else { 5 };
        let after = &rest[name_len..];
        let trimmed = after.trim_start();
        let skipped = after.len() - trimmed.len();
        if trimmed.starts_with('{') {
            if let Some(inner) = balanced(s, pos + name_len + skipped) {
                return Some(inner.to_string());
            }
        } else if skipped > 0 {
            // `\boxed 5`: the answer runs to the next space or `$`.
            let ans: String = trimmed
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '$')
                .collect();
            if !ans.is_empty() {
                return Some(ans);
            }
        }
        end = pos;
    }
    None
}

/// Phrases that introduce a final answer, as written in responses: "The answer is 12",
/// "Final Answer: 12", "**Answer:** 12", "answer: $x = 3$", "**Answer**" above the math.
const ANSWER_PHRASES: [&str; 4] = ["the answer is", "final answer", "answer:", "**answer**"];

/// Where a chat model's turn ends: what follows is a turn it made up (or the template's
/// debris), not its answer to this prompt.
const TURN_ENDS: [&str; 6] = [
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "</s>",
];

/// The response up to the first end-of-turn marker.
fn this_turn(s: &str) -> &str {
    let end = TURN_ENDS
        .iter()
        .filter_map(|m| s.find(m))
        .min()
        .unwrap_or(s.len());
    &s[..end]
}

/// Commands whose backslash doubled shows JSON-escaped LaTeX (`\\boxed{\\frac{1}{2}}`).
const ESCAPED: [&str; 10] = [
    "\\\\boxed",
    "\\\\frac",
    "\\\\dfrac",
    "\\\\left",
    "\\\\sqrt",
    "\\\\text",
    "\\\\begin",
    "\\\\pi",
    "\\\\cdot",
    "\\\\infty",
];

/// Text whose LaTeX was escaped once more (every backslash doubled) as it was written:
/// when a doubled backslash starts a command, every doubled backslash is one (an escaped
/// matrix row break `\\\\` becomes `\\`).
pub(crate) fn unescape_doubled(s: &str) -> std::borrow::Cow<'_, str> {
    if ESCAPED.iter().any(|c| s.contains(c)) {
        std::borrow::Cow::Owned(s.replace("\\\\", "\\"))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Two or more complete boxes on the last line that has a box, joined as a list.
fn boxes_on_last_line(s: &str) -> Option<String> {
    let line = s.lines().rev().find(|l| l.contains("\\boxed"))?;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = line[from..].find("\\boxed{") {
        let open = from + pos + "\\boxed".len();
        let inner = balanced(line, open)?;
        found.push(inner.to_string());
        from = open + inner.len() + 2;
    }
    (found.len() >= 2).then(|| found.join(", "))
}

/// The answer after an answer phrase, or after an "Answer" heading directly above or
/// before display math (`Answer \[ 9 \]`, `Answer \( 9 \)`); when what the phrase
/// introduces is a sentence ("The largest value is 34"), its final number or math.
fn answer_is(s: &str) -> Option<String> {
    let ans = answer_phrase(s).or_else(|| answer_heading(s))?;
    if prose_words(&ans) < 2 {
        return Some(ans);
    }
    Some(
        last_math(&ans)
            .or_else(|| sentence_number(&ans))
            .unwrap_or(ans),
    )
}

/// Words of two or more ASCII letters: prose, as opposed to math.
fn prose_words(s: &str) -> usize {
    s.split_whitespace()
        .filter(|w| {
            let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            w.len() >= 2 && w.chars().all(|c| c.is_ascii_alphabetic())
        })
        .count()
}

/// `Answer` at the start of a line (after markdown `#` or `**`), an optional colon, then
/// display or inline math: the math. Not "the answer \( x \) satisfies": the heading
/// starts its line.
fn answer_heading(s: &str) -> Option<String> {
    // One pass over the lines, keeping where the last heading's math starts; its end is
    // searched once (linear in the response, like every finder here).
    let mut last = None;
    let mut offset = 0;
    for line in s.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let head = line.trim_start_matches(['#', '*', ' ']);
        if head.len() < 6 || !head.is_char_boundary(6) || !head[..6].eq_ignore_ascii_case("answer")
        {
            continue;
        }
        let from = start + (line.len() - head.len()) + 6;
        let rest = s[from..].trim_start_matches([':', '*', ' ', '\n', '\t']);
        let open = ["\\[", "\\(", "$$", "$"]
            .into_iter()
            .find(|o| rest.starts_with(o));
        if let Some(open) = open {
            last = Some((s.len() - rest.len() + open.len(), open));
        }
    }
    let (at, open) = last?;
    let close = match open {
        "\\[" => "\\]",
        "\\(" => "\\)",
        other => other,
    };
    let math = s[at..].split(close).next()?.trim();
    (!math.is_empty()).then(|| math.to_string())
}

/// The answer after the last answer phrase: the math between `$`s when it starts with
/// one, else the rest of its sentence; without markdown bold, a leading colon or "is",
/// and trailing punctuation.
fn answer_phrase(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let (pos, phrase) = ANSWER_PHRASES
        .iter()
        .filter_map(|p| lower.rfind(p).map(|i| (i, *p)))
        .max_by_key(|&(i, p)| (i + p.len(), p.len()))?;
    let rest = &s[pos + phrase.len()..];
    let mut ans = rest.lines().next()?.trim();
    // The answer on the lines below the phrase ("**Answer**" then display math).
    if ans.trim_matches([':', '*', ' ']).is_empty() {
        ans = rest.trim_start_matches([':', '*', ' ']).trim_start();
    }
    loop {
        let before = ans;
        ans = ans.trim_start_matches([':', '*', ' ']);
        if let Some(r) = ans.strip_prefix("is").filter(|r| r.starts_with([' ', ':'])) {
            ans = r;
        }
        if before == ans {
            break;
        }
    }
    let display = ans
        .strip_prefix("\\[")
        .map(|m| m.split("\\]").next().unwrap_or(m));
    let ans = match display {
        Some(math) => math.trim(),
        None => inline(ans),
    };
    let ans = ans.trim_end_matches(['.', '*', ' ', '$']).trim();
    (!ans.is_empty()).then(|| ans.to_string())
}

/// The answer text after a phrase: the math between `$`s or `\( \)` when it starts with
/// one, else the rest of its line up to the end of its sentence.
fn inline(ans: &str) -> &str {
    let ans = ans.lines().next().unwrap_or(ans);
    match ans.strip_prefix("\\(").or_else(|| ans.strip_prefix('$')) {
        Some(math) => {
            let math = math.trim_start_matches('$');
            let end = math
                .find(['$'])
                .or_else(|| math.find("\\)"))
                .unwrap_or(math.len());
            &math[..end]
        }
        // A sentence ends at ". " (a decimal point is followed by a digit).
        None => ans.split(". ").next().unwrap_or(ans),
    }
}

fn hashes(s: &str) -> Option<String> {
    let pos = s.rfind("####")?;
    let ans = s[pos + 4..].lines().next()?.trim();
    (!ans.is_empty()).then(|| ans.to_string())
}

/// The number a response ends with (only `.`, `$`, `*`, `)` and spaces after it), as
/// math-verify's last-expression fallback: "we obtain 42." counts, "it might be 13, but I
/// am not sure." does not.
fn last_number(s: &str) -> Option<String> {
    // The sign-off of the MATH format ("... I hope it is correct.") is not the ending.
    let s = without_sign_off(s);
    let s = s.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '.' | '$' | '*' | ')'));
    if !s.ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let bytes = s.as_bytes();
    let mut end = None;
    for i in (0..bytes.len()).rev() {
        if bytes[i].is_ascii_digit() {
            end = Some(i + 1);
            break;
        }
    }
    let end = end?;
    let mut start = end;
    while start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b'.') {
        start -= 1;
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
fn last_math(s: &str) -> Option<String> {
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
/// `€ 1.250,50`, `12 m²`) — when only a short close follows and it does not hedge. A number with both marks
/// whose last one is a comma is written the European way and read as such
/// (`1.250,50` = 1250.50).
fn sentence_number(s: &str) -> Option<String> {
    let sentence = final_sentence(s);
    if hedged(sentence) {
        return None;
    }
    let bytes = sentence.as_bytes();
    let mut end = None;
    for i in (0..bytes.len()).rev() {
        if bytes[i].is_ascii_digit() {
            end = Some(i + 1);
            break;
        }
    }
    let end = end?;
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
    if !short_close(&sentence[end..].replace(['$', '€', '£', '%'], " ")) {
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

/// Extracts the final answer. Strict by default: only a box counts, so an answer merely
/// mentioned in the text gets no credit. The fallbacks, when on, come in math-verify's
/// order: answer phrases, GSM8K's `####`, then the last number.
pub fn extract(response: &str, opts: &ExtractOptions) -> Option<Extraction> {
    let response = unescape_doubled(response);
    let response = this_turn(&response);
    if opts.joined_boxes {
        if let Some(a) = boxes_on_last_line(response) {
            return Some(Extraction {
                answer: a,
                method: "boxes",
            });
        }
    }
    if let Some(a) = last_box(response) {
        return Some(Extraction {
            answer: a,
            method: "boxed",
        });
    }
    // The last-number fallback reads the final sentence: the number it ends with, else
    // its last math or its last number before a short close.
    let tries: [(bool, Finder, &'static str); 5] = [
        (opts.answer_is, answer_is, "answer-is"),
        (opts.hashes, hashes, "hashes"),
        (opts.last_number, last_number, "last-number"),
        (opts.last_number, last_math, "last-math"),
        (opts.last_number, sentence_number, "sentence-number"),
    ];
    tries
        .into_iter()
        .filter(|(on, _, _)| *on)
        .find_map(|(_, f, m)| {
            f(response).map(|a| Extraction {
                answer: a,
                method: m,
            })
        })
}
