//! Tests that pin the DelTA math (docs/method.md §4). Golden numbers come from
//! `reference.py` (a plain numpy implementation), checked by hand where noted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_coeffs::{
    delta_coefficients, estimate, estimate_sorted, fixed_order, DeltaSettings, Estimator, Response,
    Scope, Settings, Vectors, Visit,
};

fn resp<'a>(pid: &'a str, idx: u32, adv: f32, f: &'a [f32], e: &'a [f32]) -> Response<'a> {
    Response {
        prompt_id: pid,
        sample_idx: idx,
        advantage: adv,
        reward: 0.0,
        token_ids: &[],
        kept: true,
        features: f,
        entropy: e,
        token_prob: &[],
        shared: &[],
    }
}

const F0: [f32; 6] = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
const F1: [f32; 6] = [0.0, 0.0, 2.0, 0.0, 0.0, -1.0];
const E3: [f32; 3] = [0.5, 1.0, 1.5];

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn hand_computed_case() {
    // Response 0 (A = +1): (1,0) (0,1) (1,1); response 1 (A = -1): (0,0) (2,0) (0,-1).
    // By hand: mu+ = (2/3, 2/3), mu- = (2/3, -1/3). Token (1,0) is positive:
    // D+ = 1/9 + 4/9 = 5/9, D- = 1/9 + 1/9 = 2/9, m = D- - D+ = -1/3.
    // The positive margins are (-1/3, 5/3, 5/3): mean 1, population var 8/9, so
    // gamma+ = sqrt(8/9) = 0.942809...
    let rs = [resp("p", 0, 1.0, &F0, &E3), resp("p", 1, -1.0, &F1, &E3)];
    let (c, st) = delta_coefficients(&DeltaSettings::default(), 2, &rs);
    // Statistics in f64 (a few ops: ~1e-15) against 12-digit hand values (5e-13), and
    // coefficients rounded once to f32 (2^-24 of c ≤ 1.2 g: 7e-8): 1e-6 leaves 14x.
    let tol = 1e-6;
    assert!(close(st.mu_pos_init[0], 2.0 / 3.0, tol) && close(st.mu_pos_init[1], 2.0 / 3.0, tol));
    assert!(close(st.mu_neg_init[0], 2.0 / 3.0, tol) && close(st.mu_neg_init[1], -1.0 / 3.0, tol));
    assert!(close(st.gamma_pos, (8.0f64 / 9.0).sqrt(), tol));
    assert!(close(st.gamma_neg, 0.9428090415820631, tol));
    assert!(close(st.mu_pos[0], 0.597252296704, tol) && close(st.mu_pos[1], 0.805495406591, tol));
    assert!(close(st.mu_neg[0], 0.560218890359, tol) && close(st.mu_neg[1], -0.439781109641, tol));
    assert!(close(st.norm, 0.9167768593606632, tol));
    let want = [
        [0.876208920327, 1.060590634211, 1.063277884059],
        [0.96413192836, 0.950438724845, 1.085351908196],
    ];
    assert_eq!(c.len(), want.len());
    for (got, want) in c.iter().zip(want) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(close(f64::from(*g), w, tol), "{g} vs {w}");
        }
    }
    let mean: f64 = c.iter().flatten().map(|&x| f64::from(x)).sum::<f64>() / 6.0;
    // Six coefficients each within 7e-8 of their f64 values, which average 1.
    assert!(close(mean, 1.0, 1e-6));
}

#[test]
fn two_refinement_passes_assign_with_the_gamma_carried_in() {
    // K = 2, as the authors order the refit: pass 2 assigns with pass 1's gamma (the
    // initial one), and the final gamma is the spread of the margins against the
    // centroids of pass 1. Those margins are the K = 1 case's final margins
    // (-0.424213713755, 1.992272506019, 2.06633931871) on the positive side, whose
    // population std is sqrt(((-1.635680)^2 + 0.780806^2 + 0.854873^2) / 3) = 1.156995.
    let rs = [resp("p", 0, 1.0, &F0, &E3), resp("p", 1, -1.0, &F1, &E3)];
    let k2 = DeltaSettings {
        refine_steps: 2,
        ..DeltaSettings::default()
    };
    let (c, st) = delta_coefficients(&k2, 2, &rs);
    // As in `hand_computed_case`: f32-rounded coefficients within 7e-8, f64 statistics.
    let tol = 1e-6;
    let m1 = [-0.424213713755f64, 1.992272506019, 2.06633931871];
    let mean = m1.iter().sum::<f64>() / 3.0;
    let std = (m1.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
    assert!(close(st.gamma_pos, std, tol), "{} vs {std}", st.gamma_pos);
    assert!(close(st.gamma_pos, 1.1569954360141277, tol));
    assert!(close(st.gamma_neg, 1.2104849926460948, tol));
    assert!(close(st.mu_pos[0], 0.590942937304, tol) && close(st.mu_pos[1], 0.821473973166, tol));
    assert!(close(st.mu_neg[0], 0.542775062606, tol) && close(st.mu_neg[1], -0.440101114684, tol));
    let want = [
        [0.890212996606, 1.053612497635, 1.057472614177],
        [0.965203642762, 0.950963042813, 1.082535206007],
    ];
    assert_eq!(c.len(), want.len());
    for (got, want) in c.iter().zip(want) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(close(f64::from(*g), w, tol), "{g} vs {w}");
        }
    }
}

/// The coefficients of the numpy reference (`reference.py check`) for one scope.
fn reference(dim: usize, rs: &[Response<'_>], k: u32) -> (Vec<f64>, (f64, f64)) {
    let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut features = Vec::new();
    let mut adv = Vec::new();
    for r in rs {
        features.extend(r.features.iter().map(|&x| f64::from(x)));
        adv.extend(std::iter::repeat_n(f64::from(r.advantage), r.entropy.len()));
    }
    let case = serde_json::json!({
        "dim": dim, "features": features, "adv": adv, "K": k, "lam_min": 0.8, "lam_max": 1.2,
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.json");
    std::fs::write(&path, case.to_string()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg("check")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("the numpy reference needs DELTARL_PYTHON (python3): {e}"));
    assert!(
        out.status.success(),
        "the numpy reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let coeff = v["coeff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let g = v["gamma"].as_array().unwrap();
    (coeff, (g[0].as_f64().unwrap(), g[1].as_f64().unwrap()))
}

#[test]
fn matches_the_numpy_reference_for_every_refit_count() {
    let dim = 6;
    let b = batch(40, 8, dim);
    let rs = as_responses(&b);
    for k in 0..=3 {
        let s = DeltaSettings {
            refine_steps: k,
            ..DeltaSettings::default()
        };
        let (c, st) = delta_coefficients(&s, dim, &rs);
        let (want, (gp, gn)) = reference(dim, &rs, k);
        let got: Vec<f64> = c.iter().flatten().map(|&x| f64::from(x)).collect();
        assert_eq!(got.len(), want.len());
        // numpy in f64 against ours rounded to f32 (≤ 2^-24 of c ≤ 1.2 g ≈ 7e-8 for g ≤ 1)
        // plus f64 sums in other orders (~1e-14): 1e-5 leaves a margin of 100.
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(close(*g, *w, 1e-5), "K = {k}, token {i}: {g} vs {w}");
        }
        assert!(
            close(st.gamma_pos, gp, 1e-9) && close(st.gamma_neg, gn, 1e-9),
            "K = {k}"
        );
    }
}

#[test]
fn lam_one_gives_exactly_one() {
    let d = DeltaSettings {
        lam_min: 1.0,
        lam_max: 1.0,
        ..DeltaSettings::default()
    };
    let zero = [0.0f32; 6];
    let rs = [
        resp("p", 0, 1.0, &F0, &E3),
        resp("p", 1, -1.0, &F1, &E3),
        resp("q", 0, 0.0, &zero, &E3),
    ];
    let (c, _) = delta_coefficients(&d, 2, &rs);
    assert!(c.iter().flatten().all(|&x| x.to_bits() == 1.0f32.to_bits()));
}

/// A deterministic pseudo-random batch: `n` responses of varying length in `g` groups.
/// (prompt id, sample index, advantage, features, entropies)
type Row = (String, u32, f32, Vec<f32>, Vec<f32>);

fn batch(n: usize, g: usize, dim: usize) -> Vec<Row> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let len = 1 + (next() * 40.0) as usize;
            let adv = (next() * 2.0 - 1.0) as f32;
            let f: Vec<f32> = (0..len * dim)
                .map(|_| (next() * 2.0 - 1.0) as f32)
                .collect();
            let e: Vec<f32> = (0..len).map(|_| next() as f32).collect();
            (format!("g{}", i % g), (i / g) as u32, adv, f, e)
        })
        .collect()
}

fn as_responses(b: &[Row]) -> Vec<Response<'_>> {
    b.iter()
        .map(|(p, i, a, f, e)| resp(p, *i, *a, f, e))
        .collect()
}

#[test]
fn independent_of_row_order_and_threads() {
    let dim = 8;
    let b = batch(200, 10, dim);
    for scope in [Scope::Batch, Scope::Group] {
        let s = Settings::new(Estimator::Delta(DeltaSettings {
            scope,
            ..DeltaSettings::default()
        }))
        .unwrap();
        let rs = as_responses(&b);
        let base = estimate(&s, dim, &rs).unwrap().coeffs;
        // Reversed input order: same coefficient for the same response, bit for bit.
        let rev: Vec<Response<'_>> = rs.iter().rev().copied().collect();
        let out = estimate(&s, dim, &rev).unwrap().coeffs;
        for (i, c) in out.iter().rev().enumerate() {
            assert_eq!(c, &base[i]);
        }
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let out = pool.install(|| estimate(&s, dim, &rs).unwrap().coeffs);
            assert_eq!(out, base, "{threads} threads, {scope:?}");
        }
    }
}

/// Vectors streamed one response a batch, last first (as a file in another order gives
/// them), counting passes; `skip` leaves one response out of every pass; `sums`, when
/// given, are the stored vector sums (as the features writer stores them).
struct Streamed<'r, 'a> {
    rs: &'r [Response<'a>],
    passes: usize,
    skip: Option<usize>,
    sums: Option<Vec<Vec<f64>>>,
}

impl Vectors for Streamed<'_, '_> {
    fn pass(&mut self, visit: &mut Visit<'_>) -> deltarl_coeffs::Result<()> {
        self.passes += 1;
        for i in (0..self.rs.len()).rev() {
            if Some(i) != self.skip {
                visit(&[(i, self.rs[i].features)])?;
            }
        }
        Ok(())
    }

    fn sums(&self) -> Option<Vec<&[f64]>> {
        self.sums
            .as_ref()
            .map(|s| s.iter().map(Vec::as_slice).collect())
    }
}

/// Streamed pass by pass, in another order and one response a batch, every estimator gives
/// the in-memory coefficients and summary bit for bit: DelTA in K + 2 passes when the source
/// stores the vector sums and K + 3 when it does not, the others in one. A response missing
/// from a pass is an error naming it.
#[test]
fn streamed_vectors_give_the_in_memory_result() {
    let dim = 8;
    let b = batch(120, 8, dim);
    let rs = as_responses(&b);
    let order = fixed_order(&rs).unwrap();
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| rs[i]).collect();
    let stored: Vec<Vec<f64>> = sorted
        .iter()
        .map(|r| deltarl_schemas::vector_sum(dim, r.features))
        .collect();
    let delta = |k: u32, scope| {
        Estimator::Delta(DeltaSettings {
            refine_steps: k,
            scope,
            ..DeltaSettings::default()
        })
    };
    for (estimator, passes, with_sums) in [
        (delta(1, Scope::Batch), 3, true),
        (delta(1, Scope::Batch), 4, false),
        (delta(2, Scope::Group), 4, true),
        (delta(2, Scope::Group), 5, false),
        (delta(0, Scope::Batch), 2, true),
        (delta(0, Scope::Batch), 3, false),
        (Estimator::Uniform, 1, true),
        (Estimator::TopEntropy { keep: 0.3 }, 1, false),
    ] {
        let s = Settings::new(estimator).unwrap();
        let whole = estimate(&s, dim, &rs).unwrap();
        let sums = with_sums.then(|| stored.clone());
        let mut src = Streamed {
            rs: &sorted,
            passes: 0,
            skip: None,
            sums: sums.clone(),
        };
        let out = estimate_sorted(&s, dim, &sorted, &mut src).unwrap();
        assert_eq!(src.passes, passes, "{estimator:?}, sums {with_sums}");
        assert_eq!(estimator.vector_passes(with_sums), passes);
        assert_eq!(out.coeffs.len(), order.len());
        for (c, &i) in out.coeffs.iter().zip(&order) {
            assert_eq!(c, &whole.coeffs[i], "{estimator:?}");
        }
        assert_eq!(
            serde_json::to_string(&out.summary).unwrap(),
            serde_json::to_string(&whole.summary).unwrap()
        );
        let mut missing = Streamed {
            rs: &sorted,
            passes: 0,
            skip: Some(7),
            sums,
        };
        let err = estimate_sorted(&s, dim, &sorted, &mut missing)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&sorted[7].key().to_string()), "{err}");
    }
}

/// A stored vector sum that is not the sum of the vectors it came with (one coordinate off
/// by one ulp) is an error naming the response, the column and the coordinate.
#[test]
fn a_stored_sum_is_checked_against_its_vectors() {
    let dim = 8;
    let b = batch(40, 4, dim);
    let rs = as_responses(&b);
    let order = fixed_order(&rs).unwrap();
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| rs[i]).collect();
    let mut sums: Vec<Vec<f64>> = sorted
        .iter()
        .map(|r| deltarl_schemas::vector_sum(dim, r.features))
        .collect();
    let bad = sorted
        .iter()
        .position(|r| r.advantage != 0.0)
        .expect("a response with an advantage");
    sums[bad][5] = f64::from_bits(sums[bad][5].to_bits() + 1);
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    let mut src = Streamed {
        rs: &sorted,
        passes: 0,
        skip: None,
        sums: Some(sums),
    };
    let err = estimate_sorted(&s, dim, &sorted, &mut src)
        .unwrap_err()
        .to_string();
    let key = sorted[bad].key().to_string();
    assert!(
        err.contains(&key) && err.contains("vector_sum") && err.contains("coordinate 5"),
        "{err}"
    );
}

#[test]
fn normalised_mean_is_one_and_in_range() {
    let dim = 4;
    let b = batch(100, 5, dim);
    let rs = as_responses(&b);
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    let out = estimate(&s, dim, &rs).unwrap();
    let all: Vec<f64> = out.coeffs.iter().flatten().map(|&x| f64::from(x)).collect();
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    // Normalised to mean 1 in f64, each rounded once to f32 (≤ 2^-24 = 6e-8 relative):
    // the mean within 6e-8·1.2; the range bounds within 2^-24·1.2 g. 1e-5 leaves 100x.
    assert!(close(mean, 1.0, 1e-5), "mean {mean}");
    let g = out.summary.norm;
    assert!(all
        .iter()
        .all(|&c| c >= 0.8 * g - 1e-5 && c <= 1.2 * g + 1e-5));
}

#[test]
fn discriminative_direction_is_amplified() {
    // Every token has a large shared component on axis 0 (boilerplate both sides emit).
    // Half the positive tokens also carry +1 on axis 1, half the negative ones -1: those
    // are the discriminative tokens.
    let dim = 2;
    let mut data = Vec::new();
    for i in 0..8u32 {
        let adv = if i < 4 { 1.0f32 } else { -1.0 };
        let sign = adv;
        let mut f = Vec::new();
        for t in 0..10 {
            let disc = if t % 2 == 0 { sign } else { 0.0 };
            f.extend([5.0, disc]);
        }
        data.push(("p".to_string(), i, adv, f, vec![1.0f32; 10]));
    }
    let rs = as_responses(&data);
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    let out = estimate(&s, dim, &rs).unwrap();
    assert!(
        out.summary.cos_after < out.summary.cos_before,
        "cos before {} after {}",
        out.summary.cos_before,
        out.summary.cos_after
    );
    for c in &out.coeffs {
        for t in (0..10).step_by(2) {
            assert!(
                c[t] > c[t + 1],
                "discriminative {} vs shared {}",
                c[t],
                c[t + 1]
            );
        }
    }
}

#[test]
fn degenerate_batches_are_finite() {
    let dim = 2;
    let zero = [0.0f32; 6];
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    // No negative responses; all-zero advantages; an empty response; an excluded one.
    let cases: Vec<Vec<Response<'_>>> = vec![
        vec![resp("p", 0, 1.0, &F0, &E3), resp("p", 1, 0.5, &F1, &E3)],
        vec![resp("p", 0, -1.0, &F0, &E3)],
        vec![resp("p", 0, 0.0, &F0, &E3), resp("p", 1, 0.0, &zero, &E3)],
        vec![resp("p", 0, 1.0, &[], &[]), resp("p", 1, -1.0, &F1, &E3)],
        vec![],
    ];
    for rs in cases {
        let out = estimate(&s, dim, &rs).unwrap();
        for (r, c) in rs.iter().zip(&out.coeffs) {
            assert_eq!(c.len(), r.tokens());
            assert!(c.iter().all(|x| x.is_finite()));
        }
        let n: usize = rs.iter().map(|r| r.tokens()).sum();
        if n > 0 {
            let mean = out
                .coeffs
                .iter()
                .flatten()
                .map(|&x| f64::from(x))
                .sum::<f64>()
                / n as f64;
            // As in `normalised_mean_is_one_and_in_range`.
            assert!(close(mean, 1.0, 1e-5));
        }
    }
    // All-zero advantages: every coefficient is lam_min * (1 / lam_min) = 1.
    let rs = [resp("p", 0, 0.0, &F0, &E3)];
    let out = estimate(&s, dim, &rs).unwrap();
    assert!(out.coeffs[0]
        .iter()
        .all(|&x| close(f64::from(x), 1.0, 1e-6)));
    // Excluded responses get 0 and do not count.
    let mut ex = resp("p", 1, -1.0, &F1, &E3);
    ex.kept = false;
    let out = estimate(&s, dim, &[resp("p", 0, 1.0, &F0, &E3), ex]).unwrap();
    assert!(out.coeffs[1].iter().all(|&x| x == 0.0));
    assert_eq!(out.summary.tokens_excluded, 3);
}

#[test]
fn bad_inputs_are_errors_naming_the_response() {
    let dim = 2;
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    let nan = [1.0f32, f32::NAN, 0.0, 0.0, 1.0, 1.0];
    let err = estimate(&s, dim, &[resp("bad", 7, 1.0, &nan, &E3)]).unwrap_err();
    assert!(err.to_string().contains("\"bad\", sample_idx 7"), "{err}");
    let err = estimate(&s, dim, &[resp("p", 0, f32::INFINITY, &F0, &E3)]).unwrap_err();
    assert!(err.to_string().contains("advantage is inf"), "{err}");
    let err = estimate(&s, dim, &[resp("p", 0, 1.0, &F0[..4], &E3)]).unwrap_err();
    assert!(
        err.to_string().contains("4 feature floats for 3 tokens"),
        "{err}"
    );
    let err = estimate(
        &s,
        dim,
        &[resp("p", 0, 1.0, &F0, &E3), resp("p", 0, 1.0, &F0, &E3)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("duplicate"), "{err}");
    for (lo, hi) in [(1.2, 0.8), (0.0, 1.0), (f64::NAN, 1.0)] {
        let bad = Settings::new(Estimator::Delta(DeltaSettings {
            lam_min: lo,
            lam_max: hi,
            ..DeltaSettings::default()
        }));
        assert!(bad.is_err());
    }
    assert!(Settings::new(Estimator::TopEntropy { keep: 0.0 }).is_err());
}

/// A non-finite value among streamed vectors is an error naming the response and the token,
/// whether the first pass reads the vectors (no stored sums: the sum's finiteness is the
/// check) or the stored sums stand in for it (the margin pass checks).
#[test]
fn non_finite_streamed_vectors_are_errors_naming_the_token() {
    let dim = 2;
    let good = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
    for bad_value in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut bad = good;
        bad[5] = bad_value;
        let rs = [resp("p", 0, 1.0, &good, &E3), resp("p", 1, -1.0, &bad, &E3)];
        let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
        for with_sums in [false, true] {
            let mut src = Streamed {
                rs: &rs,
                passes: 0,
                skip: None,
                sums: with_sums.then(|| {
                    rs.iter()
                        .map(|r| deltarl_schemas::vector_sum(dim, r.features))
                        .collect()
                }),
            };
            let err = estimate_sorted(&s, dim, &rs, &mut src)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("sample_idx 1") && err.contains("feature of token 2"),
                "{bad_value}, sums {with_sums}: {err}"
            );
        }
    }
}

#[test]
fn top_entropy_keeps_the_fraction() {
    let e0 = [0.1f32, 0.9, 0.5];
    let e1 = [0.8f32, 0.2, 0.3];
    let f = [0.0f32; 6];
    let s = Settings::new(Estimator::TopEntropy { keep: 0.5 }).unwrap();
    let out = estimate(
        &s,
        2,
        &[resp("p", 0, 1.0, &f, &e0), resp("p", 1, -1.0, &f, &e1)],
    )
    .unwrap();
    // Six tokens, keep three: entropies 0.9, 0.8 and 0.5, each with weight 2.
    assert_eq!(out.coeffs, vec![vec![0.0, 2.0, 2.0], vec![2.0, 0.0, 0.0]]);
    let u = Settings::new(Estimator::Uniform).unwrap();
    let out = estimate(&u, 2, &[resp("p", 0, 1.0, &f, &e0)]).unwrap();
    assert_eq!(out.coeffs, vec![vec![1.0; 3]]);
}

/// lam_max = 1e308 passes "finite and >= lam_min" but its normalising sum overflows, which
/// scaled every coefficient to 0 and trained nothing; the estimate now refuses it by key.
#[test]
fn an_overflowing_normalisation_is_refused_naming_the_bounds() {
    let rs = [resp("p", 0, 1.0, &F0, &E3), resp("p", 1, -1.0, &F1, &E3)];
    let delta = |lam_max| {
        Settings::new(Estimator::Delta(DeltaSettings {
            lam_max,
            ..DeltaSettings::default()
        }))
        .unwrap()
    };
    let e = estimate(&delta(1e308), 2, &rs).unwrap_err().to_string();
    assert!(
        e.contains("coeffs.lam_max = 1e308") && e.contains("normalisation"),
        "{e}"
    );
    // The largest bound the configuration admits (1e3) normalises to finite, positive values.
    let out = estimate(&delta(1e3), 2, &rs).unwrap();
    assert!(out
        .coeffs
        .iter()
        .flatten()
        .all(|c| c.is_finite() && *c > 0.0));
}
