//! The chunked LM head (`deltarl_teacher::ChunkedHead`): an update whose passes run the
//! head over chunks of a few tokens gives the whole-head update's losses, gradients and
//! weights — to f32 round-off in f32; in bf16 the gradients to bf16 round-off (the chunks'
//! head-weight gradients are rounded to bf16 one chunk at a time before their f32 sum).
//! bf16 weights after a first AdamW step are not compared: that step is lr * sign(g)
//! wherever |g| >> eps, so a gradient element near zero that rounds to the other sign
//! moves its weight by 2 lr either way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use deltarl_optim::{AdamW, AdamWSettings};
use deltarl_update::{run, Aggregation, LossSettings, Settings, TrainRow};
use tch::{Kind, Tensor};

fn rows() -> Vec<TrainRow> {
    (0..6usize)
        .map(|i| TrainRow {
            prompt_id: format!("p{}", i / 3),
            prompt_ids: vec![3, 4, 5 + i as u32],
            response_ids: (0..(4 + 2 * i))
                .map(|k| 6 + ((k * 5 + i) % 20) as u32)
                .collect(),
            old_logprobs: (0..(4 + 2 * i)).map(|k| -3.0 - 0.1 * k as f32).collect(),
            advantage: if i % 2 == 0 { 1.0 } else { -0.7 },
            coeff: (0..(4 + 2 * i))
                .map(|k| 0.6 + 0.1 * (k % 5) as f32)
                .collect(),
            shift: Vec::new(),
        })
        .collect()
}

struct Outcome {
    loss: f64,
    grad_norm: f64,
    grads: Vec<(String, Tensor)>,
    /// The f32 weights after the step.
    weights: Vec<(String, Tensor)>,
}

/// One update (two micro-batches) with the head in chunks of `chunk_tokens` tokens (None =
/// whole), an entropy bonus and a KL penalty so every path of the head carries gradient.
fn update(bf16: bool, checkpointing: bool, chunk_tokens: Option<u64>) -> Outcome {
    let (dir, mut p) = common::tiny_policy();
    // The KL reference: the same weights, kept in f32.
    deltarl_model::save(&p, dir.path()).unwrap();
    let base = deltarl_model::load(dir.path(), tch::Device::Cpu, deltarl_model::Dtype::F32);
    if bf16 {
        p.vs.bfloat16();
        p.dtype = deltarl_model::Dtype::Bf16;
    }
    let vocab = p.model.config.vocab_size as u64;
    let adam = AdamWSettings {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let mut opt = AdamW::new(&p.vs, adam);
    let s = Settings {
        loss: LossSettings {
            surrogate: Default::default(),
            ratio: Default::default(),
            eps_low: 0.2,
            eps_high: 0.28,
            dual_clip: Some(3.0),
            aggregation: Aggregation::TokenMean,
            norm_len: 16.0,
            kl_coef: 0.05,
            entropy_coef: 0.01,
            future_kl: None,
        },
        optimizer_steps: 1,
        micro_batch_rows: 3,
        micro_batch_tokens: None,
        activation_checkpointing: checkpointing,
        warmup_steps: 0,
        lr: 1e-3,
        grad_clip: 0.0,
        // One f32 [tokens, vocab] buffer of `chunk_tokens` tokens.
        head_chunk_bytes: chunk_tokens.map_or(0, |t| 4 * vocab * t),
        layout: deltarl_teacher::Layout::Padded,
        temperature: 0.9,
        seed: 2,
        ..common::settings()
    };
    let reference = base.unwrap();
    let m = run(
        &s,
        1,
        &p,
        &mut opt,
        Some(&reference.model),
        &rows(),
        None,
        &mut |_| {},
    )
    .unwrap();
    let mut names: Vec<String> = p.vs.variables().into_keys().collect();
    names.sort();
    let vars = p.vs.variables();
    Outcome {
        loss: m[0].loss,
        grad_norm: m[0].grad_norm,
        grads: names
            .iter()
            .map(|n| (n.clone(), opt.grad(n).unwrap().to_kind(Kind::Float)))
            .collect(),
        // The f32 masters of bf16 weights (the bf16 copies differ by whole bf16 steps).
        weights: names
            .iter()
            .map(|n| {
                let w = opt.master(n).unwrap_or(&vars[n]);
                (n.clone(), w.to_kind(Kind::Float))
            })
            .collect(),
    }
}

fn max_rel(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((n, x), (m, y))| {
            assert_eq!(n, m);
            let scale = y.abs().max().double_value(&[]).max(1e-30);
            (x - y).abs().max().double_value(&[]) / scale
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_chunked_head_gives_the_whole_heads_update() {
    tch::set_num_threads(1);
    // (dtype, tolerance of the norm and gradients, of the weights). f32: a chunked head
    // sums a gradient's ≤ 36 token terms in other groupings, ≤ 36·2^-24 ≈ 2.1e-6 of their
    // sum of magnitudes, 1e-5 while that stays under 5x the largest gradient (one thread
    // pinned: the rest is the same arithmetic); one AdamW step of those. bf16: logits
    // round to 2^-8 = 4e-3 relative, so 1e-2; its weights move by lr-sized steps whose
    // sign a near-zero bf16 gradient may flip, so no bound. The loss sums per-token terms
    // computed alike, in f64: 1e-6 is far above its ~1e-15.
    for (bf16, tol, wtol) in [(false, 1e-5, 1e-5), (true, 1e-2, f64::INFINITY)] {
        for checkpointing in [false, true] {
            let whole = update(bf16, checkpointing, None);
            // 5 and 1 tokens a chunk: micro-batches of 18 and 36 response tokens.
            for chunk in [5, 1] {
                let chunked = update(bf16, checkpointing, Some(chunk));
                let what = format!("bf16 {bf16}, checkpointing {checkpointing}, chunk {chunk}");
                let dl = (chunked.loss - whole.loss).abs() / whole.loss.abs();
                let dn = (chunked.grad_norm - whole.grad_norm).abs() / whole.grad_norm;
                let (dg, dw) = (
                    max_rel(&chunked.grads, &whole.grads),
                    max_rel(&chunked.weights, &whole.weights),
                );
                eprintln!("{what}: loss {dl:e}, norm {dn:e}, gradients {dg:e}, weights {dw:e}");
                assert!(whole.grad_norm > 0.0);
                assert!(dl <= 1e-6 && dn <= tol && dg <= tol && dw <= wtol, "{what}");
            }
        }
    }
}
