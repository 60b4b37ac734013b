//! One run of a comparison: what `compare` keeps of it for its tables and figure.

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
