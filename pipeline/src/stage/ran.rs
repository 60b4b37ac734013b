//! What a finished stage reports to the runner.

use std::path::PathBuf;

/// What a finished stage reports to the runner: `S` is its summary type
/// (`deltarl_schemas::summary`).
#[derive(Debug)]
pub struct Ran<S> {
    pub rows: usize,
    /// Metrics and diagnostics for the manifest and the console line.
    pub summary: S,
    /// Outputs besides the stage's main file (a policy folder's weights).
    pub outputs: Vec<PathBuf>,
    /// What this run measured that is not a result (a phase's resident memory on each
    /// rank), by metric name: logged in metrics.jsonl, never in the manifest, which
    /// reruns reproduce byte for byte.
    pub measured: Vec<(String, f64)>,
}

impl<S> Ran<S> {
    /// A stage's result with no outputs besides its main file.
    pub fn new(rows: usize, summary: S) -> Self {
        Ran {
            rows,
            summary,
            outputs: Vec::new(),
            measured: Vec::new(),
        }
    }
}
