//! Answer extraction from a model response.

use crate::ending::{last_math, last_number, sentence_number};
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
