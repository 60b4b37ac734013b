//! Vectors held in memory at the model's precision (the features stage's, when the file
//! keeps not every vector): widened a batch at a time for each pass, they give the
//! coefficients of the same vectors in f32, bit for bit.
#![allow(clippy::unwrap_used)]

use deltarl_coeffs::shell::{HeldVectors, RowVectors, VECTOR_BATCH_BYTES};
use deltarl_coeffs::{
    estimate, estimate_sorted, fixed_order, DeltaSettings, Estimator, Response, Settings,
};
use deltarl_schemas::{FeatureRow, Precision};

/// `n` responses in groups of 8 with 1 to 40 tokens of `dim` bf16 values in [-1, 1), and
/// advantages in [-1, 1), from a fixed xorshift stream.
fn rows(n: usize, dim: usize) -> (Vec<FeatureRow>, Vec<f32>) {
    let mut x: u64 = 0x2545f4914f6cdd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut advantages = Vec::new();
    let rows = (0..n)
        .map(|i| {
            let len = 1 + (next() * 40.0) as usize;
            advantages.push((next() * 2.0 - 1.0) as f32);
            FeatureRow {
                prompt_id: format!("g{}", i % 8),
                sample_idx: (i / 8) as u32,
                dim: dim as u32,
                precision: Precision::Bf16,
                features: (0..len * dim)
                    .map(|_| Precision::Bf16.round((next() * 2.0 - 1.0) as f32))
                    .collect(),
                token_prob: vec![0.5; len],
                logprob: vec![-0.7; len],
                entropy: (0..len).map(|_| next() as f32).collect(),
            }
        })
        .collect();
    (rows, advantages)
}

#[test]
fn held_bf16_vectors_over_several_batches_give_the_f32_coefficients() {
    // 64 responses of 20.5 tokens on average x 4,096 values: about 21 MB of f32, more than
    // one batch.
    let dim = 4096;
    let (rows, advantages) = rows(64, dim);
    let floats: usize = rows.iter().map(|r| r.features.len()).sum();
    assert!(
        floats * 4 > VECTOR_BATCH_BYTES,
        "{floats} values fit one batch"
    );
    let held = HeldVectors::of(&rows, Precision::Bf16).unwrap();
    assert_eq!(held.bytes(), 2 * floats);
    let rs: Vec<Response<'_>> = rows
        .iter()
        .zip(&advantages)
        .map(|(r, &advantage)| Response {
            prompt_id: &r.prompt_id,
            sample_idx: r.sample_idx,
            advantage,
            reward: 0.0,
            token_ids: &[],
            kept: true,
            features: &r.features,
            entropy: &r.entropy,
            token_prob: &r.token_prob,
            shared: &[],
        })
        .collect();
    let order = fixed_order(&rs).unwrap();
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| rs[i]).collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    let whole = estimate(&s, dim, &rs).unwrap();
    let out = estimate_sorted(&s, dim, &sorted, &mut RowVectors::new(&held, &sorted)).unwrap();
    assert_eq!(out.coeffs.len(), rows.len());
    for (c, &i) in out.coeffs.iter().zip(&order) {
        assert_eq!(c, &whole.coeffs[i], "response {i}");
    }
    assert_eq!(
        serde_json::to_string(&out.summary).unwrap(),
        serde_json::to_string(&whole.summary).unwrap()
    );
}

/// A value bf16 cannot keep (it would be held rounded) is refused, naming the response and
/// the value's index.
#[test]
fn a_value_bf16_cannot_keep_is_refused_by_response() {
    let (mut rows, _) = rows(4, 8);
    rows[3].features[5] = 1.0 + f32::EPSILON;
    let err = HeldVectors::of(&rows, Precision::Bf16)
        .err()
        .unwrap()
        .to_string();
    let key = format!(
        "prompt_id {:?}, sample_idx {}",
        rows[3].prompt_id, rows[3].sample_idx
    );
    assert!(err.contains(&key) && err.contains("value 5"), "{err}");
    assert!(HeldVectors::of(&rows, Precision::F32).is_ok());
}
