//! FIPO's Future-KL token weights: against ms-swift's implementation (numbers in
//! `fipo_reference.json`, made by `fipo_reference.py` from its checkout), by hand, and in
//! the loss: each token's loss times its weight, and DAPO exactly where the policy has not
//! moved yet (every ratio 1, as in an iteration's first optimizer step).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_update::{token_loss, Aggregation, FutureKl, LossSettings, RatioLevel, Surrogate};
use tch::{Kind, Tensor};

#[derive(serde::Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    settings: CaseSettings,
    lengths: Vec<usize>,
    log_ratio: Vec<f64>,
    adv: Vec<f64>,
    weights: Vec<f64>,
}

#[derive(serde::Deserialize)]
struct CaseSettings {
    decay_rate: f64,
    clip_range: f64,
    clip_high_only: bool,
    safety: Option<f64>,
    delta: Option<f64>,
}

/// The reference's arguments, None as 0 (off), as `[update.fipo]` passes them.
fn future_kl(c: &CaseSettings) -> FutureKl {
    FutureKl::from_reference(
        c.decay_rate,
        c.clip_range,
        c.clip_high_only,
        c.delta.unwrap_or(0.0),
        c.safety.unwrap_or(0.0),
    )
}

#[test]
fn weights_match_ms_swifts() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fipo_reference.json");
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fipo_reference.json"))
            .unwrap();
    assert_eq!(reference.cases.len(), 3);
    let mut moved = 0;
    for (n, c) in reference.cases.iter().enumerate() {
        let total: usize = c.lengths.iter().sum();
        assert_eq!(c.log_ratio.len(), total);
        assert_eq!(c.adv.len(), total);
        assert_eq!(c.weights.len(), total);
        let ratio: Vec<f64> = c.log_ratio.iter().map(|x| x.exp()).collect();
        let ours = future_kl(&c.settings).weights(&c.log_ratio, &ratio, &c.adv, &c.lengths);
        assert_eq!(ours.len(), total);
        // Both in f64: the reference sums gamma^(k-t) d_k over at most 150 terms (|d| <=
        // 2.5) as a matrix product, ours by Horner's rule backwards; each is within
        // 150 * 2.5 * 2^-52 ~ 1e-13 of the exact sum, and exp of sums below 2 triples that:
        // 1e-12 is a bound, not a guess.
        for (t, (g, w)) in ours.iter().zip(&c.weights).enumerate() {
            assert!(
                (g - w).abs() < 1e-12,
                "case {n} token {t}: ours {g}, theirs {w}"
            );
        }
        moved += c.weights.iter().filter(|&&w| w != 1.0).count();
    }
    // Not vacuous: most weights are not 1.
    assert!(moved > 300, "{moved}");
}

#[test]
fn weights_by_hand() {
    // One response of three tokens, gamma 1/2, no clip: F_2 = d_2, F_1 = d_1 + F_2 / 2,
    // F_0 = d_0 + F_1 / 2.
    let fk = FutureKl {
        gamma: 0.5,
        clip: None,
        ratio_cap: Some(3.0),
        safety: Some(2.0),
    };
    let d = [0.2, -0.4, 0.8];
    let ratio: Vec<f64> = d.iter().map(|x: &f64| x.exp()).collect();
    let w = fk.weights(&d, &ratio, &[1.0; 3], &[3]);
    let f2 = 0.8f64;
    let f1 = -0.4 + f2 / 2.0;
    let f0 = 0.2 + f1 / 2.0;
    // Three exps of sums of three terms: a few ulps.
    for (g, want) in w.iter().zip([f0.exp(), f1.exp(), f2.exp()]) {
        assert!((g - want).abs() < 1e-15, "{g} vs {want}");
    }
    // Responses do not see each other's tokens: the same three as two responses.
    let w = fk.weights(&d, &ratio, &[1.0; 3], &[1, 2]);
    assert!((w[0] - 0.2f64.exp()).abs() < 1e-15);
    // A ratio above the cap (e^1.5 > 3) takes no part; with a negative advantage and a
    // ratio above the safety threshold (2) the weight is clamped into [0.8, 1].
    let d = [0.0, 1.5];
    let ratio: Vec<f64> = d.iter().map(|x: &f64| x.exp()).collect();
    let w = fk.weights(&d, &ratio, &[-1.0, -1.0], &[2]);
    assert_eq!(w, vec![1.0, 1.0]);
    let clipped = FutureKl {
        clip: Some((1.0, 1.2)),
        ratio_cap: None,
        safety: None,
        ..fk
    };
    let w = clipped.weights(&[0.0, -0.5, 0.5], &[1.0; 3], &[1.0; 3], &[3]);
    assert_eq!(w, vec![1.0, 1.0, 1.2]);
}

fn settings(future_kl: Option<FutureKl>) -> LossSettings {
    LossSettings {
        surrogate: Surrogate::Clip,
        ratio: RatioLevel::Token,
        eps_low: 0.2,
        eps_high: 0.28,
        dual_clip: Some(10.0),
        aggregation: Aggregation::TokenMean,
        norm_len: 8.0,
        kl_coef: 0.0,
        entropy_coef: 0.0,
        future_kl,
    }
}

fn vals(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(Kind::Double)).unwrap()
}

#[test]
fn the_loss_is_dapos_times_the_weights() {
    let fk = FutureKl {
        gamma: 2f64.powf(-1.0 / 32.0),
        clip: Some((0.8, 1.2)),
        ratio_cap: Some(10.0),
        safety: Some(4.0),
    };
    let lengths = [3usize, 4];
    let logp: Vec<f64> = (0..7).map(|i| -1.0 - 0.1 * i as f64).collect();
    let shift = [0.1, -0.05, 0.3, 0.02, -0.2, 0.15, 1.6];
    let old: Vec<f64> = logp.iter().zip(shift).map(|(l, s)| l - s).collect();
    let adv: Vec<f64> = [1.0, 1.0, 1.0, -0.7, -0.7, -0.7, -0.7].to_vec();
    let t = |v: &[f64]| Tensor::from_slice(v);
    let run = |s: &LossSettings| {
        let lp = t(&logp).set_requires_grad(true);
        let tl = token_loss(&lp, &t(&old), &t(&adv), &lengths, s);
        let total = tl.loss.sum(Kind::Double);
        total.backward();
        (vals(&tl.loss), vals(&lp.grad()))
    };
    let (dapo, dapo_grad) = run(&settings(None));
    let (fipo, fipo_grad) = run(&settings(Some(fk)));
    let ratio: Vec<f64> = shift.iter().map(|x: &f64| x.exp()).collect();
    let w = fk.weights(&shift, &ratio, &adv, &lengths);
    assert_eq!(fipo.len(), 7);
    assert!(w.iter().any(|&x| x != 1.0));
    for i in 0..7 {
        // A product of two f64 values (the weight went through one f64 tensor): exact up
        // to one rounding.
        assert!(
            (fipo[i] - dapo[i] * w[i]).abs() <= 1e-15 * dapo[i].abs(),
            "{i}"
        );
        // The weight is a constant: the gradient is scaled by it, nothing more.
        assert!(
            (fipo_grad[i] - dapo_grad[i] * w[i]).abs() <= 1e-15 * dapo_grad[i].abs().max(1e-300)
        );
    }
    // Where the policy has not moved (every ratio 1), FIPO is DAPO bit for bit.
    let lp = t(&logp);
    let a = token_loss(&lp, &lp, &t(&adv), &lengths, &settings(None));
    let b = token_loss(&lp, &lp, &t(&adv), &lengths, &settings(Some(fk)));
    assert_eq!(vals(&a.loss), vals(&b.loss));
}
