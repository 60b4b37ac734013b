//! Which tokens of a response to a built-in task cannot tell a correct answer from a wrong
//! one: the connective phrases of `tiny-steps` and `tiny-steps-varied`. The phrases are
//! written the same way in correct and wrong solutions (in `tiny-steps-varied` their
//! wording is drawn at random), so their tokens carry no information about correctness —
//! the tokens DelTA's premise says a sequence-level advantage credits by mistake. An
//! oracle coefficient estimator reads these labels to bound what any token reweighting
//! can gain on these tasks.

use crate::{Task, VARIED_PHRASES};

impl Task {
    /// Whether this task's responses have connective phrases to label
    /// ([`Task::connective_tokens`]).
    pub fn has_connectives(self) -> bool {
        match self {
            Task::Steps | Task::Varied => true,
            Task::Arith | Task::Code => false,
        }
    }

    /// For each token of a response, given as the text each token decodes to, whether it
    /// lies inside a connective phrase (any of [`VARIED_PHRASES`]' wordings, `tiny-steps`'
    /// included). The text is scanned left to right; at each position the longest wording
    /// that starts there is taken, so `and so the answer is` is one phrase, not a word
    /// and `so the answer is`. A token is labelled when every byte of its text is inside
    /// a phrase; tokens with no text (the end of sequence) are not. Responses that break
    /// the format are labelled wherever a wording occurs. `None` for tasks without
    /// connectives ([`Task::has_connectives`]).
    pub fn connective_tokens(self, pieces: &[&str]) -> Option<Vec<bool>> {
        if !self.has_connectives() {
            return None;
        }
        let text: String = pieces.concat();
        let mut wordings: Vec<&str> = VARIED_PHRASES.iter().flatten().copied().collect();
        wordings.sort_by_key(|w| std::cmp::Reverse(w.len()));
        // Byte ranges of `text` inside a phrase.
        let mut inside = vec![false; text.len()];
        let mut at = 0;
        while at < text.len() {
            match wordings.iter().find(|w| text[at..].starts_with(**w)) {
                Some(w) => {
                    inside[at..at + w.len()].fill(true);
                    at += w.len();
                }
                None => at += text[at..].chars().next().map_or(1, char::len_utf8),
            }
        }
        let mut start = 0;
        Some(
            pieces
                .iter()
                .map(|p| {
                    let span = &inside[start..start + p.len()];
                    start += p.len();
                    !span.is_empty() && span.iter().all(|&b| b)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{Problem, Task};

    /// Labels of a character-level response, as a string of `c` (connective) and `.`.
    fn marks(task: Task, text: &str) -> String {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let labels = task.connective_tokens(&pieces).unwrap_or_default();
        assert_eq!(labels.len(), pieces.len());
        labels.iter().map(|&c| if c { 'c' } else { '.' }).collect()
    }

    #[test]
    fn the_phrases_of_a_varied_solution_by_hand() {
        let p = Problem { a: 45, b: 7, c: 13 };
        let text = Task::Varied
            .phrased(&p, None, [1, 1, 1])
            .unwrap_or_default();
        assert_eq!(
            text,
            "to start 7*13=91. next 45+91=136. and so the answer is \\boxed{136}"
        );
        // "to start" (8) " 7*13=91. " (10) "next" (4) " 45+91=136. " (12)
        // "and so the answer is" (20) " \boxed{136}" (12).
        let (c, o) = (|n| "c".repeat(n), |n| ".".repeat(n));
        let want = [c(8), o(10), c(4), o(12), c(20), o(12)].concat();
        assert_eq!(marks(Task::Varied, &text), want);
        // tiny-steps' fixed phrases are labelled the same way.
        let steps = Task::Steps.solution(&p, None).unwrap_or_default();
        // "first" (5) " 7*13=91. " (10) "then" (4) " 45+91=136. " (12)
        // "so the answer is" (16) " \boxed{136}" (12).
        let want = [c(5), o(10), c(4), o(12), c(16), o(12)].concat();
        assert_eq!(marks(Task::Steps, &steps), want);
    }

    #[test]
    fn tokens_partly_inside_a_phrase_and_empty_tokens_are_not_labelled() {
        // Multi-character tokens: "first 7" straddles the phrase's end, "<eos>" decodes to
        // nothing.
        let pieces = ["fir", "st", " 7", "*2=14. ", "then", "", "x"];
        assert_eq!(
            Task::Varied.connective_tokens(&pieces),
            Some(vec![true, true, false, false, true, false, false])
        );
        // Broken format: a wording anywhere is labelled, other text is not.
        assert_eq!(marks(Task::Varied, "nextthen1"), "cccccccc.");
        assert_eq!(marks(Task::Varied, ""), "");
        assert_eq!(Task::Arith.connective_tokens(&["1"]), None);
        assert_eq!(Task::Code.connective_tokens(&["1"]), None);
    }
}
