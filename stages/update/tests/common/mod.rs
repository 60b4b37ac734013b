//! What the update's tests share: the tiny random policy they train.
#![allow(dead_code, clippy::unwrap_used)]

/// The tiny random Qwen3 (the built-in task's vocabulary, tied embeddings) in f32, and the
/// folder holding its tokenizer.
pub fn tiny_policy() -> (tempfile::TempDir, deltarl_model::Policy) {
    let dir = tempfile::tempdir().unwrap();
    let p = deltarl_model::random_policy(
        dir.path(),
        &deltarl_data::tokenizer_json(),
        deltarl_data::vocab_size(),
        true,
        11,
        1.0,
    )
    .unwrap();
    (dir, p)
}

/// Update settings for the fields a test does not state (struct update syntax): the stage
/// defaults the tests do not vary. The loss and step shape are always the test's own.
pub fn settings() -> deltarl_update::Settings {
    deltarl_update::Settings {
        seed: 1,
        join: deltarl_update::JoinSettings {
            old_logprobs: deltarl_update::OldLogprobs::Recompute,
            tis_cap: None,
        },
        loss: deltarl_update::LossSettings {
            surrogate: Default::default(),
            ratio: Default::default(),
            eps_low: 0.2,
            eps_high: 0.28,
            dual_clip: None,
            aggregation: deltarl_update::Aggregation::TokenMean,
            norm_len: 16.0,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            future_kl: None,
        },
        optimizer_steps: 1,
        micro_batch_rows: 1,
        micro_batch_tokens: None,
        activation_checkpointing: false,
        warmup_steps: 0,
        lr: 1e-3,
        weight_decay: 0.0,
        grad_clip: 0.0,
        temperature: 1.0,
        head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
        layout: deltarl_teacher::Layout::Padded,
        dtype: deltarl_model::Dtype::F32,
        sharding: deltarl_optim::Sharding::Replicated,
        shard_bytes: deltarl_model::DEFAULT_SHARD_BYTES,
    }
}
