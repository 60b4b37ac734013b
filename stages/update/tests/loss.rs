//! The loss family: hand-checked token losses, and DelTA with lam_min = lam_max = 1 gives
//! exactly DAPO's loss, gradients and updated weights.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use deltarl_optim::{AdamW, AdamWSettings};
use deltarl_update::{
    run, token_loss, token_weights, Aggregation, LossSettings, Settings, TrainRow,
};
use tch::{Device, Tensor};

fn loss_settings(agg: Aggregation) -> LossSettings {
    LossSettings {
        surrogate: Default::default(),
        ratio: Default::default(),
        eps_low: 0.2,
        eps_high: 0.28,
        dual_clip: Some(10.0),
        aggregation: agg,
        norm_len: 10.0,
        kl_coef: 0.0,
        entropy_coef: 0.0,
        future_kl: None,
    }
}

fn vals(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(tch::Kind::Double)).unwrap()
}

#[test]
fn token_loss_by_hand() {
    let s = loss_settings(Aggregation::TokenMean);
    // ratios 1.5, 1.5, 0.5, e^5 with advantages +1, -1, +1, -1.
    let logp = Tensor::from_slice(&[1.5f64.ln(), 1.5f64.ln(), 0.5f64.ln(), 5.0]);
    let old = Tensor::zeros([4], (tch::Kind::Double, Device::Cpu));
    let adv = Tensor::from_slice(&[1.0f64, -1.0, 1.0, -1.0]);
    let tl = token_loss(&logp, &old, &adv, &[4], &s);
    let l = vals(&tl.loss);
    // A > 0, rho 1.5: max(-1.5, -1.28) = -1.28 (clipped above at 1 + eps_high).
    // f64 throughout: exp(ln 1.5) and a product or two of numbers ≤ 10, ~1e-15 off;
    // 1e-12 is slack.
    assert!((l[0] + 1.28).abs() < 1e-12);
    // A < 0, rho 1.5: max(1.5, 1.28) = 1.5, under the dual clip 10.
    assert!((l[1] - 1.5).abs() < 1e-12);
    // A > 0, rho 0.5: max(-0.5, -0.8) = -0.5 (unclipped: pessimistic bound).
    assert!((l[2] + 0.5).abs() < 1e-12);
    // A < 0, rho e^5 = 148.4: the dual clip caps the loss at -A c = 10.
    assert!((l[3] - 10.0).abs() < 1e-12);
    assert_eq!(vals(&tl.clipped), vec![1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn aggregation_weights_by_hand() {
    // Two responses of 2 and 3 tokens in a mini-batch of 10 tokens / 4 responses.
    let w = token_weights(&loss_settings(Aggregation::TokenMean), &[2, 3], 10, 4);
    assert_eq!(w, vec![0.1; 5]);
    let w = token_weights(
        &loss_settings(Aggregation::SeqMeanTokenMean),
        &[2, 3],
        10,
        4,
    );
    assert_eq!(w, vec![0.125, 0.125, 1.0 / 12.0, 1.0 / 12.0, 1.0 / 12.0]);
    let w = token_weights(
        &loss_settings(Aggregation::SeqMeanTokenSumNorm),
        &[2, 3],
        10,
        4,
    );
    assert_eq!(w, vec![0.025; 5]);
}

fn policy() -> (tempfile::TempDir, deltarl_model::Policy) {
    common::tiny_policy()
}

/// Response `i`'s token ids (3 + i of them).
fn response_ids(i: usize) -> Vec<u32> {
    (0..(3 + i))
        .map(|k| 6 + ((k * 5 + i) % 20) as u32)
        .collect()
}

/// Response `i`'s sequence advantage: the even ones right, the odd ones wrong.
fn advantage(i: usize) -> f32 {
    if i.is_multiple_of(2) {
        1.0
    } else {
        -0.7
    }
}

fn train_rows(coeffs: &[Vec<f32>], shifts: &[Vec<f32>]) -> Vec<TrainRow> {
    (0..6)
        .map(|i| TrainRow {
            prompt_id: format!("p{}", i / 3),
            prompt_ids: vec![3, 4, 5 + i as u32],
            response_ids: response_ids(i),
            old_logprobs: (0..(3 + i)).map(|k| -3.0 - 0.1 * k as f32).collect(),
            advantage: advantage(i),
            coeff: coeffs[i].clone(),
            shift: shifts.get(i).cloned().unwrap_or_default(),
        })
        .collect()
}

const ADAM: AdamWSettings = AdamWSettings {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.1,
};

/// Token-mean settings at lr 1e-3, one micro-batch of the six rows.
/// One update of `p` on responses with these coefficients (one process).
fn train(
    s: &Settings,
    p: &deltarl_model::Policy,
    opt: &mut AdamW,
    coeffs: &[Vec<f32>],
) -> Vec<deltarl_schemas::UpdateRow> {
    train_shifted(s, p, opt, coeffs, &[])
}

/// One update with coefficients and advantage shifts (`[]` = none).
fn train_shifted(
    s: &Settings,
    p: &deltarl_model::Policy,
    opt: &mut AdamW,
    coeffs: &[Vec<f32>],
    shifts: &[Vec<f32>],
) -> Vec<deltarl_schemas::UpdateRow> {
    run(
        s,
        1,
        p,
        opt,
        None,
        &train_rows(coeffs, shifts),
        None,
        &mut |_| {},
    )
    .unwrap()
}

fn token_mean_settings(optimizer_steps: usize) -> Settings {
    Settings {
        loss: loss_settings(Aggregation::TokenMean),
        optimizer_steps,
        micro_batch_rows: 6,
        micro_batch_tokens: None,
        activation_checkpointing: false,
        warmup_steps: 0,
        lr: 1e-3,
        grad_clip: 1.0,
        head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
        layout: deltarl_teacher::Layout::Padded,
        temperature: 1.0,
        seed: 1,
        ..common::settings()
    }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn weights(p: &deltarl_model::Policy) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> =
        p.vs.variables()
            .into_iter()
            .map(|(n, t)| {
                let mut b = vec![0u8; t.numel() * 4];
                t.copy_data_u8(&mut b, t.numel());
                (n, b)
            })
            .collect();
    v.sort();
    v
}

/// DAPO's coefficients: 1 on every token of the six responses.
fn ones() -> Vec<Vec<f32>> {
    (0..6).map(|i| vec![1.0; response_ids(i).len()]).collect()
}

/// What DelTA at unit lambdas and KTAE at `top = 0` write (coefficients of exactly 1, KTAE
/// shifts of +0.0: `stages/coeffs/tests/neutral.rs`) trains exactly as DAPO: the same
/// losses, gradient norms and weights, bit for bit; a nonzero shift trains differently.
#[test]
fn coefficients_of_one_and_zero_shifts_are_dapo_bit_for_bit() {
    let c_dapo = ones();
    let zero_shift: Vec<Vec<f32>> = c_dapo.iter().map(|c| vec![0.0; c.len()]).collect();
    // A shift on the right answers' tokens only (a KTAE-like advantage change).
    let some_shift: Vec<Vec<f32>> = c_dapo
        .iter()
        .enumerate()
        .map(|(i, c)| vec![if i % 2 == 0 { 0.25 } else { 0.0 }; c.len()])
        .collect();
    let s = Settings {
        loss: loss_settings(Aggregation::TokenMean),
        optimizer_steps: 2,
        micro_batch_rows: 2,
        micro_batch_tokens: None,
        activation_checkpointing: false,
        warmup_steps: 0,
        lr: 1e-2,
        grad_clip: 1.0,
        head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
        layout: deltarl_teacher::Layout::Padded,
        temperature: 1.0,
        seed: 5,
        ..common::settings()
    };
    let adam = AdamWSettings {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let mut results = Vec::new();
    let none: Vec<Vec<f32>> = Vec::new();
    for (coeffs, shifts) in [
        (&c_dapo, &none),
        (&c_dapo, &zero_shift),
        (&c_dapo, &some_shift),
    ] {
        let (_d, p) = policy();
        let mut opt = AdamW::new(&p.vs, adam);
        let metrics = train_shifted(&s, &p, &mut opt, coeffs, shifts);
        results.push((metrics, weights(&p)));
    }
    assert_eq!(results[0].0.len(), 2);
    let zero = &results[1];
    assert_eq!(zero.0.len(), results[0].0.len());
    for (a, b) in results[0].0.iter().zip(&zero.0) {
        assert_eq!(a.loss.to_bits(), b.loss.to_bits());
        assert_eq!(a.grad_norm.to_bits(), b.grad_norm.to_bits());
    }
    assert!(zero.1 == results[0].1, "updated weights differ");
    // The shifts reach the loss: a nonzero one trains differently.
    assert!(results[2].1 != results[0].1, "the shifts changed nothing");
    // And the update moved the weights.
    let (_d, p0) = policy();
    assert!(weights(&p0) != results[0].1);
}

#[test]
fn micro_batching_does_not_change_the_objective() {
    let coeffs: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0; 3 + i]).collect();
    for agg in [
        Aggregation::TokenMean,
        Aggregation::SeqMeanTokenMean,
        Aggregation::SeqMeanTokenSumNorm,
    ] {
        let mut losses = Vec::new();
        // One row a pass, all six, and passes of at most 20 tokens (two or three rows).
        for (micro, tokens) in [(1, None), (6, None), (6, Some(20))] {
            let (_d, p) = policy();
            let mut opt = AdamW::new(
                &p.vs,
                AdamWSettings {
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.0,
                },
            );
            let s = Settings {
                loss: loss_settings(agg),
                optimizer_steps: 1,
                micro_batch_rows: micro,
                micro_batch_tokens: tokens,
                activation_checkpointing: false,
                warmup_steps: 0,
                lr: 1e-3,
                grad_clip: 0.0,
                head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
                layout: deltarl_teacher::Layout::Padded,
                temperature: 1.0,
                seed: 5,
                ..common::settings()
            };
            let m = train(&s, &p, &mut opt, &coeffs);
            losses.push((m[0].loss, m[0].grad_norm));
        }
        // Other micro-batchings of the same tokens: the loss sums the same per-token f32
        // terms in f64 in other groupings and passes of other shapes round them otherwise
        // (f32 round-off of terms of size ≤ 1, at most ~1e-7 each): 1e-6; the gradient norm
        // sums ≤ 50 tokens' gradients per element in other groupings, ≤ 50·2^-24 = 3e-6 of
        // it, so 1e-5 relative.
        for other in &losses[1..] {
            assert!((losses[0].0 - other.0).abs() < 1e-6, "{agg:?}: {losses:?}");
            assert!(
                (losses[0].1 - other.1).abs() < 1e-5 * losses[0].1.max(1.0),
                "{agg:?}: {losses:?}"
            );
        }
    }
}

#[test]
fn activation_checkpointing_gives_the_plain_step() {
    let coeffs: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0; 3 + i]).collect();
    let mut results = Vec::new();
    for checkpointing in [false, true] {
        let (_d, p) = policy();
        let mut opt = AdamW::new(&p.vs, ADAM);
        let s = Settings {
            micro_batch_rows: 4,
            activation_checkpointing: checkpointing,
            ..token_mean_settings(2)
        };
        let m = train(&s, &p, &mut opt, &coeffs);
        results.push((m, weights(&p)));
    }
    let ((plain, w0), (ckpt, w1)) = (&results[0], &results[1]);
    assert_eq!(plain.len(), ckpt.len());
    // The norm: gradients that agree to an f32 ulp element by element (below), ≤ 2^-24
    // relative each, so their norm to 6e-8; 1e-6 leaves 16x.
    for (a, b) in plain.iter().zip(ckpt) {
        assert_eq!(a.loss, b.loss);
        assert!(
            (a.grad_norm - b.grad_norm).abs() <= 1e-6 * a.grad_norm,
            "{a:?} vs {b:?}"
        );
    }
    // Tied embeddings sum the head's and the embedding's gradients in the other order,
    // so the weights agree to round-off (an f32 ulp), not always bit for bit: a
    // gradient's last bit moves AdamW's step g/(|g| + eps) by at most lr·2^-24·|g|/eps,
    // far below 1e-6 of a weight at lr 1e-3 unless |g| ~ eps; 1e-6 relative (of 1e-3 at
    // least) holds while no summed gradient cancels to near eps.
    assert_eq!(w0.len(), w1.len());
    for ((name, a), (other, b)) in w0.iter().zip(w1) {
        assert_eq!(name, other);
        let (a, b) = (floats(a), floats(b));
        assert_eq!(a.len(), b.len(), "{name}");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-6 * x.abs().max(1e-3),
                "{name}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn optimizer_state_round_trips() {
    let (_d, p) = policy();
    let coeffs: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0; 3 + i]).collect();
    let adam = ADAM;
    let mut opt = AdamW::new(&p.vs, adam);
    let s = token_mean_settings(1);
    train(&s, &p, &mut opt, &coeffs);
    let dir = tempfile::tempdir().unwrap();
    opt.save(dir.path(), None).unwrap();
    let mut again = AdamW::new(&p.vs, adam);
    again.load(dir.path()).unwrap();
    assert_eq!(again.step, 1);
    let bad = tempfile::tempdir().unwrap();
    let err = again.load(bad.path()).unwrap_err().to_string();
    assert!(err.contains("optimizer.safetensors"), "{err}");
}

#[test]
fn a_step_with_a_non_finite_gradient_norm_is_skipped() {
    let (_d, p) = policy();
    let coeffs: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0; 3 + i]).collect();
    let mut rows = train_rows(&coeffs, &[]);
    for r in &mut rows {
        r.advantage = f32::NAN;
    }
    let adam = ADAM;
    let mut opt = AdamW::new(&p.vs, adam);
    let s = token_mean_settings(2);
    let before = weights(&p);
    let m = run(&s, 1, &p, &mut opt, None, &rows, None, &mut |_| {}).unwrap();
    assert_eq!(m.len(), 2);
    assert!(m.iter().all(|r| r.grad_norm.is_nan()), "{m:?}");
    assert_eq!(opt.step, 0);
    assert_eq!(weights(&p), before);
}

/// An entropy coefficient past f32's range (the adversarial run's 1e308, which the
/// configuration now refuses) makes every gradient norm non-finite: the update is refused
/// before anything is written, and the error names the keys that scale the loss.
#[test]
fn an_update_with_no_finite_step_names_the_loss_keys() {
    let coeffs: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0; 3 + i]).collect();
    let (_d, p) = policy();
    let mut opt = AdamW::new(&p.vs, ADAM);
    let mut s = token_mean_settings(2);
    s.loss.entropy_coef = 1e300;
    let m = train(&s, &p, &mut opt, &coeffs);
    assert_eq!(m.len(), 2);
    assert!(m.iter().all(|r| !r.grad_norm.is_finite()), "{m:?}");
    let e = deltarl_update::shell::check_steps(&m, &p, &s)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("all 2 optimizer steps") && e.contains("update.entropy_coef = 1e300"),
        "{e}"
    );
    // At the configuration's greatest coefficient (100) the same steps are finite.
    s.loss.entropy_coef = 100.0;
    let (_d, p) = policy();
    let mut opt = AdamW::new(&p.vs, ADAM);
    let m = train(&s, &p, &mut opt, &coeffs);
    assert_eq!(deltarl_update::shell::check_steps(&m, &p, &s).unwrap(), 0);
}
