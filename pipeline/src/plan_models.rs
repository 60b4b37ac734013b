//! The published shapes of the models users plan for, so `deltarl plan --model NAME` works
//! without the model's `config.json` on this machine (taken from each model's published
//! `config.json`; the parameter counts they give are pinned against the model cards below).

use crate::plan::Shape;

/// (name, vocab, hidden, intermediate, layers, heads, kv heads, head dim, tied head).
type Row = (&'static str, u64, u64, u64, u64, u64, u64, u64, bool);

const KNOWN: [Row; 13] = [
    ("qwen3-0.6b", 151_936, 1024, 3072, 28, 16, 8, 128, true),
    ("qwen3-1.7b", 151_936, 2048, 6144, 28, 16, 8, 128, true),
    ("qwen3-4b", 151_936, 2560, 9728, 36, 32, 8, 128, true),
    ("qwen3-8b", 151_936, 4096, 12_288, 36, 32, 8, 128, false),
    ("qwen3-14b", 151_936, 5120, 17_408, 40, 40, 8, 128, false),
    ("qwen2.5-0.5b", 151_936, 896, 4864, 24, 14, 2, 64, true),
    ("qwen2.5-1.5b", 151_936, 1536, 8960, 28, 12, 2, 128, true),
    ("qwen2.5-3b", 151_936, 2048, 11_008, 36, 16, 2, 128, true),
    ("qwen2.5-7b", 152_064, 3584, 18_944, 28, 28, 4, 128, false),
    ("qwen2.5-14b", 152_064, 5120, 13_824, 48, 40, 8, 128, false),
    ("llama-3.2-1b", 128_256, 2048, 8192, 16, 32, 8, 64, true),
    ("llama-3.2-3b", 128_256, 3072, 8192, 28, 24, 8, 128, true),
    ("llama-3.1-8b", 128_256, 4096, 14_336, 32, 32, 8, 128, false),
];

/// The names [`shape`] knows, for messages.
pub fn names() -> Vec<&'static str> {
    KNOWN.iter().map(|r| r.0).collect()
}

/// The shape of a model named like its hub repository (`Qwen/Qwen3-8B-Base`,
/// `qwen3-8b`, `meta-llama/Llama-3.1-8B-Instruct`): the last path part, case-insensitive,
/// without a `-Base` / `-Instruct` suffix.
pub fn shape(name: &str) -> Option<Shape> {
    let last = name.rsplit('/').next().unwrap_or(name).to_lowercase();
    let bare = ["-base", "-instruct"]
        .iter()
        .find_map(|s| last.strip_suffix(s))
        .unwrap_or(&last);
    let bare = bare.strip_prefix("meta-").unwrap_or(bare);
    KNOWN.iter().find(|r| r.0 == bare).map(
        |&(_, vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, tied)| Shape {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            tied,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Total parameters against the model cards (billions, as rounded there), within 1 %:
    /// our count is Qwen3's layout (q/k norms, no biases), and Qwen2.5's q/k/v biases,
    /// Llama's lack of q/k norms and the cards' rounding move it by less than that.
    #[test]
    fn parameter_counts_match_the_model_cards() {
        let cards = [
            ("Qwen/Qwen3-0.6B-Base", 0.6),
            ("Qwen/Qwen3-1.7B-Base", 1.7),
            ("Qwen/Qwen3-4B-Base", 4.0),
            ("Qwen/Qwen3-8B-Base", 8.2),
            ("Qwen/Qwen3-14B-Base", 14.8),
            ("Qwen/Qwen2.5-0.5B", 0.49),
            ("Qwen/Qwen2.5-1.5B", 1.54),
            ("Qwen/Qwen2.5-3B", 3.09),
            ("Qwen/Qwen2.5-7B", 7.61),
            ("Qwen/Qwen2.5-14B", 14.7),
            ("meta-llama/Llama-3.2-1B", 1.24),
            ("meta-llama/Llama-3.2-3B", 3.21),
            ("meta-llama/Llama-3.1-8B-Instruct", 8.03),
        ];
        assert_eq!(cards.len(), KNOWN.len());
        for (name, billions) in cards {
            let p = shape(name).unwrap_or_else(|| panic!("{name}")).parameters() as f64 / 1e9;
            assert!(
                (p - billions).abs() <= 0.01 * billions + 0.006,
                "{name}: {p:.3} B, card {billions} B"
            );
        }
        assert!(shape("qwen3-9b").is_none());
    }
}
