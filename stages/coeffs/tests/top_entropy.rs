//! The "80/20" estimator (`top-entropy`) selects the tokens TRL's `top_entropy_quantile`
//! selects: its own `get_high_entropy_mask` run on the same entropies (`trl_entropy_mask.py`,
//! TRL from the venv `make test` builds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_coeffs::{estimate, Estimator, Response, Settings};

fn response<'a>(idx: u32, kept: bool, ent: &'a [f32]) -> Response<'a> {
    Response {
        prompt_id: "p",
        sample_idx: idx,
        advantage: 1.0,
        reward: 1.0,
        token_ids: &[],
        kept,
        features: &[],
        entropy: ent,
        token_prob: &[],
        shared: &[],
    }
}

/// TRL's selection (1 = kept) of each response's tokens, for every case in one run of the
/// script (importing TRL takes seconds; twenty runs took two minutes).
fn trl_masks(cases: &[(&[Vec<f32>], f64)]) -> Vec<Vec<Vec<u8>>> {
    let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trl_entropy_mask.py");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    let json: Vec<_> = cases
        .iter()
        .map(|(e, keep)| serde_json::json!({"entropies": e, "top_entropy_quantile": keep}))
        .collect();
    std::fs::write(&file, serde_json::Value::from(json).to_string()).unwrap();
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("{py}: {e} (TRL's check needs the venv `make venv` builds)"));
    assert!(
        out.status.success(),
        "{py} {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let masks: Vec<Vec<Vec<u8>>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(masks.len(), cases.len(), "one mask per case");
    masks
}

/// Entropies from a fixed generator: `n` responses of 1 to 40 tokens, values on a coarse
/// grid (so many repeat: ties at the threshold) or spread.
fn entropies(n: usize, seed: u64, grid: bool) -> Vec<Vec<f32>> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as f64 / (1u64 << 31) as f64
    };
    (0..n)
        .map(|_| {
            let len = 1 + (next() * 40.0) as usize;
            (0..len)
                .map(|_| {
                    let e = next() * 3.0;
                    if grid {
                        ((e * 4.0).round() / 4.0) as f32
                    } else {
                        e as f32
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn selects_the_tokens_trl_selects() {
    let ents: Vec<(Vec<Vec<f32>>, u64, bool)> = [(1, false), (2, true), (3, false), (4, true)]
        .into_iter()
        .map(|(seed, grid)| (entropies(12, seed, grid), seed, grid))
        .collect();
    // 0.2 the 80/20 paper's share; 0.5 and 0.25 put the rank on a whole number for some
    // sizes (no interpolation); 1.0 keeps everything.
    let keeps = [0.2, 0.25, 0.5, 0.8, 1.0];
    let cases: Vec<(&[Vec<f32>], f64)> = ents
        .iter()
        .flat_map(|(e, _, _)| keeps.iter().map(move |&k| (e.as_slice(), k)))
        .collect();
    let wants = trl_masks(&cases);
    assert_eq!(cases.len(), 20);
    for ((ents, keep), want) in cases.iter().zip(wants) {
        let rs: Vec<Response<'_>> = ents
            .iter()
            .enumerate()
            .map(|(i, e)| response(i as u32, true, e))
            .collect();
        let s = Settings::new(Estimator::TopEntropy { keep: *keep }).unwrap();
        let out = estimate(&s, 0, &rs).unwrap();
        let got: Vec<Vec<u8>> = out
            .coeffs
            .iter()
            .map(|c| c.iter().map(|&x| u8::from(x > 0.0)).collect())
            .collect();
        assert_eq!(got, want, "keep {keep}, entropies {ents:?}");
        // Mean coefficient 1 over the batch's tokens (f32 weight tokens / kept, summed
        // over at most 480 tokens: a relative 1e-7 each, 1e-4 is slack).
        let all: Vec<f32> = out.coeffs.concat();
        let mean = all.iter().map(|&c| f64::from(c)).sum::<f64>() / all.len() as f64;
        assert!((mean - 1.0).abs() < 1e-4, "mean {mean}");
    }
}

#[test]
fn dropped_responses_take_no_part() {
    // The dropped response's high entropies neither count toward the quantile nor get kept.
    let (a, b) = (vec![0.1f32, 0.2, 0.3, 0.4], vec![9.0f32, 9.0]);
    let rs = [response(0, true, &a), response(1, false, &b)];
    let s = Settings::new(Estimator::TopEntropy { keep: 0.5 }).unwrap();
    let out = estimate(&s, 0, &rs).unwrap();
    // Rank 0.5 * 3 = 1.5 between 0.2 and 0.3: threshold 0.25, two of four kept, weight 2.
    assert_eq!(out.coeffs, vec![vec![0.0, 0.0, 2.0, 2.0], vec![0.0, 0.0]]);
}
