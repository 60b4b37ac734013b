//! `deltarl bench coeffs`: DelTA coefficient estimation against the numpy reference.

use anyhow::Result;
use deltarl_coeffs::{estimate, DeltaSettings, Estimator, Response, Settings};
use deltarl_schemas::seed::Rng;

use super::baseline::{self, Assets};
use super::timing::{median_seconds, Run};

/// Tokens a response in the benchmark's batch; 8 responses a prompt.
const RESPONSE_TOKENS: usize = 500;
const GROUP: usize = 8;

/// The result, in seconds (medians).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ours: f64,
    pub numpy: f64,
}

pub fn run(run: Run, tokens: usize, dim: usize) -> Result<()> {
    let t = time(run, tokens, dim)?;
    println!(
        "coeffs: {tokens} tokens x {dim} dims, K = 1, {} threads, median of {}",
        run.threads, run.reps
    );
    println!(
        "  deltarl  {:>9.4} s  ({:.2} M tokens/s)",
        t.ours,
        tokens as f64 / t.ours / 1e6
    );
    println!(
        "  numpy    {:>9.4} s  ({:.2} M tokens/s)",
        t.numpy,
        tokens as f64 / t.numpy / 1e6
    );
    println!("  speed-up {:.2}x", t.numpy / t.ours);
    Ok(())
}

fn time(run: Run, tokens: usize, dim: usize) -> Result<Timing> {
    // Responses of 500 tokens, one advantage each, random features.
    let mut rng = Rng::new(0);
    let n_resp = tokens.div_ceil(RESPONSE_TOKENS);
    let feats: Vec<Vec<f32>> = (0..n_resp)
        .map(|i| {
            let len = RESPONSE_TOKENS.min(tokens - i * RESPONSE_TOKENS);
            (0..len * dim).map(|_| rng.normal() as f32).collect()
        })
        .collect();
    let ents: Vec<Vec<f32>> = feats.iter().map(|f| vec![1.0; f.len() / dim]).collect();
    let ids: Vec<String> = (0..n_resp).map(|i| format!("p{}", i / GROUP)).collect();
    let advs: Vec<f32> = (0..n_resp).map(|_| rng.normal() as f32).collect();
    let rs: Vec<Response<'_>> = (0..n_resp)
        .map(|i| Response {
            prompt_id: &ids[i],
            sample_idx: (i % GROUP) as u32,
            advantage: advs[i],
            kept: true,
            features: &feats[i],
            entropy: &ents[i],
        })
        .collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default()))?;
    // Once outside the clock: a failure is an error, not a fast run.
    estimate(&s, dim, &rs)?;
    let ours = median_seconds(run.reps, || {
        let _ = std::hint::black_box(estimate(&s, dim, &rs));
    });
    let assets = Assets::write(&[&baseline::COEFFS_REFERENCE])?;
    let numpy = baseline::run_number(&[
        assets.path(&baseline::COEFFS_REFERENCE),
        "bench".into(),
        tokens.to_string(),
        dim.to_string(),
    ])?;
    Ok(Timing { ours, numpy })
}
