//! The program a response writes.
//!
//! In order: the last fenced block labelled Python (```` ```python ````, `py`, `python3`);
//! else the last fenced block without a label; else, when the response has no fence at
//! all, the whole response if a line of it starts a Python statement (`def`, `class`,
//! `import`, `from`, `return`, `print(`, ...): a model trained to answer with bare code,
//! and HumanEval-style completions that continue the prompt's function. Prose alone is no
//! program. A block left open at the end (the
//! response was cut off) counts, up to the end. A response whose fences are all labelled
//! with another language, or that is blank, has no program.

/// The fenced blocks of `text`, each as its label (the info string's first word,
/// lower-cased) and its body less the fence's own indentation; and whether any fence was
/// seen.
fn fenced_blocks(text: &str) -> (Vec<(String, String)>, bool) {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String, usize)> = None;
    let mut any_fence = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(info) = trimmed.strip_prefix("```") {
            any_fence = true;
            match open.take() {
                Some((label, body, _)) => blocks.push((label, body)),
                None => {
                    let label = info.split_whitespace().next().unwrap_or("");
                    open = Some((label.to_lowercase(), String::new(), indent));
                }
            }
        } else if let Some((_, body, fence_indent)) = open.as_mut() {
            // A block indented under a list item: its lines lose the fence's indentation.
            let cut = line.len() - line.trim_start_matches(' ').len();
            body.push_str(&line[cut.min(*fence_indent)..]);
        }
    }
    blocks.extend(open.map(|(label, body, _)| (label, body)));
    (blocks, any_fence)
}

/// Whether a line starts a Python statement (what tells bare code from prose).
fn looks_like_code(text: &str) -> bool {
    const STARTS: [&str; 12] = [
        "def ",
        "class ",
        "import ",
        "from ",
        "return ",
        "print(",
        "for ",
        "while ",
        "if ",
        "async def ",
        "@",
        "lambda ",
    ];
    text.lines()
        .any(|l| STARTS.iter().any(|s| l.trim_start().starts_with(s)))
}

/// The program in `response`, or `None` (see the module docs for the order).
pub fn program(response: &str) -> Option<String> {
    let (blocks, any_fence) = fenced_blocks(response);
    let python = |l: &str| matches!(l, "python" | "py" | "python3");
    let found = blocks
        .iter()
        .rev()
        .find(|(l, _)| python(l))
        .or_else(|| blocks.iter().rev().find(|(l, _)| l.is_empty()))
        .map(|(_, body)| body.clone());
    let program = match found {
        Some(p) => p,
        None if !any_fence && looks_like_code(response) => response.to_string(),
        None => return None,
    };
    (!program.trim().is_empty()).then_some(program)
}

#[cfg(test)]
mod tests {
    use super::program;

    #[test]
    fn the_last_python_block_wins() {
        let r = "Try:\n```python\ndef f(): return 1\n```\nBetter:\n```py\ndef f(): return 2\n```\nDone.";
        assert_eq!(program(r).as_deref(), Some("def f(): return 2\n"));
        // A Python block beats a later unlabelled one; an unlabelled one beats none.
        let r = "```python\nx = 1\n```\n```\noutput: 1\n```";
        assert_eq!(program(r).as_deref(), Some("x = 1\n"));
        assert_eq!(program("```\nprint(3)\n```").as_deref(), Some("print(3)\n"));
    }

    #[test]
    fn fallbacks_and_refusals() {
        // No fence: the whole response.
        assert_eq!(
            program("def f(x): return x").as_deref(),
            Some("def f(x): return x")
        );
        // Cut off inside a block: up to the end.
        assert_eq!(
            program("```python\nwhile True:\n    pa").as_deref(),
            Some("while True:\n    pa")
        );
        // Only other languages, or nothing: no program.
        assert_eq!(program("```cpp\nint main(){}\n```"), None);
        assert_eq!(program("   \n"), None);
        assert_eq!(program("I cannot solve this."), None);
        assert_eq!(
            program("    return x + y\n").as_deref(),
            Some("    return x + y\n")
        );
        assert_eq!(program("```python\n\n```"), None);
        // Indented fences (inside a list) count; the label is case-insensitive.
        assert_eq!(
            program("1. code:\n   ```Python\n   print(1)\n   ```").as_deref(),
            Some("print(1)\n")
        );
    }
}
