//! Stop strings found without re-decoding the whole response at every step.
//!
//! Decoding all of a row's tokens each step costs O(n) per step, O(n^2) per response (an
//! 8k-token response would decode 32 M tokens). Instead each row keeps its text and decodes
//! only the tokens since the last emitted piece (incremental detokenization with a prefix
//! and a read offset, as vLLM does): the new text is what decoding `prefix..now` adds to
//! decoding `prefix..read`. A piece that ends in U+FFFD (a byte-level token in the middle of
//! a UTF-8 character) is held back until the character is complete. Only the new text plus
//! the last `longest stop - 1` bytes before it are searched.

use crate::Tokenizer;

/// Per-row state of the incremental stop-string search.
#[derive(Clone, Debug, Default)]
pub struct StopScanner {
    text: String,
    prefix_offset: usize,
    read_offset: usize,
}

impl StopScanner {
    /// Call after each new token (`tokens` is the whole response so far); returns whether
    /// the decoded response now contains one of `stops`.
    pub fn push(
        &mut self,
        tokenizer: &Tokenizer,
        tokens: &[u32],
        stops: &[String],
    ) -> crate::Result<bool> {
        if stops.is_empty() {
            return Ok(false);
        }
        let prefix = tokenizer.decode(&tokens[self.prefix_offset..self.read_offset])?;
        let full = tokenizer.decode(&tokens[self.prefix_offset..])?;
        if full.len() <= prefix.len() || full.ends_with('\u{FFFD}') {
            return Ok(false);
        }
        // Decoders that rewrite earlier text when more follows are handled by taking what
        // follows the longest common prefix.
        let common = if full.starts_with(&prefix) {
            prefix.len()
        } else {
            full.char_indices()
                .zip(prefix.chars())
                .find(|((_, a), b)| a != b)
                .map_or(prefix.len().min(full.len()), |((i, _), _)| i)
        };
        let old_len = self.text.len();
        self.text.push_str(&full[common..]);
        self.prefix_offset = self.read_offset;
        self.read_offset = tokens.len();
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = old_len.saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        Ok(stops.iter().any(|s| self.text[from..].contains(s.as_str())))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tokenizer(json: &str) -> Tokenizer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json).unwrap();
        Tokenizer::from_file(&path).unwrap()
    }

    /// A byte-fallback BPE tokenizer: `é` is the two tokens <0xC3> <0xA9>.
    fn byte_tokenizer() -> Tokenizer {
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [{"id": 5, "content": "</s>", "single_word": false, "lstrip": false,
                              "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": true, "ignore_merges": false,
                      "vocab": {"a": 0, "b": 1, "<0xC3>": 2, "<0xA9>": 3, "ab": 4, "</s>": 5},
                      "merges": []}
        });
        tokenizer(&json.to_string())
    }

    /// The step at which the naive check (decode everything, search everything) stops.
    fn naive(tok: &Tokenizer, ids: &[u32], stops: &[String]) -> Option<usize> {
        (1..=ids.len()).find(|&n| {
            let text = tok.decode(&ids[..n]).unwrap();
            stops.iter().any(|s| text.contains(s.as_str()))
        })
    }

    fn scanned(tok: &Tokenizer, ids: &[u32], stops: &[String]) -> Option<usize> {
        let mut s = StopScanner::default();
        (1..=ids.len()).find(|&n| s.push(tok, &ids[..n], stops).unwrap())
    }

    fn agree(tok: &Tokenizer, vocab: u32, stops: &[&str], seed: u64) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut rng = deltarl_schemas::seed::Rng::new(seed);
        for _ in 0..400 {
            let ids: Vec<u32> = (0..30)
                .map(|_| (rng.next_u64() % u64::from(vocab)) as u32)
                .collect();
            assert_eq!(
                scanned(tok, &ids, &stops),
                naive(tok, &ids, &stops),
                "{ids:?} {stops:?}"
            );
        }
    }

    #[test]
    fn same_stop_step_as_decoding_everything() {
        let chars = tokenizer(&deltarl_data::tokenizer_json());
        let vocab = chars.vocab_size() as u32;
        agree(&chars, vocab, &["=1", "}"], 1);
        agree(&chars, vocab, &["\\boxed{", "**"], 2);
        let bytes = byte_tokenizer();
        agree(&bytes, 6, &["é"], 3);
        agree(&bytes, 6, &["aé", "bb"], 4);
        agree(&bytes, 6, &["ééa"], 5);
    }

    #[test]
    fn multi_byte_characters_wait_until_complete() {
        let tok = byte_tokenizer();
        let stops = vec!["aé".to_string()];
        let mut s = StopScanner::default();
        assert!(!s.push(&tok, &[0], &stops).unwrap());
        assert!(!s.push(&tok, &[0, 2], &stops).unwrap(), "half of é");
        assert!(s.push(&tok, &[0, 2, 3], &stops).unwrap());
        assert!(!StopScanner::default().push(&tok, &[0], &[]).unwrap());
    }
}
