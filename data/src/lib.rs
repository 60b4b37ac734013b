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

use deltarl_schemas::seed::{hash_str, Rng};
use deltarl_schemas::PromptRow;

/// The characters of the tiny task, in vocabulary order after the special tokens.
pub const CHARS: &str = "0123456789+-*=?:{}\\ \nQAboxed";
/// Special tokens: padding, end of sequence, unknown.
pub const PAD: &str = "<pad>";
pub const EOS: &str = "<eos>";
pub const UNK: &str = "<unk>";
pub const PAD_ID: u32 = 0;
pub const EOS_ID: u32 = 1;
pub const UNK_ID: u32 = 2;

/// Number of tokens of the character vocabulary (specials included).
pub fn vocab_size() -> usize {
    3 + CHARS.chars().count()
}

/// One synthetic problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub a: u32,
    pub b: u32,
    pub c: u32,
}

impl Problem {
    /// Draws a problem from a seeded generator.
    pub fn draw(rng: &mut Rng) -> Self {
        Problem {
            a: rng.below(100) as u32,
            b: 2 + rng.below(18) as u32,
            c: 2 + rng.below(18) as u32,
        }
    }

    pub fn question(&self) -> String {
        format!("{}+{}*{}=?", self.a, self.b, self.c)
    }

    pub fn answer(&self) -> u32 {
        self.a + self.b * self.c
    }

    /// The worked solution; `wrong` puts an error of `delta` in the given step
    /// (0 = product, 1 = sum), carried through to the boxed answer.
    pub fn solution(&self, wrong: Option<(usize, i64)>) -> String {
        let off = |step: usize| match wrong {
            Some((s, d)) if s == step => d,
            _ => 0,
        };
        let p = (i64::from(self.b * self.c) + off(0)).max(0);
        let s = (i64::from(self.a) + p + off(1)).max(0);
        format!(
            "{}*{}={p} {}+{p}={s} \\boxed{{{s}}}",
            self.b, self.c, self.a
        )
    }

    /// The stable id of this problem.
    pub fn id(&self) -> String {
        format!("arith-{}-{}-{}", self.a, self.b, self.c)
    }
}

/// The set a prompt belongs to: train problems and held-out problems never overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

/// Held-out problems are those whose id hashes into the lowest 10 %.
pub fn split_of(p: &Problem) -> Split {
    if hash_str(&p.id()).is_multiple_of(10) {
        Split::Test
    } else {
        Split::Train
    }
}

/// `n` distinct problems of one split, drawn deterministically from `seed`.
pub fn problems(split: Split, n: usize, seed: u64) -> Vec<Problem> {
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    // The problem space has 100 * 18 * 18 = 32,400 items: ample for any n used here.
    let mut tries = 0usize;
    while out.len() < n && tries < 1_000_000 {
        tries += 1;
        let p = Problem::draw(&mut rng);
        if split_of(&p) == split && seen.insert(p.id()) {
            out.push(p);
        }
    }
    out
}

/// Problems as prompt rows (the input table of rollout and eval).
pub fn prompt_rows(problems: &[Problem]) -> Vec<PromptRow> {
    problems
        .iter()
        .map(|p| PromptRow {
            id: p.id(),
            problem: p.question(),
            answer: p.answer().to_string(),
            data_source: Some("tiny-arith".into()),
            system: None,
        })
        .collect()
}

/// A warm-start example: prompt text and target text (solution, EOS added by the caller).
/// With probability `wrong_frac` one step is off by 1..=3 (either sign).
pub fn warmstart_example(rng: &mut Rng, template: &str, wrong_frac: f64) -> (String, String) {
    let p = loop {
        let p = Problem::draw(rng);
        if split_of(&p) == Split::Train {
            break p;
        }
    };
    let wrong = (rng.uniform() < wrong_frac).then(|| {
        let step = rng.below(2) as usize;
        let mag = 1 + rng.below(3) as i64;
        (step, if rng.below(2) == 0 { mag } else { -mag })
    });
    (
        deltarl_schemas::render_template(template, &p.question()),
        p.solution(wrong),
    )
}

/// The character-level tokenizer as a Hugging Face `tokenizer.json`: a BPE model with
/// one token per character and no merges, plus a `Fuse` decoder, so it loads in both
/// the `tokenizers` crate and `transformers`.
pub fn tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    for (i, t) in [PAD, EOS, UNK].iter().enumerate() {
        vocab.insert((*t).to_string(), serde_json::json!(i));
    }
    for (i, c) in CHARS.chars().enumerate() {
        vocab.insert(c.to_string(), serde_json::json!(i + 3));
    }
    let special = |id: u32, content: &str| {
        serde_json::json!({
            "id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        })
    };
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(PAD_ID, PAD), special(EOS_ID, EOS), special(UNK_ID, UNK)],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": UNK,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    });
    serde_json::to_string_pretty(&tok).unwrap_or_default()
}

/// `tokenizer_config.json` for transformers (special tokens, no chat template).
pub fn tokenizer_config_json() -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS, "pad_token": PAD, "unk_token": UNK,
        "model_max_length": 256
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solutions_and_splits() {
        let p = Problem { a: 45, b: 7, c: 13 };
        assert_eq!(p.solution(None), "7*13=91 45+91=136 \\boxed{136}");
        assert_eq!(p.solution(Some((0, 2))), "7*13=93 45+93=138 \\boxed{138}");
        assert_eq!(p.answer(), 136);
        let train = problems(Split::Train, 500, 1);
        let test = problems(Split::Test, 100, 1);
        assert_eq!((train.len(), test.len()), (500, 100));
        assert!(train.iter().all(|p| split_of(p) == Split::Train));
        assert!(test.iter().all(|p| split_of(p) == Split::Test));
        assert_eq!(problems(Split::Test, 100, 1), test);
        for ch in p.solution(None).chars().chain("Q: 1+2*3=?\nA: ".chars()) {
            assert!(CHARS.contains(ch), "{ch:?} not in vocabulary");
        }
    }
}
