//! The estimators at their neutral settings write DAPO's coefficients bit for bit: DelTA
//! with `lam_min = lam_max = 1` and KTAE with `top = 0` give every token the coefficient
//! the uniform estimator (DAPO) gives it, and KTAE shifts of exactly +0.0. The update is a
//! function of these columns (its own test, `stages/update/tests/loss.rs`, shows that
//! coefficients of 1 with zero shifts train as DAPO does), so the whole iteration is DAPO's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_coeffs::{estimate, DeltaSettings, Estimator, KtaeSettings, Response, Settings};

/// Six responses to two prompts (three each), `3 + i` tokens of 4-dimensional features,
/// the even ones right (advantage 1), the odd ones wrong (-0.7).
struct Fixture {
    feats: Vec<Vec<f32>>,
    ents: Vec<Vec<f32>>,
    ids: Vec<String>,
    tokens: Vec<Vec<u32>>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            feats: (0..6)
                .map(|i| {
                    (0..(3 + i) * 4)
                        .map(|k| ((k * 37 + i) % 11) as f32 - 5.0)
                        .collect()
                })
                .collect(),
            ents: (0..6).map(|i| vec![1.0; 3 + i]).collect(),
            ids: (0..6).map(|i| format!("p{}", i / 3)).collect(),
            tokens: (0..6)
                .map(|i| {
                    (0..(3 + i))
                        .map(|k| 6 + ((k * 5 + i) % 20) as u32)
                        .collect()
                })
                .collect(),
        }
    }

    fn responses(&self) -> Vec<Response<'_>> {
        (0..6)
            .map(|i| Response {
                prompt_id: &self.ids[i],
                sample_idx: (i % 3) as u32,
                advantage: if i % 2 == 0 { 1.0 } else { -0.7 },
                reward: if i % 2 == 0 { 1.0 } else { 0.0 },
                kept: true,
                token_ids: &self.tokens[i],
                features: &self.feats[i],
                entropy: &self.ents[i],
                token_prob: &[],
                shared: &[],
            })
            .collect()
    }
}

fn bits(c: &[Vec<f32>]) -> Vec<Vec<u32>> {
    c.iter()
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn delta_with_unit_lambdas_and_ktae_with_top_0_write_dapos_coefficients() {
    let fx = Fixture::new();
    let rs = fx.responses();
    let run = |e: Estimator| estimate(&Settings::new(e).unwrap(), 4, &rs).unwrap();
    let dapo = run(Estimator::Uniform);
    // DAPO: every token's coefficient is 1 and there is no shift.
    assert_eq!(dapo.coeffs.len(), 6);
    for (i, c) in dapo.coeffs.iter().enumerate() {
        assert_eq!(c.len(), 3 + i);
        assert!(c.iter().all(|&x| x == 1.0), "{c:?}");
    }
    assert!(dapo.shift.is_none());

    let unit = run(Estimator::Delta(DeltaSettings {
        lam_min: 1.0,
        lam_max: 1.0,
        ..DeltaSettings::default()
    }));
    assert_eq!(bits(&unit.coeffs), bits(&dapo.coeffs));
    assert!(unit.shift.is_none());
    // A real DelTA estimate differs (so the comparison above is not vacuous).
    let full = run(Estimator::Delta(DeltaSettings::default()));
    assert_ne!(bits(&full.coeffs), bits(&dapo.coeffs));

    // KTAE at its neutral setting writes coefficients 1 and shifts of +0.0 (not -0.0: the
    // bits are compared); at its default its shifts are not all 0 (both groups hold a
    // right and a wrong response).
    let ktae = |top: f64| {
        run(Estimator::Ktae(KtaeSettings {
            top,
            ..KtaeSettings::default()
        }))
    };
    let neutral = ktae(0.0);
    assert_eq!(bits(&neutral.coeffs), bits(&dapo.coeffs));
    let shift = neutral.shift.expect("ktae writes shifts");
    assert_eq!(
        bits(&shift),
        bits(
            &dapo
                .coeffs
                .iter()
                .map(|c| vec![0.0; c.len()])
                .collect::<Vec<_>>()
        )
    );
    let default_shift = ktae(1.0).shift.expect("ktae writes shifts");
    assert!(default_shift.iter().flatten().any(|&x| x != 0.0));
}
