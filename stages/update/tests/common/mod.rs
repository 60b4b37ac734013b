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
