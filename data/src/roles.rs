//! Which tokens of a response to a built-in task cannot tell a correct answer from a wrong
//! one: the connective phrases of `tiny-steps` and `tiny-steps-varied`. The phrases are
//! written the same way in correct and wrong solutions (in `tiny-steps-varied` their
//! wording is drawn at random), so their tokens carry no information about correctness —
//! the tokens DelTA's premise says a sequence-level advantage credits by mistake. An
//! oracle coefficient estimator reads these labels to bound what any token reweighting
//! can gain on these tasks.

use crate::{Problem, Task, VARIED_PHRASES};

impl Task {
    /// Whether this task's responses have connective phrases to label
    /// ([`Task::connective_tokens`]).
    pub fn has_connectives(self) -> bool {
        match self {
            Task::Steps | Task::Varied | Task::Filler | Task::Filler80 => true,
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
        let wordings: Vec<&str> = VARIED_PHRASES.iter().flatten().copied().collect();
        Some(inside_wordings(pieces, wordings))
    }

    /// Whether this task's responses can have filler ([`Task::filler_tokens`]):
    /// `tiny-steps-filler` at both doses, and `tiny-steps`, the same task at dose 0 (none).
    pub fn has_filler(self) -> bool {
        match self {
            Task::Steps | Task::Filler | Task::Filler80 => true,
            Task::Arith | Task::Varied | Task::Code => false,
        }
    }

    /// For each token of a response, given as the text each token decodes to, whether it
    /// is filler: for `tiny-steps-filler`, every token whose text lies wholly after the
    /// last complete `\boxed{...}` — the answer the reward grades, so nothing labelled can
    /// change a reward; a response without a complete box has none. (The verifier also
    /// grades `\fbox{...}`, `\boxed 5` and escaped braces, which this scan does not know:
    /// a policy that wrote one after its box would have it labelled filler.) Tokens with no text (the end of sequence) are not
    /// filler. `tiny-steps` is the dose 0: nothing is filler. `None` for tasks without
    /// filler ([`Task::has_filler`]).
    pub fn filler_tokens(self, pieces: &[&str]) -> Option<Vec<bool>> {
        match self {
            Task::Filler | Task::Filler80 => {}
            Task::Steps => return Some(vec![false; pieces.len()]),
            Task::Arith | Task::Varied | Task::Code => return None,
        }
        let text: String = pieces.concat();
        let answer_end = last_box_end(&text).unwrap_or(text.len());
        let mut start = 0;
        Some(
            pieces
                .iter()
                .map(|p| {
                    let after = start >= answer_end && !p.is_empty();
                    start += p.len();
                    after
                })
                .collect(),
        )
    }

    /// Whether this task's responses are worked solutions whose first error can be found
    /// ([`Task::correct_prefix_tokens`]).
    pub fn has_steps(self) -> bool {
        match self {
            Task::Arith | Task::Steps | Task::Varied => true,
            // Not written for the filler task: the dose-response runs do not use it.
            Task::Filler | Task::Filler80 | Task::Code => false,
        }
    }

    /// For each token of a response to the problem `prompt_id` names (`arith-a-b-c`, the
    /// id the built-in tasks give their prompts), given as the text each token decodes to,
    /// whether it lies before the response's first error: inside the longest prefix the
    /// response shares with a correct solution of this task (any of `tiny-steps-varied`'s
    /// 27 phrasings). The first wrong character ends it, so in `7*13=92` the `9` is still
    /// correct and the `2` is not. A token is labelled when every byte of its text is
    /// inside that prefix; tokens with no text (the end of sequence) are not. A right
    /// answer is labelled throughout. `None` for a task without worked solutions
    /// ([`Task::has_steps`]) or an id that is not a built-in arithmetic problem.
    pub fn correct_prefix_tokens(self, prompt_id: &str, pieces: &[&str]) -> Option<Vec<bool>> {
        if !self.has_steps() {
            return None;
        }
        let problem = Problem::from_id(prompt_id)?;
        let text: String = pieces.concat();
        let picks: Vec<[usize; 3]> = match self {
            Task::Varied => (0..27).map(|i| [i / 9, i / 3 % 3, i % 3]).collect(),
            Task::Arith | Task::Steps | Task::Filler | Task::Filler80 | Task::Code => {
                vec![[0; 3]]
            }
        };
        let correct = picks
            .into_iter()
            .filter_map(|pick| self.phrased(&problem, None, &pick))
            .map(|s| {
                s.bytes()
                    .zip(text.bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()?;
        let mut end = 0;
        Some(
            pieces
                .iter()
                .map(|p| {
                    end += p.len();
                    !p.is_empty() && end <= correct
                })
                .collect(),
        )
    }
}

/// The byte just past the closing brace of the last complete `\boxed{...}` of `text`
/// (braces balanced inside it), if any: an unclosed box is skipped for the one before it.
fn last_box_end(text: &str) -> Option<usize> {
    const OPEN: &str = "\\boxed{";
    let mut search_end = text.len();
    while let Some(at) = text[..search_end].rfind(OPEN) {
        let mut depth = 1usize;
        for (i, b) in text.bytes().enumerate().skip(at + OPEN.len()) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        search_end = at;
    }
    None
}

/// For each piece of a text cut into `pieces`, whether every byte of it lies inside one of
/// `wordings`: the text is scanned left to right, and at each position the longest wording
/// that starts there is taken. Empty pieces are not labelled.
fn inside_wordings(pieces: &[&str], mut wordings: Vec<&str>) -> Vec<bool> {
    let text: String = pieces.concat();
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
    pieces
        .iter()
        .map(|p| {
            let span = &inside[start..start + p.len()];
            start += p.len();
            !span.is_empty() && span.iter().all(|&b| b)
        })
        .collect()
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
            .phrased(&p, None, &[1, 1, 1])
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

    /// Labels of a character-level response by [`Task::correct_prefix_tokens`], as a
    /// string of `p` (before the first error) and `.`.
    fn prefix(task: Task, id: &str, text: &str) -> String {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let labels = task.correct_prefix_tokens(id, &pieces).unwrap();
        assert_eq!(labels.len(), pieces.len());
        labels.iter().map(|&c| if c { 'p' } else { '.' }).collect()
    }

    #[test]
    fn the_correct_prefix_of_a_wrong_solution_by_hand() {
        // 45+7*13: the product right, the sum wrong ("137"): the first error is the "7"
        // of 137, at byte 28 of "first 7*13=91. then 45+91=137. ..." (the correct text
        // has "6" there).
        let id = "arith-45-7-13";
        let wrong = "first 7*13=91. then 45+91=137. so the answer is \\boxed{137}";
        let (p, o) = (|n| "p".repeat(n), |n| ".".repeat(n));
        let at = wrong.find("137").unwrap() + 2;
        assert_eq!(at, 28);
        let want = [p(at), o(wrong.len() - at)].concat();
        assert_eq!(prefix(Task::Steps, id, wrong), want);
        // An error in the product: only "first 7*13=9" is right.
        let wrong = "first 7*13=92. then 45+92=137. so the answer is \\boxed{137}";
        assert_eq!(
            prefix(Task::Steps, id, wrong),
            [p(12), o(wrong.len() - 12)].concat()
        );
        // A right solution is labelled throughout; so is a correct one cut off early.
        let right = Task::Steps
            .solution(&Problem { a: 45, b: 7, c: 13 }, None)
            .unwrap();
        assert_eq!(prefix(Task::Steps, id, &right), p(right.len()));
        assert_eq!(prefix(Task::Steps, id, "first 7*1"), p(9));
        // tiny-steps-varied: any phrasing is correct text, so the prefix runs through the
        // wordings the response chose up to its first wrong digit.
        let wrong = "to start 7*13=91. next 45+91=146. so the answer is \\boxed{146}";
        let at = wrong.find("146").unwrap() + 1;
        assert_eq!(
            prefix(Task::Varied, id, wrong),
            [p(at), o(wrong.len() - at)].concat()
        );
        // ... but tiny-steps has one phrasing: "to start" is wrong from its first letter.
        assert_eq!(prefix(Task::Steps, id, "to start"), o(8));
        // The compact format.
        assert_eq!(
            prefix(Task::Arith, id, "7*13=91 45+91=135"),
            [p(16), o(1)].concat()
        );
    }

    #[test]
    fn prefix_tokens_are_whole_tokens_and_unknown_problems_give_none() {
        // Whole tokens: "=9" ends right before the error ("92" for "91"), "2." starts at it.
        let pieces = ["first", " 7*13", "=9", "2.", ""];
        assert_eq!(
            Task::Steps.correct_prefix_tokens("arith-45-7-13", &pieces),
            Some(vec![true, true, true, false, false])
        );
        // A token that straddles the error is not labelled.
        let pieces = ["first 7*13=", "92"];
        assert_eq!(
            Task::Steps.correct_prefix_tokens("arith-45-7-13", &pieces),
            Some(vec![true, false])
        );
        for id in [
            "",
            "arith-1-2",
            "arith-a-2-3",
            "code-1-2-3",
            "arith-1-2-3-4",
        ] {
            assert_eq!(Task::Steps.correct_prefix_tokens(id, &["1"]), None, "{id}");
        }
        assert_eq!(
            Task::Code.correct_prefix_tokens("arith-1-2-3", &["1"]),
            None
        );
    }
}
