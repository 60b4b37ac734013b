//! `deltarl bench coeffs`: DelTA coefficient estimation against the numpy reference.

use anyhow::Result;
use deltarl_coeffs::shell::FileVectors;
use deltarl_coeffs::{
    estimate, estimate_sorted, fixed_order, DeltaSettings, Estimator, Response, Settings, Vectors,
    Visit,
};
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FeatureRow, FileMeta, Precision, TableWriter};

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
    pub from_file: Option<FromFile>,
}

/// The estimation from a features file, beside numpy reading the same file.
#[derive(Clone, Copy, Debug)]
pub struct FromFile {
    /// Median seconds of the whole estimation.
    pub estimate: f64,
    /// Passes over the file one estimation made (counted).
    pub passes: usize,
    /// Median seconds of one pass that reads every vector and computes nothing.
    pub read_pass: f64,
    /// Median seconds of numpy reading the same file in the same run: `np.fromfile`, and
    /// `readinto` an array allocated once.
    pub numpy_fromfile: f64,
    pub numpy_into: f64,
    /// The file's size.
    pub file_bytes: u64,
    /// Whether the passes copied the bytes straight from the file.
    pub direct: bool,
}

pub fn run(
    run: Run,
    shape: Shape,
    from_file: bool,
    numpy: bool,
    precision: Precision,
) -> Result<()> {
    let Shape {
        tokens,
        dim,
        response_tokens,
    } = shape;
    let t = time(run, shape, from_file, numpy, precision)?;
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
        let gb = f.file_bytes as f64 / 1e9;
        let f32_gb = (tokens * dim * 4) as f64 / 1e9;
        let per_pass = f.estimate / f.passes.max(1) as f64;
        println!(
            "  deltarl from features.parquet ({} vectors, {gb:.3} GB on disk, {}):",
            precision,
            if f.direct {
                "read directly"
            } else {
                "read through Arrow"
            }
        );
        println!(
            "    estimate  {:>9.4} s over {} passes = {per_pass:.4} s a pass: {:.2} GB/s of the \
             file a pass ({:.2} GB/s of f32 values)",
            f.estimate,
            f.passes,
            gb / per_pass,
            f32_gb / per_pass
        );
        println!(
            "    one pass reading only {:>9.4} s: {:.2} GB/s",
            f.read_pass,
            gb / f.read_pass
        );
        println!(
            "    numpy reading the same file: np.fromfile {:.4} s = {:.2} GB/s; readinto a \
             buffer allocated once {:.4} s = {:.2} GB/s",
            f.numpy_fromfile,
            gb / f.numpy_fromfile,
            f.numpy_into,
            gb / f.numpy_into
        );
        println!(
            "    our read-only pass at {:.0}% of numpy's faster read; a pass with the estimate's \
             arithmetic at {:.0}%",
            100.0 * f.numpy_fromfile.min(f.numpy_into) / f.read_pass,
            100.0 * f.numpy_fromfile.min(f.numpy_into) / per_pass
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

/// The coefficients of `rs` (responses with their vectors) estimated from a features file
/// holding those vectors at `precision`, the way the coeffs stage reads it; beside it, one
/// pass that only reads, and numpy reading the same file.
fn time_from_file(
    run: Run,
    dim: usize,
    rs: &[Response<'_>],
    precision: Precision,
) -> Result<FromFile> {
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
            precision,
            features: r.features.to_vec(),
            token_prob: vec![0.5; n],
            logprob: vec![-0.7; n],
            entropy: r.entropy.to_vec(),
        }])?;
    }
    w.finish()?;
    let file_bytes = std::fs::metadata(&path)?.len();
    let order = fixed_order(rs)?;
    let sorted: Vec<Response<'_>> = order
        .iter()
        .map(|&i| Response {
            features: &[],
            ..rs[i]
        })
        .collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default()))?;
    let mut src = Counted {
        inner: FileVectors::new(&path, &sorted)?,
        passes: 0,
    };
    // Once outside the clock: the same coefficients as in memory, and the passes counted.
    let from_file = estimate_sorted(&s, dim, &sorted, &mut src)?;
    let in_memory = estimate(&s, dim, rs)?;
    anyhow::ensure!(
        order
            .iter()
            .zip(&from_file.coeffs)
            .all(|(&i, c)| *c == in_memory.coeffs[i]),
        "the coefficients from the file differ from those in memory"
    );
    let passes = src.passes;
    let direct = src.inner.is_direct();
    let estimate = median_seconds(run.reps, || {
        let _ = std::hint::black_box(estimate_sorted(&s, dim, &sorted, &mut src));
    });
    let read_pass = median_seconds(run.reps, || {
        let mut floats = 0usize;
        let _ = src.inner.pass(&mut |batch| {
            floats += batch.iter().map(|(_, v)| v.len()).sum::<usize>();
            Ok(())
        });
        std::hint::black_box(floats);
    });
    let text = baseline::run_text(&[
        "-c".into(),
        NUMPY_READ.into(),
        path.display().to_string(),
        run.reps.to_string(),
    ])?;
    let numbers: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [numpy_fromfile, numpy_into] = numbers[..] else {
        anyhow::bail!("the numpy read printed {text:?}, not two numbers");
    };
    Ok(FromFile {
        estimate,
        passes,
        read_pass,
        numpy_fromfile,
        numpy_into,
        file_bytes,
        direct,
    })
}

/// numpy reading a file's bytes, the median of `reps` reads in seconds: `np.fromfile` (a
/// new array each read) and `readinto` an array allocated once (as our passes reuse their
/// buffers), printed as two numbers on the last line.
const NUMPY_READ: &str = r#"
import sys, time, numpy as np
path, reps = sys.argv[1], int(sys.argv[2])
def median(f):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]
buf = np.empty(np.fromfile(path, dtype=np.uint8).size, dtype=np.uint8)
def into():
    with open(path, "rb") as f:
        assert f.readinto(memoryview(buf)) == buf.size
print(median(lambda: np.fromfile(path, dtype=np.uint8)), median(into))
"#;

/// A vector source that counts its passes.
struct Counted {
    inner: FileVectors,
    passes: usize,
}

impl Vectors for Counted {
    fn pass(&mut self, visit: &mut Visit<'_>) -> deltarl_coeffs::Result<()> {
        self.passes += 1;
        self.inner.pass(visit)
    }

    fn sums(&self) -> Option<Vec<&[f64]>> {
        self.inner.sums()
    }
}

fn time(
    run: Run,
    shape: Shape,
    from_file: bool,
    numpy: bool,
    precision: Precision,
) -> Result<Timing> {
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
            (0..len * dim)
                .map(|_| precision.round(rng.normal() as f32))
                .collect()
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
        Some(time_from_file(run, dim, &rs, precision)?)
    } else {
        None
    };
    Ok(Timing {
        ours,
        numpy,
        from_file,
    })
}
