//! How well a sketch of the vectors keeps DelTA's coefficients, on an iteration a run has
//! recorded at full width: for each sketch dimension, the coefficients estimated from the
//! sketched vectors against those at full width (Spearman and max |dc| over the tokens of
//! responses with an advantage: what `persist = "projected"` reports each iteration), and
//! the estimate's time from each side by side (medians).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use deltarl_coeffs::shell::{self, HeldVectors, Source};
use deltarl_schemas::{
    read_path, CoeffRow, FeatureProbs, FeatureRow, FeatureScalars, Precision, RolloutRow, ScoreRow,
    Stage,
};

use super::timing::{median_seconds, Run};
use crate::config::Resolved;
use crate::rundir::RunDir;

/// The iteration measured and the sketches tried.
pub struct Case {
    pub run: String,
    pub iter: u32,
    pub dims: Vec<usize>,
    /// Changes to the run's recorded configuration (`--set`), e.g. another estimator.
    pub sets: Vec<String>,
}

/// What one estimate reads, in memory.
struct Inputs {
    rollouts: Vec<RolloutRow>,
    scores: Vec<ScoreRow>,
    rows: Vec<FeatureRow>,
    scalars: Vec<FeatureScalars>,
    probs: Vec<FeatureProbs>,
}

pub fn run(r: Run, runs: &Path, c: &Case) -> Result<()> {
    let dir = RunDir::new(runs, &c.run)?;
    let recorded = dir.root.join("run.toml");
    let cfg = Resolved::load_with(&recorded, &c.sets)
        .with_context(|| format!("run {}: {}", c.run, recorded.display()))?;
    let settings = cfg.coeffs.clone();
    if !matches!(settings.estimator, deltarl_coeffs::Estimator::Delta(_)) {
        bail!(
            "run {}: its estimator is not DelTA's, so no coefficient reads the vectors; \
             measure DelTA on its files with --set coeffs.estimator=\"delta\"",
            c.run
        );
    }
    let at = |s: Stage| dir.output(c.iter, s);
    let rows: Vec<FeatureRow> = read_path(&at(Stage::Features))?.0;
    let dim = rows.first().map_or(0, |r| r.dim as usize);
    if dim == 0 {
        bail!(
            "{}: keeps no vectors (features.persist below full, or no responses)",
            at(Stage::Features).display()
        );
    }
    let inputs = Inputs {
        rollouts: read_path(&at(Stage::Rollout))?.0,
        scores: read_path(&at(Stage::Score))?.0,
        scalars: rows.iter().map(FeatureScalars::from).collect(),
        probs: rows.iter().map(FeatureProbs::from).collect(),
        rows,
    };
    let tokenizer = tokenizer_of(&dir, &cfg, c.iter)?;
    let decode = |ids: &[u32]| {
        tokenizer
            .decode(ids)
            .map_err(|e| deltarl_coeffs::Error::Input(e.to_string()))
    };
    let estimate = |held: &HeldVectors, k: usize| -> Result<Vec<CoeffRow>> {
        let (out, _) = shell::run(
            &settings,
            &inputs.rollouts,
            &inputs.scores,
            &inputs.scalars,
            &inputs.probs,
            k,
            Source::Held(held),
            &decode,
        )?;
        Ok(out)
    };
    let precision = inputs.rows.first().map_or(Precision::F32, |r| r.precision);
    let held = HeldVectors::of(&inputs.rows, precision)?;
    let full = estimate(&held, dim)?;
    let t_full = median_seconds(r.reps, || {
        let _ = estimate(&held, dim);
    });
    let tokens: usize = inputs.rows.iter().map(FeatureRow::tokens).sum();
    println!(
        "run {} iteration {}: {} responses, {tokens} tokens, vectors of {dim} dimensions; \
         DelTA at full width {:.3} s (median of {})",
        c.run,
        c.iter,
        inputs.rows.len(),
        t_full,
        r.reps
    );
    println!(
        "settings: {}",
        serde_json::to_string(&settings).unwrap_or_default()
    );
    println!(
        "{:>6} {:>10} {:>12} {:>9} {:>10} {:>10}",
        "k", "Spearman", "max |dc|", "tokens", "sketch s", "estimate s"
    );
    let a: Vec<Vec<f32>> = full.iter().map(|x| x.coeff.clone()).collect();
    let seed = cfg.stages.features.pass.sketch_seed(c.iter);
    for &k in &c.dims {
        if k == 0 || k >= dim {
            bail!("--dims {k}: a sketch needs 1 to {} dimensions", dim - 1);
        }
        let t = std::time::Instant::now();
        let sketched = deltarl_features::sketch(&inputs.rows, k, seed);
        let t_sketch = t.elapsed().as_secs_f64();
        let sketched = HeldVectors::of(&sketched, precision)?;
        let b: Vec<Vec<f32>> = estimate(&sketched, k)?
            .into_iter()
            .map(|x| x.coeff)
            .collect();
        let t_est = median_seconds(r.reps, || {
            let _ = estimate(&sketched, k);
        });
        let g = deltarl_coeffs::agreement(k as u32, &a, &b, |i| full[i].advantage != 0.0)?;
        println!(
            "{k:>6} {:>10.4} {:>12.3e} {:>9} {t_sketch:>10.3} {t_est:>10.3}",
            g.spearman, g.max_abs_diff, g.tokens
        );
    }
    Ok(())
}

/// The tokenizer of the policy that sampled iteration `iter` (the base's for all: a run's
/// policies keep its tokenizer).
fn tokenizer_of(dir: &RunDir, cfg: &Resolved, iter: u32) -> Result<deltarl_model::Tokenizer> {
    // The built-in tiny model's base is the run's own; any other is the configured folder.
    let base: PathBuf = if cfg.opts.model.source == "tiny" {
        dir.base()
    } else {
        cfg.opts.model.folder()
    };
    let policy = crate::stage::policy_before(dir, &base, iter);
    let path = policy.join("tokenizer.json");
    let path = if path.exists() {
        path
    } else {
        base.join("tokenizer.json")
    };
    deltarl_model::Tokenizer::from_file(&path)
        .with_context(|| format!("run {}: {}", dir.root.display(), path.display()))
}
