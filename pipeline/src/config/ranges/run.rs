//! The ranges of the run's own keys and its policy's: the seed, `[checkpoint]`, `[data]`,
//! `[model]` and `[warmstart]`.

use super::*;

/// The top-level `seed`.
pub(super) const SEED: &[Range] = &[Range {
    key: "seed",
    get: |o| int(o.seed),
    bound: ints(0, MAX_SEED),
    why: "TOML's largest integer",
}];

/// `[checkpoint]`.
pub(super) const CHECKPOINT: &[Range] = &[
    Range {
        key: "checkpoint.shard_mb",
        get: |o| int(o.checkpoint.shard_mb),
        bound: ints(1, 1 << 30),
        why: "a shard of at most 1 PB",
    },
    Range {
        key: "checkpoint.keep_last",
        get: |o| int(o.checkpoint.keep_last),
        bound: ints(0, SIZE),
        why: "0 = all; iterations of one run",
    },
    Range {
        key: "checkpoint.save_every",
        get: |o| int(o.checkpoint.save_every),
        bound: ints(0, SIZE),
        why: "0 = none beyond keep_last; iterations of one run",
    },
    Range {
        key: "checkpoint.keep_features",
        get: |o| int(o.checkpoint.keep_features),
        bound: ints(0, SIZE),
        why: "0 = all; iterations of one run",
    },
];

/// `[data]`.
pub(super) const DATA: &[Range] = &[Range {
    key: "data.train_size",
    get: |o| int(o.data.train_size),
    bound: ints(0, 1 << 26),
    why: "generated problems; every built-in set is smaller",
}];

/// `[model]`.
pub(super) const MODEL: &[Range] = &[
    Range {
        key: "model.head_chunk_mb",
        get: |o| int(o.model.head_chunk_mb),
        bound: ints(0, 1 << 24),
        why: "0 = the whole pass; at most 16 TB",
    },
    Range {
        key: "model.threads",
        get: |o| int(o.model.threads),
        bound: ints(0, 1 << 12),
        why: "0 = all cores",
    },
    Range {
        key: "model.tiny.hidden_size",
        get: |o| int(o.model.tiny.hidden_size),
        bound: ints(1, 1 << 16),
        why: "wider than any published model",
    },
    Range {
        key: "model.tiny.intermediate_size",
        get: |o| int(o.model.tiny.intermediate_size),
        bound: ints(1, 1 << 18),
        why: "as hidden_size",
    },
    Range {
        key: "model.tiny.max_position_embeddings",
        get: |o| int(o.model.tiny.max_position_embeddings),
        bound: ints(1, SIZE),
        why: "context length",
    },
    Range {
        key: "model.tiny.num_attention_heads",
        get: |o| int(o.model.tiny.num_attention_heads),
        bound: ints(1, 1 << 10),
        why: "and dividing hidden_size",
    },
    Range {
        key: "model.tiny.num_hidden_layers",
        get: |o| int(o.model.tiny.num_hidden_layers),
        bound: ints(1, 1 << 10),
        why: "deeper than any published model",
    },
    Range {
        key: "model.tiny.num_key_value_heads",
        get: |o| int(o.model.tiny.num_key_value_heads),
        bound: ints(1, 1 << 10),
        why: "and dividing num_attention_heads",
    },
];

/// `[warmstart]`.
pub(super) const WARMSTART: &[Range] = &[
    Range {
        key: "warmstart.batch_size",
        get: |o| int(o.warmstart.batch_size),
        bound: ints(1, SIZE),
        why: "examples per step",
    },
    Range {
        key: "warmstart.digit_weight",
        get: |o| float(o.warmstart.digit_weight),
        bound: floats(1e-3, 1e3),
        why: "relative to 1 on other tokens, within 1e3 either way as coefficients are",
    },
    Range {
        key: "warmstart.lr",
        get: |o| float(o.warmstart.lr),
        bound: LR,
        why: "as update.lr",
    },
    Range {
        key: "warmstart.steps",
        get: |o| int(o.warmstart.steps),
        bound: ints(0, TOKENS),
        why: "0 = no warm start",
    },
    Range {
        key: "warmstart.warmup_steps",
        get: |o| int(o.warmstart.warmup_steps),
        bound: ints(0, TOKENS),
        why: "optimizer steps",
    },
    Range {
        key: "warmstart.wrong_frac",
        get: |o| float(o.warmstart.wrong_frac),
        bound: floats(0.0, 1.0),
        why: "a fraction",
    },
];
