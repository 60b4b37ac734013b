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
}

impl<S> Ran<S> {
    /// A stage's result with no outputs besides its main file.
    pub fn new(rows: usize, summary: S) -> Self {
        Ran {
            rows,
            summary,
            outputs: Vec::new(),
        }
    }
}
