//! The warm start: its weighted supervised loss by hand, and its refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_model::random_policy;
use deltarl_optim::{AdamW, AdamWSettings};
use deltarl_warmstart::sft::{train, SftSettings};
use tch::Device;

const ADAM: AdamWSettings = AdamWSettings {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.1,
};

fn policy() -> (tempfile::TempDir, deltarl_model::Policy) {
    let dir = tempfile::tempdir().unwrap();
    let p = random_policy(
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

/// The warm start's weighted loss, by hand: with weight 3 on token 7 and 0 on token 9, the
/// first step's loss is sum(w * nll) / sum(w) over the teacher-forced log-probs.
#[test]
fn the_warm_start_loss_is_the_weighted_token_mean() {
    let (_d, p) = policy();
    let examples = vec![
        (vec![3u32, 4], vec![7u32, 8, 9]),
        (vec![5u32], vec![7u32, 10]),
    ];
    let pairs: Vec<(&[u32], &[u32])> = examples
        .iter()
        .map(|(a, b)| (a.as_slice(), b.as_slice()))
        .collect();
    let lp = deltarl_teacher::token_stats(
        &p.model,
        &pairs,
        deltarl_teacher::Layout::Padded,
        1.0,
        usize::MAX,
        Device::Cpu,
    )
    .logprob;
    let lp: Vec<f64> = Vec::<f32>::try_from(&lp)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    let mut weights = vec![1.0f32; 12];
    weights[7] = 3.0;
    weights[9] = 0.0;
    // Targets in order: 7, 8, 9 | 7, 10 -> weights 3, 1, 0, 3, 1.
    let w = [3.0, 1.0, 0.0, 3.0, 1.0];
    assert_eq!(lp.len(), w.len());
    let expect = -lp.iter().zip(w).map(|(l, w)| l * w).sum::<f64>() / 8.0;
    let plain = -lp.iter().sum::<f64>() / 5.0;
    for (token_weights, want) in [(weights, expect), (Vec::new(), plain)] {
        let (_d, p) = policy();
        let mut opt = AdamW::new(&p.vs, ADAM);
        let s = SftSettings {
            steps: 1,
            lr: 1e-3,
            warmup_steps: 0,
            grad_clip: 1.0,
            token_weights,
        };
        let loss = train(&s, &p, &mut opt, &mut |_| examples.clone(), &mut |_, _| {});
        // Both evaluate one pass of the same shape; they differ in how the 5 weighted
        // terms are summed (f32 or f64): ≤ 5·2^-24 of Σ|w·lp| / 8 ≤ 10 (weights summing
        // to 8, |lp| ≤ 10 for this random model's small vocabulary): 3e-6, so 1e-5.
        assert!((loss - want).abs() < 1e-5, "{loss} vs {want}");
    }
}

fn settings(max_positions: usize) -> deltarl_warmstart::Settings {
    deltarl_warmstart::Settings {
        seed: 3,
        warmstart: deltarl_warmstart::WarmstartOptions {
            steps: 2,
            batch_size: 4,
            lr: 1e-3,
            warmup_steps: 1,
            wrong_frac: 0.3,
            digit_weight: 1.0,
        },
        tiny: deltarl_model::Shape {
            hidden_size: 16,
            intermediate_size: 32,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            max_position_embeddings: max_positions,
            tie_word_embeddings: true,
        },
        template: "Q: {question}\nA: ".into(),
        dtype: deltarl_model::Dtype::F32,
        heldout: deltarl_sample::Sampling {
            seed: 3,
            template: "Q: {question}\nA: ".into(),
            max_new_tokens: 8,
            stop: Vec::new(),
            max_batch_rows: 8,
            max_cache_tokens: None,
            session_rows: None,
            extract: Default::default(),
            extract_fallbacks: Vec::new(),
        },
        task: deltarl_data::Task::Arith,
    }
}

/// A context too short for the longest worked example is refused by key before a step is
/// taken (and nothing is saved); a long enough one trains the same weights twice.
#[test]
fn the_warm_start_refuses_a_short_context_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let short =
        deltarl_warmstart::write_base(&settings(16), dir.path(), Device::Cpu, &mut |_, _| {
            panic!("a step was taken")
        });
    match short {
        Err(deltarl_warmstart::Error::Context {
            limit: 16, tokens, ..
        }) => assert!(tokens > 16),
        other => panic!("expected the context refusal, got {:?}", other.err()),
    }
    assert!(!dir.path().join("model.safetensors").exists());
    let mut losses = Vec::new();
    let mut weights = Vec::new();
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let mut steps = Vec::new();
        let t =
            deltarl_warmstart::write_base(&settings(64), dir.path(), Device::Cpu, &mut |s, l| {
                steps.push((s, l))
            })
            .unwrap();
        assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(steps[1].1, t.final_loss);
        losses.push(t.final_loss);
        weights.push(std::fs::read(dir.path().join("model.safetensors")).unwrap());
    }
    assert!(losses[0].is_finite());
    assert_eq!(losses[0], losses[1]);
    assert_eq!(weights[0], weights[1]);
}
