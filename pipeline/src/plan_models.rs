//! The published shapes of the models users plan for, so `deltarl plan --model NAME` works
//! without the model's `config.json` on this machine (taken from each model's published
//! `config.json`; the parameter counts they give are pinned against the model cards below).

use crate::plan::Shape;

/// The published models, by the name [`shape`] matches.
const KNOWN: [(&str, Shape); 13] = [
    (
        "qwen3-0.6b",
        Shape {
            vocab: 151_936,
            hidden: 1024,
            intermediate: 3072,
            layers: 28,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "qwen3-1.7b",
        Shape {
            vocab: 151_936,
            hidden: 2048,
            intermediate: 6144,
            layers: 28,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "qwen3-4b",
        Shape {
            vocab: 151_936,
            hidden: 2560,
            intermediate: 9728,
            layers: 36,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "qwen3-8b",
        Shape {
            vocab: 151_936,
            hidden: 4096,
            intermediate: 12_288,
            layers: 36,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            tied: false,
        },
    ),
    (
        "qwen3-14b",
        Shape {
            vocab: 151_936,
            hidden: 5120,
            intermediate: 17_408,
            layers: 40,
            heads: 40,
            kv_heads: 8,
            head_dim: 128,
            tied: false,
        },
    ),
    (
        "qwen2.5-0.5b",
        Shape {
            vocab: 151_936,
            hidden: 896,
            intermediate: 4864,
            layers: 24,
            heads: 14,
            kv_heads: 2,
            head_dim: 64,
            tied: true,
        },
    ),
    (
        "qwen2.5-1.5b",
        Shape {
            vocab: 151_936,
            hidden: 1536,
            intermediate: 8960,
            layers: 28,
            heads: 12,
            kv_heads: 2,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "qwen2.5-3b",
        Shape {
            vocab: 151_936,
            hidden: 2048,
            intermediate: 11_008,
            layers: 36,
            heads: 16,
            kv_heads: 2,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "qwen2.5-7b",
        Shape {
            vocab: 152_064,
            hidden: 3584,
            intermediate: 18_944,
            layers: 28,
            heads: 28,
            kv_heads: 4,
            head_dim: 128,
            tied: false,
        },
    ),
    (
        "qwen2.5-14b",
        Shape {
            vocab: 152_064,
            hidden: 5120,
            intermediate: 13_824,
            layers: 48,
            heads: 40,
            kv_heads: 8,
            head_dim: 128,
            tied: false,
        },
    ),
    (
        "llama-3.2-1b",
        Shape {
            vocab: 128_256,
            hidden: 2048,
            intermediate: 8192,
            layers: 16,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            tied: true,
        },
    ),
    (
        "llama-3.2-3b",
        Shape {
            vocab: 128_256,
            hidden: 3072,
            intermediate: 8192,
            layers: 28,
            heads: 24,
            kv_heads: 8,
            head_dim: 128,
            tied: true,
        },
    ),
    (
        "llama-3.1-8b",
        Shape {
            vocab: 128_256,
            hidden: 4096,
            intermediate: 14_336,
            layers: 32,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            tied: false,
        },
    ),
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
    KNOWN
        .iter()
        .find(|r| r.0 == bare)
        .map(|(_, shape)| shape.clone())
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

    #[test]
    fn qwen3_8b_has_its_published_parameter_count() {
        // Qwen3-8B: 8.19 B parameters (6.95 B without embeddings) per its model card.
        let s = shape("Qwen/Qwen3-8B-Base").unwrap();
        let p = s.parameters();
        assert_eq!(p, 8_190_735_360);
        assert_eq!(p - 2 * s.vocab * s.hidden, 6_946_075_648);
        // Key and value per position: 36 layers x 2 x 8 heads x 128 x 2 bytes.
        assert_eq!(s.kv_bytes_per_token(2), 147_456);
    }
}
