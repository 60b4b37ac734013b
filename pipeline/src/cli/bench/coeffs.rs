//! `deltarl bench coeffs`: DelTA coefficient estimation against the numpy reference.

use anyhow::Result;
use deltarl_coeffs::shell::FileVectors;
use deltarl_coeffs::{
    estimate, estimate_sorted, fixed_order, DeltaSettings, Estimator, Response, Settings,
};
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FeatureRow, FileMeta, TableWriter};

use super::baseline::{self, Assets};
use super::timing::{median_seconds, Run};

/// Tokens a response in the benchmark's batch by default (the numpy reference's); 8
/// responses a prompt.
pub const RESPONSE_TOKENS: usize = 500;
const GROUP: usize = 8;

/// The benchmark's batch: `tokens` in all, `dim` floats a token, responses of
/// `response_tokens` (the last one shorter).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub tokens: usize,
    pub dim: usize,
    pub response_tokens: usize,
}

/// The result, in seconds (medians).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ours: f64,
    pub numpy: Option<f64>,
    /// From a features file on disk, when asked.
    pub from_file: Option<f64>,
}

pub fn run(run: Run, shape: Shape, from_file: bool, numpy: bool) -> Result<()> {
    let Shape {
        tokens,
        dim,
        response_tokens,
    } = shape;
    let t = time(run, shape, from_file, numpy)?;
    println!(
        "coeffs: {tokens} tokens x {dim} dims, responses of {response_tokens} tokens, K = 1, \
         {} threads, median of {}",
        run.threads, run.reps
    );
    println!(
        "  deltarl  {:>9.4} s  ({:.2} M tokens/s)",
        t.ours,
        tokens as f64 / t.ours / 1e6
    );
    if let Some(numpy) = t.numpy {
        println!(
            "  numpy    {:>9.4} s  ({:.2} M tokens/s)",
            numpy,
            tokens as f64 / numpy / 1e6
        );
    }
    if let Some(f) = t.from_file {
        let gb = (tokens * dim * 4) as f64 / 1e9;
        println!(
            "  deltarl from features.parquet {f:>9.4} s  ({:.2} GB/s of f32 features, {gb:.2} GB, \
             K + 4 = 5 passes over the file)",
            gb / f
        );
    }
    if let Some(numpy) = t.numpy {
        println!(
            "  speed-up {:.2}x (in memory; numpy holds its batch in memory)",
            numpy / t.ours
        );
    }
    Ok(())
}

/// Median seconds of the coefficients of `rs` (responses with their vectors) estimated
/// from a features file holding those vectors, the way the coeffs stage reads it.
fn time_from_file(run: Run, dim: usize, rs: &[Response<'_>]) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("features.parquet");
    let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut w = TableWriter::new(file, &FileMeta::new("features", "bench"));
    for r in rs {
        let n = r.tokens();
        w.write_owned(vec![FeatureRow {
            prompt_id: r.prompt_id.to_string(),
            sample_idx: r.sample_idx,
            dim: dim as u32,
            features: r.features.to_vec(),
            token_prob: vec![0.5; n],
            logprob: vec![-0.7; n],
            entropy: r.entropy.to_vec(),
        }])?;
    }
    w.finish()?;
    let order = fixed_order(rs)?;
    let sorted: Vec<Response<'_>> = order
        .iter()
        .map(|&i| Response {
            features: &[],
            ..rs[i]
        })
        .collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default()))?;
    let mut src = FileVectors::new(&path, &sorted);
    estimate_sorted(&s, dim, &sorted, &mut src)?;
    Ok(median_seconds(run.reps, || {
        let _ = std::hint::black_box(estimate_sorted(&s, dim, &sorted, &mut src));
    }))
}

fn time(run: Run, shape: Shape, from_file: bool, numpy: bool) -> Result<Timing> {
    let Shape {
        tokens,
        dim,
        response_tokens,
    } = shape;
    anyhow::ensure!(response_tokens > 0, "--response-tokens must be positive");
    // Responses of `response_tokens`, one advantage each, random features.
    let mut rng = Rng::new(0);
    let n_resp = tokens.div_ceil(response_tokens);
    let feats: Vec<Vec<f32>> = (0..n_resp)
        .map(|i| {
            let len = response_tokens.min(tokens - i * response_tokens);
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
            reward: 0.0,
            token_ids: &[],
            kept: true,
            features: &feats[i],
            entropy: &ents[i],
            token_prob: &[],
            shared: &[],
        })
        .collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default()))?;
    // Once outside the clock: a failure is an error, not a fast run.
    estimate(&s, dim, &rs)?;
    let ours = median_seconds(run.reps, || {
        let _ = std::hint::black_box(estimate(&s, dim, &rs));
    });
    let numpy = if numpy {
        let assets = Assets::write(&[&baseline::COEFFS_REFERENCE])?;
        Some(baseline::run_number(&[
            assets.path(&baseline::COEFFS_REFERENCE),
            "bench".into(),
            tokens.to_string(),
            dim.to_string(),
        ])?)
    } else {
        None
    };
    let from_file = if from_file {
        Some(time_from_file(run, dim, &rs)?)
    } else {
        None
    };
    Ok(Timing {
        ours,
        numpy,
        from_file,
    })
}
