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

fn answer_is(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let pos = lower.rfind("the answer is")?;
    let rest = s[pos + "the answer is".len()..].trim_start_matches([':', ' ']);
    let line = rest.lines().next()?.trim();
    let ans = line.trim_end_matches('.').trim();
    (!ans.is_empty()).then(|| ans.to_string())
}

fn hashes(s: &str) -> Option<String> {
    let pos = s.rfind("####")?;
    let ans = s[pos + 4..].lines().next()?.trim();
    (!ans.is_empty()).then(|| ans.to_string())
}

fn last_number(s: &str) -> Option<String> {
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

/// Extracts the final answer. Strict by default: only a box counts, so an answer merely
/// mentioned in the text gets no credit.
pub fn extract(response: &str, opts: &ExtractOptions) -> Option<Extraction> {
    if let Some(a) = last_box(response) {
        return Some(Extraction {
            answer: a,
            method: "boxed",
        });
    }
    let tries: [(bool, Finder, &'static str); 3] = [
        (opts.answer_is, answer_is, "answer-is"),
        (opts.hashes, hashes, "hashes"),
        (opts.last_number, last_number, "last-number"),
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
