//! The proxy `(1 - p) h` equals the autograd gradient of log p(y) with respect to the
//! LM-head row of y (untied head, temperature 1), and does not depend on the chunk size
//! beyond float round-off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_features::{run, Job, Proxy, Settings};
use deltarl_model::random_policy;
use deltarl_schemas::{FinishReason, RolloutRow};
use tch::{Kind, Tensor};

fn policy(tied: bool) -> (tempfile::TempDir, deltarl_model::Policy) {
    let dir = tempfile::tempdir().unwrap();
    let p = random_policy(
        dir.path(),
        &deltarl_data::tokenizer_json(),
        deltarl_data::vocab_size(),
        tied,
        3,
        10.0,
    )
    .unwrap();
    (dir, p)
}

fn rows() -> Vec<RolloutRow> {
    (0..5u32)
        .map(|i| RolloutRow {
            prompt_id: format!("p{i}"),
            sample_idx: 0,
            prompt: String::new(),
            prompt_token_ids: vec![3, 4 + i, 5],
            response_token_ids: (0..(2 + i)).map(|k| 6 + (k * 7 + i) % 20).collect(),
            response_text: String::new(),
            old_logprobs: vec![0.0; 2 + i as usize],
            finish_reason: FinishReason::Stop,
            policy_iter: 0,
            gold: String::new(),
            data_source: None,
            reward_kind: Default::default(),
        })
        .collect()
}

/// Iteration 1, every pass here.
const JOB: Job = Job {
    iter: 1,
    shard: deltarl_schemas::Shard::WHOLE,
};

fn settings(chunk: usize) -> Settings {
    Settings {
        proxy: Proxy::LmHeadRow,
        project_dim: None,
        seed: 0,
        temperature: 1.0,
        chunk_rows: chunk,
        chunk_tokens: None,
        head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
        layout: deltarl_teacher::Layout::Padded,
        dtype: deltarl_model::Dtype::F32,
    }
}

#[test]
fn proxy_is_the_lm_head_row_gradient() {
    let (_d, p) = policy(false);
    let rs = rows();
    let feats = run(&settings(2), JOB, &p.model, &rs, &mut |_| {}).unwrap();
    let head = p.model.lm_head_weight();
    assert!(!rs.is_empty());
    assert_eq!(feats.len(), rs.len(), "one feature row a response");
    for (r, f) in rs.iter().zip(&feats) {
        assert_eq!(f.token_prob.len(), r.response_token_ids.len());
        let seq: Vec<i64> = r
            .prompt_token_ids
            .iter()
            .chain(&r.response_token_ids)
            .map(|&x| i64::from(x))
            .collect();
        let ids = Tensor::from_slice(&seq).view([1, -1]);
        for (j, &y) in r.response_token_ids.iter().enumerate() {
            let pos = r.prompt_token_ids.len() + j - 1;
            let mut h = head.shallow_clone();
            h.zero_grad();
            let logits = p.model.forward(&ids);
            let logp = logits
                .get(0)
                .get(pos as i64)
                .log_softmax(-1, Kind::Float)
                .get(i64::from(y));
            logp.backward();
            let g = Vec::<f32>::try_from(head.grad().get(i64::from(y))).unwrap();
            let v = f.vector(j);
            assert_eq!(v.len(), g.len(), "a feature vector is a row of the head");
            let d = g
                .iter()
                .zip(v)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let scale = g.iter().map(|a| a.abs()).fold(1.0f32, f32::max);
            // The same h scaled by (1 - p) two ways (autograd's softmax backward, ours):
            // a few roundings of h (≤ 8u ≈ 5e-7 of it) and p's (≤ 8u of 1); 1e-5 of the
            // largest entry leaves a margin of 20.
            assert!(
                d <= 1e-5 * scale,
                "token {j} of {}: max diff {d} (scale {scale})",
                r.prompt_id
            );
            // The recorded probability is exp(log p) of the token itself: one pass, one
            // exp and a rounding either way (≤ 4u = 2.4e-7 of p ≤ 1); 1e-6 leaves 4x.
            assert!((f.token_prob[j] - logp.exp().double_value(&[]) as f32).abs() < 1e-6);
        }
    }
}

#[test]
fn chunking_changes_nothing_but_round_off() {
    let (_d, p) = policy(true);
    let rs = rows();
    let a = run(&settings(1), JOB, &p.model, &rs, &mut |_| {}).unwrap();
    let b = run(&settings(5), JOB, &p.model, &rs, &mut |_| {}).unwrap();
    // Passes cut by a token budget as well (a budget below one row: one row a pass).
    let by_tokens = |t: usize| Settings {
        chunk_tokens: Some(t),
        ..settings(5)
    };
    let c = run(&by_tokens(20), JOB, &p.model, &rs, &mut |_| {}).unwrap();
    let d = run(&by_tokens(1), JOB, &p.model, &rs, &mut |_| {}).unwrap();
    assert_eq!(d, a, "one row a pass either way: identical");
    assert!(!a.is_empty());
    assert_eq!((b.len(), c.len()), (a.len(), a.len()));
    for (x, y) in a.iter().zip(&b).chain(a.iter().zip(&c)) {
        assert_eq!(x.features.len(), y.features.len());
        let d = x
            .features
            .iter()
            .zip(&y.features)
            .map(|(u, v)| (u - v).abs())
            .fold(0.0f32, f32::max);
        // Passes of other shapes sum in other orders: the f32 round-off bound of the final
        // hidden state (`deltarl_model::roundoff`), of which the vectors are (1 - p) h.
        let scale = x.features.iter().map(|u| u.abs()).fold(1.0f32, f32::max);
        let tol = p
            .model
            .f32_hidden_tolerance(p.model.config.max_position_embeddings)
            + p.model
                .f32_logprob_tolerance(p.model.config.max_position_embeddings);
        assert!(
            f64::from(d) <= tol * f64::from(scale),
            "{d} (scale {scale}, tolerance {tol:e})"
        );
    }
    // The LM head in chunks of 1 and 4 tokens (whole passes of 5 rows hold 20 response
    // tokens): the head's per-token arithmetic is the whole pass's, but a product of one
    // row runs another kernel than one of twenty, so the rows agree to the f32 round-off
    // bound of a log-prob (`deltarl_model::roundoff`): log-probs and entropies within it,
    // probabilities within it relative (|Δp| ≤ p·|Δ log p|), vectors within it and the
    // hidden state's relative bound of their largest entry.
    let tol = p
        .model
        .f32_logprob_tolerance(p.model.config.max_position_embeddings);
    let vtol = tol
        + p.model
            .f32_hidden_tolerance(p.model.config.max_position_embeddings);
    let vocab = p.model.config.vocab_size as u64;
    for tokens in [1, 4] {
        let s = Settings {
            head_chunk_bytes: 4 * vocab * tokens,
            layout: deltarl_teacher::Layout::Padded,
            ..settings(5)
        };
        let chunked = run(&s, JOB, &p.model, &rs, &mut |_| {}).unwrap();
        assert_eq!(chunked.len(), b.len());
        for (x, y) in chunked.iter().zip(&b) {
            let close = |u: &[f32], v: &[f32], tol: f64| {
                u.len() == v.len()
                    && u.iter()
                        .zip(v)
                        .all(|(a, b)| f64::from((a - b).abs()) <= tol * f64::from(a.abs().max(1.0)))
            };
            let vscale = x.features.iter().map(|u| u.abs()).fold(1.0f32, f32::max);
            assert!(
                close(&x.logprob, &y.logprob, tol)
                    && close(&x.entropy, &y.entropy, tol)
                    && x.token_prob
                        .iter()
                        .zip(&y.token_prob)
                        .all(|(a, b)| f64::from((a - b).abs()) <= tol * f64::from(*a))
                    && close(&x.features, &y.features, vtol * f64::from(vscale)),
                "head in chunks of {tokens}: {x:?} vs {y:?}"
            );
        }
    }
    // A projection to fewer dimensions is seeded and recorded in the rows' dim.
    let s = Settings {
        project_dim: Some(8),
        seed: 9,
        ..settings(5)
    };
    let c = run(&s, JOB, &p.model, &rs, &mut |_| {}).unwrap();
    assert_eq!(c[0].dim, 8);
    assert_eq!(run(&s, JOB, &p.model, &rs, &mut |_| {}).unwrap(), c);
}

#[test]
fn bad_token_ids_name_the_row() {
    let (_d, p) = policy(true);
    let mut rs = rows();
    rs[2].response_token_ids[0] = 10_000;
    let err = run(&settings(2), JOB, &p.model, &rs, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("p2") && err.contains("10000"), "{err}");
}

#[test]
fn non_finite_features_are_refused_naming_the_response() {
    let (_d, p) = policy(true);
    tch::no_grad(|| {
        let mut vars = p.vs.variables();
        let mut names: Vec<String> = vars.keys().cloned().collect();
        names.sort();
        let w = vars.get_mut(&names[0]).unwrap();
        let _ = w.fill_(f64::NAN);
    });
    let rs = rows();
    let err = run(&settings(2), JOB, &p.model, &rs, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&rs[0].prompt_id) && err.contains("non-finite"),
        "{err}"
    );
}
