//! The surrogates beside PPO's clip — CISPO, SAPO — and the sequence-level ratios of GSPO
//! and GSPO-token: by hand, against TRL's own loss code on the same tensors (loss and
//! gradient in f64), and reduced to DAPO's gradient where the ratio is 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_update::{token_loss, token_weights, Aggregation, LossSettings, RatioLevel, Surrogate};
use tch::{Kind, Tensor};

fn settings(surrogate: Surrogate, ratio: RatioLevel, aggregation: Aggregation) -> LossSettings {
    LossSettings {
        surrogate,
        ratio,
        eps_low: 0.2,
        eps_high: 0.28,
        dual_clip: None,
        aggregation,
        norm_len: 8.0,
        kl_coef: 0.0,
        entropy_coef: 0.0,
        future_kl: None,
    }
}

fn vals(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(Kind::Double)).unwrap()
}

/// Element by element within `tol`, the lengths equal first.
fn all_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < tol, "{g} vs {w}");
    }
}

fn f64s(v: &[f64]) -> Tensor {
    Tensor::from_slice(v).to_kind(Kind::Double)
}

/// The objective (weighted sum of token losses) and its gradient with respect to `logp`.
fn objective(
    s: &LossSettings,
    logp: &[f64],
    old: &[f64],
    adv: &[f64],
    lengths: &[usize],
) -> (f64, Vec<f64>) {
    let (loss, grad, _) = objective_scaled(s, logp, old, adv, lengths);
    (loss, grad)
}

/// [`objective`] and `sum_t w_t |l_t|`, the scale of the round-off the f32 aggregation
/// weights bring (each rounded once: 2^-24 relative).
fn objective_scaled(
    s: &LossSettings,
    logp: &[f64],
    old: &[f64],
    adv: &[f64],
    lengths: &[usize],
) -> (f64, Vec<f64>, f64) {
    let lp = f64s(logp).set_requires_grad(true);
    let tl = token_loss(&lp, &f64s(old), &f64s(adv), lengths, s);
    let n: usize = lengths.iter().sum();
    let w: Vec<f64> = token_weights(s, lengths, n, lengths.len())
        .into_iter()
        .map(f64::from)
        .collect();
    let scale = (tl.loss.abs() * f64s(&w))
        .sum(Kind::Double)
        .double_value(&[]);
    let loss = (&tl.loss * f64s(&w)).sum(Kind::Double);
    loss.backward();
    (loss.double_value(&[]), vals(&lp.grad()), scale)
}

#[test]
fn cispo_and_sapo_by_hand() {
    // ratios 1.5 and 8 (A = +1), 0.5 (A = -1).
    let logp = [1.5f64.ln(), 8f64.ln(), 0.5f64.ln()];
    let (old, adv) = ([0.0; 3], [1.0, 1.0, -1.0]);
    let lengths = [3];
    let cispo = settings(
        Surrogate::Cispo { cap: 5.0 },
        RatioLevel::Token,
        Aggregation::TokenMean,
    );
    let lp = f64s(&logp).set_requires_grad(true);
    let tl = token_loss(&lp, &f64s(&old), &f64s(&adv), &lengths, &cispo);
    // -sg(min(rho, 5)) A logp: -1.5 ln 1.5, -5 ln 8, +0.5 ln 0.5. f64 products of
    // numbers below 10: ~1e-15 off; 1e-12 is slack.
    let want = [-1.5 * 1.5f64.ln(), -5.0 * 8f64.ln(), 0.5 * 0.5f64.ln()];
    all_close(&vals(&tl.loss), &want, 1e-12);
    assert_eq!(vals(&tl.clipped), vec![0.0, 1.0, 0.0]);
    // The weight is held constant: d/dlogp = -min(rho, 5) A, the capped token included.
    tl.loss.sum(Kind::Double).backward();
    let grad = vals(&lp.grad());
    all_close(&grad, &[-1.5, -5.0, 0.5], 1e-12);
    // SAPO: -sigmoid(tau (rho - 1)) 4 / tau A with tau 1 (A > 0) and 1.05 (A <= 0).
    let sapo = settings(
        Surrogate::Sapo {
            tau_pos: 1.0,
            tau_neg: 1.05,
        },
        RatioLevel::Token,
        Aggregation::TokenMean,
    );
    let tl = token_loss(&f64s(&logp), &f64s(&old), &f64s(&adv), &lengths, &sapo);
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let want = [
        -sig(0.5) * 4.0,
        -sig(7.0) * 4.0,
        sig(1.05 * -0.5) * 4.0 / 1.05,
    ];
    all_close(&vals(&tl.loss), &want, 1e-12);
}

#[test]
fn sequence_ratios_by_hand() {
    // Two responses: log-ratios (0.2, 0.4) and (-0.3); A = 1 and -1; no clip binds at
    // eps 10.
    let (logp, old) = ([0.2, 0.4, -0.3], [0.0; 3]);
    let (adv, lengths) = ([1.0, 1.0, -1.0], [2, 1]);
    let mut s = settings(
        Surrogate::Clip,
        RatioLevel::Sequence,
        Aggregation::SeqMeanTokenMean,
    );
    (s.eps_low, s.eps_high) = (0.9, 10.0);
    let (loss, grad) = objective(&s, &logp, &old, &adv, &lengths);
    // GSPO: s1 = exp(0.3), s2 = exp(-0.3); loss = mean over responses of -A s.
    let (s1, s2) = (0.3f64.exp(), (-0.3f64).exp());
    assert!((loss - (-s1 + s2) / 2.0).abs() < 1e-12, "{loss}");
    // d/dlogp_t = -A s / |y| / R: the gradient spread evenly over a response's tokens.
    let want = [-s1 / 2.0 / 2.0, -s1 / 2.0 / 2.0, s2 / 2.0];
    all_close(&grad, &want, 1e-12);
    // GSPO-token: the same value, each token's own gradient: -A s / (|y| R) per token
    // weight, times the token's d(pi_t / sg pi_t) = 1.
    s.ratio = RatioLevel::SequenceToken;
    let (loss_t, grad_t) = objective(&s, &logp, &old, &adv, &lengths);
    assert!((loss_t - loss).abs() < 1e-12);
    let want = [-s1 / 2.0 / 2.0, -s1 / 2.0 / 2.0, s2 / 2.0];
    all_close(&grad_t, &want, 1e-12);
    // With per-token advantages (DelTA's coefficients) GSPO-token weights each token by
    // its own A while GSPO mixes them through the mean.
    let adv2 = [2.0, 0.5, -1.0];
    let (_, g_tok) = objective(&s, &logp, &old, &adv2, &lengths);
    s.ratio = RatioLevel::Sequence;
    let (_, g_seq) = objective(&s, &logp, &old, &adv2, &lengths);
    assert!(
        (g_tok[0] - -2.0 * s1 / 4.0).abs() < 1e-12 && (g_tok[1] - -0.5 * s1 / 4.0).abs() < 1e-12
    );
    assert!(
        (g_seq[0] - g_seq[1]).abs() < 1e-12,
        "GSPO spreads its gradient evenly"
    );
}

/// Where every ratio is 1 (the first step on freshly recomputed old log-probs) each
/// surrogate and ratio level has DAPO's gradient, so none changes an on-policy step.
#[test]
fn on_policy_every_variant_has_dapos_gradient() {
    let lengths = [3, 2, 4];
    let logp: Vec<f64> = (0..9).map(|i| -0.1 - 0.13 * i as f64).collect();
    let adv = [0.7, 0.7, 0.7, -1.2, -1.2, 0.4, 0.4, 0.4, 0.4];
    let dapo = settings(Surrogate::Clip, RatioLevel::Token, Aggregation::TokenMean);
    let (_, want) = objective(&dapo, &logp, &logp, &adv, &lengths);
    let variants = [
        (Surrogate::Cispo { cap: 5.0 }, RatioLevel::Token),
        (
            Surrogate::Sapo {
                tau_pos: 1.0,
                tau_neg: 1.05,
            },
            RatioLevel::Token,
        ),
        (Surrogate::Clip, RatioLevel::Sequence),
        (Surrogate::Clip, RatioLevel::SequenceToken),
        (Surrogate::Cispo { cap: 5.0 }, RatioLevel::SequenceToken),
    ];
    for (surrogate, ratio) in variants {
        let s = settings(surrogate, ratio, Aggregation::TokenMean);
        let (_, got) = objective(&s, &logp, &logp, &adv, &lengths);
        assert_eq!(got.len(), want.len());
        // f64: a sigmoid, an exp of 0 and a mean of 4 terms: a few 1e-16 each.
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-14, "{surrogate:?} {ratio:?}: {g} vs {w}");
        }
    }
}

/// TRL's `_compute_loss` (the `trl` package in the venv) on the same tensors: loss and
/// gradient equal in f64 for each loss type and ratio level TRL has.
#[test]
fn loss_and_gradient_equal_trls() {
    let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trl_loss.py");
    let lengths = [3usize, 1, 4];
    let n: usize = lengths.iter().sum();
    // Ratios from e^-0.6 to e^0.9: some clipped at 0.8 / 1.28, some above CISPO's cap 2.
    let logp: Vec<f64> = (0..n).map(|i| -1.0 - 0.05 * i as f64).collect();
    let old: Vec<f64> = (0..n)
        .map(|i| logp[i] - [0.9, -0.6, 0.1, 0.75, -0.2, 0.3, 0.05, -0.4][i])
        .collect();
    let per_response = [1.3, -0.8, 0.4];
    let adv: Vec<f64> = lengths
        .iter()
        .zip(per_response)
        .flat_map(|(&l, a)| std::iter::repeat_n(a, l))
        .collect();
    let cases = [
        (
            "dapo",
            "token",
            Surrogate::Clip,
            RatioLevel::Token,
            Aggregation::TokenMean,
        ),
        (
            "cispo",
            "token",
            Surrogate::Cispo { cap: 2.0 },
            RatioLevel::Token,
            Aggregation::TokenMean,
        ),
        (
            "sapo",
            "token",
            Surrogate::Sapo {
                tau_pos: 1.0,
                tau_neg: 1.05,
            },
            RatioLevel::Token,
            Aggregation::SeqMeanTokenMean,
        ),
        (
            "grpo",
            "sequence",
            Surrogate::Clip,
            RatioLevel::Sequence,
            Aggregation::SeqMeanTokenMean,
        ),
        (
            "grpo",
            "token",
            Surrogate::Clip,
            RatioLevel::Token,
            Aggregation::SeqMeanTokenMean,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (loss_type, level, surrogate, ratio, aggregation) in cases {
        let s = settings(surrogate, ratio, aggregation);
        let cap = match surrogate {
            Surrogate::Cispo { cap } => cap,
            Surrogate::Clip | Surrogate::Sapo { .. } => s.eps_high,
        };
        let case = serde_json::json!({
            "lengths": lengths, "logp": logp, "old": old, "advantages": per_response,
            "loss_type": loss_type, "level": level, "eps_low": s.eps_low, "eps_high": cap,
            "tau_pos": 1.0, "tau_neg": 1.05,
        });
        let path = dir.path().join("case.json");
        std::fs::write(&path, case.to_string()).unwrap();
        let out = std::process::Command::new(&py)
            .arg(&script)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("TRL's loss needs DELTARL_PYTHON with trl: {e}"));
        assert!(
            out.status.success(),
            "TRL's loss failed ({loss_type}, {level}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let trl_grad: Vec<f64> = v["grad"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let (loss, grad, scale) = objective_scaled(&s, &logp, &old, &adv, &lengths);
        // Both in f64 but for our aggregation weights, kept in f32 (1/9 is rounded once,
        // 2^-24 relative; 1/8 is exact): the loss within 2^-24 sum w |l| and each
        // gradient within 2^-24 of itself, plus f64 sums of 8 terms (~1e-15). Twice that.
        let trl_loss = v["loss"].as_f64().unwrap();
        let tol = 2.0 * (2.0f64.powi(-24) * scale + 1e-15);
        assert!(
            (loss - trl_loss).abs() <= tol,
            "{loss_type}/{level}: loss {loss} vs TRL {trl_loss} (tolerance {tol:e})"
        );
        assert_eq!(grad.len(), trl_grad.len());
        for (i, (g, t)) in grad.iter().zip(&trl_grad).enumerate() {
            let tol = 2.0 * (2.0f64.powi(-24) * t.abs() + 1e-15);
            assert!(
                (g - t).abs() <= tol,
                "{loss_type}/{level} token {i}: {g} vs TRL {t} (tolerance {tol:e})"
            );
        }
    }
}
