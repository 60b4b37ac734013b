//! The built-in synthetic task: multi-step arithmetic problems with worked solutions that
//! end in `\boxed{answer}`, and the character-level tokenizer the tiny model uses.
//!
//! Problems are `a + b * c` (a < 100, b, c < 20). The worked solution does the product,
//! then the sum, then boxes the result:
//!
//! ```text
//! 7*13=91 45+91=136 \boxed{136}
//! ```
//!
//! A controlled fraction of warm-start solutions has one wrong step (off by a small
//! amount), with the error carried through consistently, so the warm-started policy is
//! right only part of the time and RL has room to improve it.
//!
//! Four tasks share these problems ([`Task`]; the fifth, `tiny-code`, is in [`code`]):
//! `tiny-arith`, the compact format above, and `tiny-steps`, the same steps written out with fixed connective phrases that restate the
//! quantities — the text correct and wrong solutions share, where DelTA's premise lives
//! ([`Task::connective_tokens`] labels it):
//!
//! ```text
//! first 7*13=91. then 45+91=136. so the answer is \boxed{136}
//! ```
//!
//! A third, `tiny-steps-varied`, writes each connective in one of three phrasings drawn
//! at random, so the shared text is no longer near-deterministic for the policy:
//!
//! ```text
//! to start 7*13=91. next 45+91=136. therefore the answer is \boxed{136}
//! ```
//!
//! A fourth, `tiny-steps-filler`, is `tiny-steps` with 32 reward-blind filler words of
//! random letters after its answer (`tiny-steps-filler-80` has 80: [`Task::filler_words`]):
//! most of its tokens, each a choice of ln 14 nats, carry nothing about correctness ([`Task::filler_tokens`] labels them;
//! `tiny-steps` is the same task at dose 0):
//!
//! ```text
//! first 7*13=91. then 45+91=136. so the answer is \boxed{136} wfat oxhe dnbi ... saet
//! ```
//!
//! Besides the tiny model's tasks, [`words`] generates English word problems for a
//! pretrained model with its own tokenizer (`word-problems`); [`Builtin`] names either.
//! [`recipe`] prepares a published training set (DAPO-Math-17k) as the paper trains on it.

pub mod code;
pub mod recipe;
mod roles;
mod row;
mod source;
mod split;
mod task;
mod tokenizer;
mod vocab;
pub mod words;

pub use source::Source;
pub(crate) use split::distinct;
pub use split::{split_of_id, Split};
pub use task::{
    problems, prompt_rows, split_of, vocab_size, warmstart_example, Builtin, Problem, Task,
};
pub use tokenizer::{task_tokenizer_json, tokenizer_config_json, tokenizer_json};
pub use vocab::{
    digit_ids, CHARS, EOS, EOS_ID, FILLER_LETTERS, FILLER_WORD_LEN, PAD, PAD_ID, STEPS_EXTRA, UNK,
    UNK_ID, VARIED_PHRASES,
};

#[cfg(test)]
mod tests;
