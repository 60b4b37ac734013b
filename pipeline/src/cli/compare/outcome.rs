//! One run of a comparison: what `compare` keeps of it for its tables and figure, and the
//! runs a comparison's folder holds.

use std::path::Path;

use anyhow::{Context as _, Result};

/// One run of the comparison.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub variant: String,
    pub seed: u64,
    /// Held-out accuracy after each iteration (None where it was not evaluated).
    pub curve: Vec<Option<f64>>,
    /// Held-out accuracy after the last iteration.
    pub last: f64,
}

/// The run of one variant and seed of a comparison (`compare` names them so; `strata`
/// finds them so).
pub fn run_name(prefix: &str, variant: &str, seed: u64) -> String {
    format!("{prefix}-{variant}-s{seed}")
}

/// The runs of a comparison, from its `configs/<arm>-s<seed>.toml`.
pub fn runs_of(folder: &Path) -> Result<Vec<(String, u64)>> {
    let dir = folder.join("configs");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = e?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let parsed = stem
            .rsplit_once("-s")
            .and_then(|(arm, seed)| Some((arm.to_string(), seed.parse::<u64>().ok()?)));
        match parsed {
            Some(run) => out.push(run),
            None => anyhow::bail!(
                "{}: not a run's configuration (<arm>-s<seed>.toml)",
                path.display()
            ),
        }
    }
    out.sort();
    anyhow::ensure!(!out.is_empty(), "{}: no runs", dir.display());
    Ok(out)
}

/// An [`Outcome`] in a line, for tests.
#[cfg(test)]
pub fn outcome(variant: &str, seed: u64, curve: Vec<Option<f64>>, last: f64) -> Outcome {
    Outcome {
        variant: variant.into(),
        seed,
        curve,
        last,
    }
}
