//! KTAE against the authors' own code (numbers in `ktae_reference.json`, made by
//! `ktae_reference.py` from their checkout), by hand on small tables, and as an estimator:
//! coefficients 1, shifts by token id, neutral at `top = 0`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use deltarl_coeffs::ktae::{
    cohen_h, fisher_evidence, fisher_p, group_counts, group_scores, information_gain, score,
};
use deltarl_coeffs::{estimate, Estimator, KtaeSettings, Response, Settings};

fn response<'a>(idx: u32, reward: f32, ids: &'a [u32], ent: &'a [f32]) -> Response<'a> {
    Response {
        prompt_id: "p",
        sample_idx: idx,
        advantage: if reward > 0.0 { 1.0 } else { -1.0 },
        reward,
        token_ids: ids,
        kept: true,
        features: &[],
        entropy: ent,
        token_prob: &[],
        shared: &[],
    }
}

#[test]
fn fisher_by_hand() {
    // Token in 3 of 3 right responses and 0 of 3 wrong: margins 3 present, 3 right, n 6.
    // P(k) = C(3,k) C(3,3-k) / C(6,3) = 1, 9, 9, 1 (/20) for k = 0..3; observed k = 3, so
    // the tables at most as likely are k = 0 and 3: p = 2/20.
    let p = fisher_p(3, 0, 0, 3).unwrap();
    // Sums and quotients of four hypergeometric weights built from logs of small integers:
    // a few ulps of 1, so 1e-14 is slack.
    assert!((p - 0.1).abs() < 1e-14, "{p}");
    assert!((fisher_evidence(3, 0, 0, 3) - (-0.2f64).exp()).abs() < 1e-14);
    // Observed k = 2 of the same margins: P(2) = 9/20 ties P(1) for the largest, so every
    // table is at most as likely and p = 1 exactly: no evidence.
    assert_eq!(fisher_p(2, 1, 1, 2), None);
    assert_eq!(fisher_evidence(2, 1, 1, 2), 0.0);
    // Observed k = 1 of margins 2 present, 3 right, n 5: P(k) = C(3,k) C(2,2-k) / C(5,2)
    // = 1, 6, 3 (/10) for k = 0..2; at most 6/10: all, p = 1. Observed k = 2: 3/10 and
    // 1/10 count, p = 0.4.
    assert_eq!(fisher_p(1, 1, 2, 1), None);
    assert!((fisher_p(2, 0, 1, 2).unwrap() - 0.4).abs() < 1e-14);
    // A token in every response: one table only, p = 1.
    assert_eq!(fisher_p(4, 4, 0, 0), None);
}

#[test]
fn information_gain_and_cohen_by_hand() {
    // Presence decides rightness: H(Y) = 1 bit, H(Y | X) = 0.
    assert!((information_gain(2, 0, 0, 2) - 1.0).abs() < 1e-15);
    // Independent of rightness: 0 (to round-off of log2 of 1/2).
    assert!(information_gain(1, 1, 1, 1).abs() < 1e-15);
    // a = 1, b = 0, c = 1, d = 2: H(Y) = H(1/2) = 1; H(Y|X) = 1/4 * 0 + 3/4 * H(1/3).
    let h13 = -(1.0 / 3.0f64) * (1.0 / 3.0f64).log2() - (2.0 / 3.0f64) * (2.0 / 3.0f64).log2();
    assert!((information_gain(1, 0, 1, 2) - (1.0 - 0.75 * h13)).abs() < 1e-15);
    assert!((cohen_h(1.0, 0.0) - std::f64::consts::FRAC_PI_2).abs() < 1e-15);
    assert!((cohen_h(0.25, 0.25)).abs() < 1e-15);
}

#[test]
fn a_group_by_hand() {
    // Two right responses hold token 7, the two wrong ones token 8; token 9 is everywhere.
    let ids = [vec![7, 9], vec![7, 9], vec![8, 9], vec![8, 9]];
    let ent = [1.0f32; 2];
    let rs: Vec<Response<'_>> = (0..4)
        .map(|i| response(i, if i < 2 { 1.0 } else { 0.0 }, &ids[i as usize], &ent))
        .collect();
    let s = KtaeSettings {
        tf: false,
        ..KtaeSettings::default()
    };
    let scores = group_scores(&s, &rs, &[]);
    // Token 7: a = 2, b = 0, c = 0, d = 2. Fisher: P(k) = 1, 4, 1 (/6) for k = 0..2,
    // observed 2, p = 2/6; ig = 1 bit; h = pi/2. z = (exp(-2/3) + 1) pi/2 / 2.
    let z = ((-2.0f64 / 3.0).exp() + 1.0) * std::f64::consts::FRAC_PI_2 / 2.0;
    let want = 2.0 / (1.0 + (-z).exp()) - 1.0;
    // tanh(z / 2) against 2 sigma(z) - 1 for z ~ 1.2: a few ulps apart.
    assert!(
        (scores[&7] - want).abs() < 1e-14,
        "{} vs {want}",
        scores[&7]
    );
    // Token 8 mirrors it; token 9 carries no evidence (one table) and no direction.
    assert!((scores[&8] + want).abs() < 1e-14);
    assert_eq!(scores[&9], 0.0);
    // An end-of-sequence id scores 0 whatever its table.
    assert_eq!(group_scores(&s, &rs, &[7])[&7], 0.0);
    // One side only: nothing to contrast, every score 0 (none given).
    assert!(group_scores(&s, &rs[..2], &[]).is_empty());
}

#[derive(serde::Deserialize)]
struct Reference {
    end_id: u32,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    settings: BTreeMap<String, f64>,
    rewards: Vec<f32>,
    responses: Vec<Vec<u32>>,
    scores: BTreeMap<String, f64>,
}

/// The reference computes in float32. Its scores are `top (2 sigma(z) - 1)`; the largest
/// error of z there comes from Fisher's p, a sum of exp(lgamma combinations) whose float32
/// lgamma of arguments up to 17 (lgamma(17) = 30.7, ulp 1.9e-6) is off by a few ulps: a
/// relative 1e-5 in p at most, so at most 2e-5 in exp(-2p) <= 1; times |h + tf| / 2 and
/// sigma' <= 1/4 and 2 top. With |h + tf| <= 20 (asserted below for every score that is
/// not saturated) the bound is top * 2 * 0.25 * 2e-5 * 20 / 2 = 1e-4 * top; the
/// information gain and Cohen's h (float32 log2, asin, sqrt: ~1e-7 relative) add far less.
const TOLERANCE_PER_TOP: f64 = 1e-4;

#[test]
fn scores_match_the_authors_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ktae_reference.json");
    let text = std::fs::read_to_string(&path).expect("tests/ktae_reference.json");
    let reference: Reference = serde_json::from_str(&text).unwrap();
    assert_eq!(reference.cases.len(), 18);
    let (mut checked, mut nonzero, mut p_one, mut took_exp2, mut worst) = (0, 0, 0, 0, 0f64);
    let mut differences = Vec::new();
    for (n, case) in reference.cases.iter().enumerate() {
        let s = KtaeSettings {
            alpha: case.settings["alpha"],
            beta: case.settings["beta_ig"],
            tf: case.settings["gamma_tf"] != 0.0,
            top: case.settings["top"],
        };
        assert_eq!(case.rewards.len(), case.responses.len());
        let ents: Vec<Vec<f32>> = case.responses.iter().map(|r| vec![1.0; r.len()]).collect();
        let rs: Vec<Response<'_>> = (0..case.responses.len())
            .map(|i| response(i as u32, case.rewards[i], &case.responses[i], &ents[i]))
            .collect();
        let ours = group_scores(&s, &rs, &[reference.end_id]);
        let counts = group_counts(&rs);
        // Every id the reference scored, and no other.
        let mut ids: Vec<String> = ours.keys().map(u32::to_string).collect();
        ids.sort();
        let theirs: Vec<String> = case.scores.keys().cloned().collect();
        assert_eq!(ids, theirs, "case {n}: scored ids");
        for (id, &want) in &case.scores {
            let v: u32 = id.parse().unwrap();
            let got = ours[&v];
            let mut diff = (got - want).abs();
            if let Some(c) = counts.get(&v).filter(|_| v != reference.end_id) {
                let (f, ig) = c.evidence(&s);
                let x = c.direction(&s);
                if got.abs() < 0.999 * s.top {
                    assert!(x.abs() <= 20.0, "case {n} id {id}: |h + tf| = {x}");
                }
                // An exact p of 1: the reference's float32 sum may miss 1.0 and score with
                // exp(-2) (see ktae.rs); either reading is the reference's.
                if fisher_p(c.a, c.b, c.n_right - c.a, c.n_wrong - c.b).is_none() {
                    assert_eq!(f, 0.0);
                    p_one += 1;
                    let other = score(&s, (-2.0f64).exp(), ig, x);
                    if (other - want).abs() < diff {
                        diff = (other - want).abs();
                        took_exp2 += usize::from(other != got);
                    }
                }
            }
            if diff > TOLERANCE_PER_TOP * s.top {
                differences.push(format!("case {n} id {id}: ours {got}, theirs {want}"));
            }
            worst = worst.max(diff);
            checked += 1;
            nonzero += usize::from(want != 0.0);
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    // Not vacuous: many ids, most with a score; the p = 1 reading is exercised both ways.
    assert!(
        checked > 250 && nonzero > 150,
        "{checked} ids, {nonzero} non-zero"
    );
    // The counts `ktae.rs` and docs/method.md quote.
    assert_eq!((p_one, took_exp2), (162, 93));
    eprintln!(
        "{checked} ids ({nonzero} non-zero), largest difference {worst:.2e}; \
         {p_one} with p = 1, {took_exp2} of them scored by the reference with exp(-2)"
    );
}

#[test]
fn as_an_estimator() {
    let ids = [vec![7, 9, 2], vec![7, 9], vec![8, 9], vec![8, 9, 2]];
    let ent = [vec![1.0f32; 3], vec![1.0; 2], vec![1.0; 2], vec![1.0; 3]];
    let mut rs: Vec<Response<'_>> = (0..4)
        .map(|i| {
            response(
                i,
                if i < 2 { 1.0 } else { 0.0 },
                &ids[i as usize],
                &ent[i as usize],
            )
        })
        .collect();
    // A second group of one reward only: shifts 0.
    let other: Vec<Response<'_>> = (0..2)
        .map(|i| Response {
            prompt_id: "q",
            ..response(i, 1.0, &ids[i as usize], &ent[i as usize])
        })
        .collect();
    rs.extend(other);
    // And a response dynamic sampling dropped: coefficients and shifts 0.
    rs[3].kept = false;
    let s = Settings::new(Estimator::Ktae(KtaeSettings::default()))
        .unwrap()
        .with_end_ids(vec![2]);
    let out = estimate(&s, 0, &rs).unwrap();
    let shift = out.shift.expect("ktae writes shifts");
    let kept: Vec<Response<'_>> = rs[..3].to_vec();
    let scores = group_scores(&KtaeSettings::default(), &kept, &[2]);
    for i in 0..3 {
        assert_eq!(out.coeffs[i], vec![1.0; ids[i].len()]);
        let want: Vec<f32> = ids[i].iter().map(|v| scores[v] as f32).collect();
        assert_eq!(shift[i], want);
    }
    assert!(shift[0][0] > 0.0 && shift[2][0] < 0.0, "{shift:?}");
    assert_eq!(shift[0][2], 0.0, "the end id scores 0");
    assert_eq!(out.coeffs[3], vec![0.0; 3]);
    assert_eq!(shift[3], vec![0.0; 3]);
    assert_eq!(shift[4], vec![0.0; 3]);
    assert_eq!(shift[5], vec![0.0; 2]);
    // Neutral: top = 0 gives uniform's coefficients and zero shifts.
    let neutral = Settings::new(Estimator::Ktae(KtaeSettings {
        top: 0.0,
        ..KtaeSettings::default()
    }))
    .unwrap();
    let n = estimate(&neutral, 0, &rs).unwrap();
    let u = estimate(&Settings::new(Estimator::Uniform).unwrap(), 0, &rs).unwrap();
    assert_eq!(n.coeffs, u.coeffs);
    assert!(n.shift.unwrap().iter().flatten().all(|&x| x == 0.0));
    // Bad settings are refused; so is a response without its token ids.
    for (alpha, beta, top) in [(0.0, 0.0, 1.0), (-1.0, 1.0, 1.0), (1.0, 1.0, f64::NAN)] {
        let bad = Estimator::Ktae(KtaeSettings {
            alpha,
            beta,
            top,
            tf: true,
        });
        assert!(Settings::new(bad).is_err(), "{alpha} {beta} {top}");
    }
    rs[0].token_ids = &[];
    let err = estimate(&s, 0, &rs).unwrap_err().to_string();
    assert!(
        err.contains("sample_idx 0") && err.contains("token ids"),
        "{err}"
    );
}
