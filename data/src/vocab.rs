//! The tiny model's character vocabulary: the special tokens first, then the characters
//! of each task's solution format.

/// The characters of the tiny task, in vocabulary order after the special tokens.
pub const CHARS: &str = "0123456789+-*=?:{}\\ \nQAboxed";
/// Special tokens: padding, end of sequence, unknown.
pub const PAD: &str = "<pad>";
pub const EOS: &str = "<eos>";
pub const UNK: &str = "<unk>";
pub const PAD_ID: u32 = 0;
pub const EOS_ID: u32 = 1;
pub const UNK_ID: u32 = 2;

/// The characters `tiny-steps` adds for its phrases (after [`CHARS`], so the compact
/// task's ids are unchanged).
pub const STEPS_EXTRA: &str = "firsthnwa.";

/// `tiny-steps-varied`'s phrasings of its three connectives, longest first, the last being
/// `tiny-steps`' own. Each starts
/// with a different character, so the choice is one token: ln 3 nats of entropy for a
/// policy that learned the warm start's uniform draw, on text correct and wrong answers
/// share. Every character is in the `tiny-steps` vocabulary.
pub const VARIED_PHRASES: [[&str; 3]; 3] = [
    ["start with", "to start", "first"],
    ["after that", "next", "then"],
    [
        "therefore the answer is",
        "and so the answer is",
        "so the answer is",
    ],
];

/// The letters of `tiny-steps-filler`'s reward-blind filler words, each drawn uniformly in
/// the warm start: every letter of the `tiny-steps` vocabulary, so each filler character is
/// a choice of ln 14 = 2.64 nats for a policy that learned the draw (a choice at every
/// filler token, where one of four wordings made one choice a sentence and carried too
/// little of the update to test the premise: docs/results.md §15).
pub const FILLER_LETTERS: &str = "abdefhinorstwx";

/// The letters of one filler word.
pub const FILLER_WORD_LEN: usize = 4;

/// The token ids of the digits `0`-`9` (the first characters of every task's vocabulary).
pub fn digit_ids() -> std::ops::Range<u32> {
    3..13
}
