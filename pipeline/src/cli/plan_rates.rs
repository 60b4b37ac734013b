//! The rates `deltarl plan` estimates the host's features-file work with, measured here: a
//! sample features file of the configuration's vector width and precision written once
//! (encoding rows to Parquet and copying them into the file, into the page cache), then estimated from with the
//! configuration's estimator (its passes over the file, through the coefficient stage's
//! reader). The sample is two responses (one of each advantage sign) of up to the
//! configuration's response length, about 64 MB of file: large enough that a response's
//! decoded vectors leave the caches, as they do at the paper's lengths.

use anyhow::{Context, Result};
use deltarl_coeffs::shell::FileVectors;
use deltarl_coeffs::{estimate_sorted, fixed_order, Response, Settings};
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{encode_piece, FeatureRow, FileMeta, PieceWriter, Precision};

use super::bench::timing::median_seconds;
use crate::host_plan::Rates;

/// File bytes of the sample's vectors.
const SAMPLE_BYTES: u64 = 64 << 20;

/// The rates given on the command line (`--write-rate`, `--pass-rate`, GB/s), each above 0
/// and at most 10,000 GB/s.
pub fn given(write: f64, pass: f64) -> Result<Rates> {
    for (flag, r) in [("--write-rate", write), ("--pass-rate", pass)] {
        if !(r.is_finite() && r > 0.0 && r <= 1e4) {
            anyhow::bail!("{flag} {r}: expected GB/s above 0 and at most 10000");
        }
    }
    Ok(Rates {
        write: write * 1e9,
        pass: pass * 1e9,
        measured: false,
    })
}

/// Measures the write and pass rates (bytes a second) for vectors of `dim` values at
/// `precision`, responses of up to `response_tokens` tokens, estimated with `settings`.
pub fn measure(
    dim: u64,
    precision: Precision,
    response_tokens: u64,
    settings: &Settings,
) -> Result<Rates> {
    let width = precision.width() as u64;
    let tokens = (SAMPLE_BYTES / 2 / (dim * width).max(1)).clamp(1, response_tokens.max(1));
    let (dim, tokens) = (dim as usize, tokens as usize);
    let mut rng = Rng::new(0);
    let rows: Vec<FeatureRow> = (0..2u32)
        .map(|i| FeatureRow {
            prompt_id: "sample".into(),
            sample_idx: i,
            dim: dim as u32,
            precision,
            features: (0..tokens * dim)
                .map(|_| precision.round(rng.normal() as f32))
                .collect(),
            token_prob: vec![0.5; tokens],
            logprob: vec![-0.7; tokens],
            entropy: vec![1.0; tokens],
        })
        .collect();
    let dir = tempfile::tempdir().context("a temporary folder for the rate sample")?;
    let path = dir.path().join("features.parquet");
    let write = || -> Result<()> {
        let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        // As the features stage writes: a pass's rows encoded as a piece, copied in.
        let mut w = PieceWriter::<FeatureRow, _>::new(file, &FileMeta::new("features", "plan"));
        w.append(encode_piece(&rows)?, "the rate sample")?;
        w.finish()?;
        Ok(())
    };
    write()?;
    let mut written = Vec::new();
    let write_s = median_seconds(3, || written.push(write()));
    written
        .into_iter()
        .collect::<Result<Vec<()>>>()
        .with_context(|| format!("writing the rate sample {}", path.display()))?;
    let bytes = std::fs::metadata(&path)?.len() as f64;
    let entropy = vec![1.0f32; tokens];
    let responses: Vec<Response<'_>> = rows
        .iter()
        .zip([1.0f32, -1.0])
        .map(|(r, advantage)| Response {
            prompt_id: &r.prompt_id,
            sample_idx: r.sample_idx,
            advantage,
            reward: advantage.max(0.0),
            token_ids: &[],
            kept: true,
            features: &[],
            entropy: &entropy,
            token_prob: &[],
            shared: &[],
        })
        .collect();
    let order = fixed_order(&responses)?;
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| responses[i]).collect();
    let mut src = FileVectors::new(&path, &sorted)?;
    // Once outside the clock (the file into the page cache, the estimate checked to run).
    estimate_sorted(settings, dim, &sorted, &mut src)
        .with_context(|| format!("estimating from the rate sample {}", path.display()))?;
    let estimate_s = median_seconds(3, || {
        let _ = std::hint::black_box(estimate_sorted(settings, dim, &sorted, &mut src));
    });
    let passes = settings.estimator.vector_passes(src.sums_stored()) as f64;
    Ok(Rates {
        write: bytes / write_s,
        pass: passes * bytes / estimate_s,
        measured: true,
    })
}
