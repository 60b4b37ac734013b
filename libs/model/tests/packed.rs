//! Decoding through MKL's packed matrix product (`deltarl_model::packed`) gives the samples
//! of decoding through libtorch's `linear`, within float round-off: on a random model whose
//! MLP and head are large enough to pack, greedy tokens agree up to the first near tie
//! and every log-prob within the model's f32 bound. Its own test binary: it turns packing
//! off and on for the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_model::generate::{generate, Request, Sample, SampleSettings};
use deltarl_model::{build, init_weights, packed, Dtype, Policy, Qwen3Config, Tokenizer};
use tch::Device;

mod common;

use common::greedy_gaps;

/// A Qwen3 of hidden 256: its gate/up/down (256 x 2,048) and head (2,048 x 256) are
/// 2^19 values each, the smallest that pack; its attention projections do not.
fn policy(dir: &std::path::Path) -> Policy {
    tch::set_num_threads(2);
    let tok = dir.join("tokenizer.json");
    std::fs::write(&tok, deltarl_data::tokenizer_json()).unwrap();
    let cfg: Qwen3Config = serde_json::from_value(serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 2048, "hidden_size": 256, "intermediate_size": 2048,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "max_position_embeddings": 64, "tie_word_embeddings": false,
        "rope_theta": 10000.0, "eos_token_id": 1
    }))
    .unwrap();
    let mut p = build(
        &cfg,
        Tokenizer::from_file(&tok).unwrap(),
        Device::Cpu,
        Dtype::F32,
    )
    .unwrap();
    init_weights(&mut p, 7);
    // Weights scaled up so the logits spread (a random model's are nearly flat).
    tch::no_grad(|| {
        for (_, mut v) in p.vs.variables() {
            let _ = v.g_mul_scalar_(4.0);
        }
    });
    p
}

#[test]
fn packed_decoding_samples_what_unpacked_decoding_samples() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path());
    // The premise: this libtorch has MKL's packed product and the model packs its three
    // MLP matrices per layer and its head (and nothing else).
    assert!(packed::available(), "MKL's packed sgemm was not found");
    let pack = p.model.pack().expect("the model packs");
    assert_eq!(pack.matrices(), 2 * 3 + 1);
    drop(pack);

    let n = 24;
    let s = SampleSettings {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: n,
        eos_ids: Vec::new(),
        stop_strings: Vec::new(),
        max_batch_rows: 64,
        max_cache_tokens: None,
        session_rows: None,
    };
    // Seven prompts of 1 to 19 tokens, one greedy sample each, decoded in one batch.
    let reqs: Vec<Request> = (0..7u32)
        .map(|i| Request {
            prompt_ids: (0..1 + (i * 7) % 19)
                .map(|t| 2 + (i * 13 + t * 5) % 2000)
                .collect(),
            seeds: vec![u64::from(i)],
        })
        .collect();
    let run = |on: bool| -> Vec<Sample> {
        packed::set_enabled(on);
        let out = generate(&p.model, &p.tokenizer, &reqs, &s, &mut |_, _| {}).unwrap();
        packed::set_enabled(true);
        out.into_iter().map(|mut g| g.remove(0)).collect()
    };
    let (with, without) = (run(true), run(false));
    assert_eq!(with.len(), reqs.len());
    assert_eq!(without.len(), reqs.len());

    // Both are f32 evaluations of the same model: log-probs within its round-off bound,
    // tokens equal up to the first step whose two largest logits lie within twice the
    // statistical size of the round-off (either evaluation may win there).
    let positions = p.model.config.max_position_embeddings;
    let tol = p.model.f32_logprob_tolerance(positions);
    let typical = p.model.f32_logit_statistical(positions);
    let (mut compared, mut worst, mut identical) = (0, 0.0f64, 0);
    for ((req, a), b) in reqs.iter().zip(&with).zip(&without) {
        assert_eq!(a.tokens.len(), n);
        assert_eq!(b.tokens.len(), n);
        identical += usize::from(a == b);
        let gaps = greedy_gaps(&p, &req.prompt_ids, &b.tokens);
        let sure = gaps.iter().position(|&g| g <= 2.0 * typical).unwrap_or(n);
        assert_eq!(
            a.tokens[..sure],
            b.tokens[..sure],
            "prompt {:?}",
            req.prompt_ids
        );
        for (x, y) in a.logprobs[..sure].iter().zip(&b.logprobs[..sure]) {
            let d = f64::from((x - y).abs());
            assert!(d <= tol, "log-probs differ by {d:e} > {tol:e}");
            worst = worst.max(d);
        }
        compared += sure;
    }
    assert!(
        compared >= reqs.len() * n / 2,
        "only {compared} steps compared"
    );
    eprintln!(
        "packed vs unpacked: {compared} steps compared, largest log-prob difference {worst:e} \
         (bound {tol:e}); {identical} of {} samples bit-identical",
        reqs.len()
    );
}
