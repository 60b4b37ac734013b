//! What a finished stage reports to the runner, and how its summary is read back.

use std::path::PathBuf;

/// What a finished stage reports to the runner.
#[derive(Debug, Default)]
pub struct Ran {
    pub rows: usize,
    /// Metrics and diagnostics for the manifest and the console line.
    pub summary: serde_json::Value,
    /// Outputs besides the stage's main file (a policy folder's weights).
    pub outputs: Vec<PathBuf>,
}

/// A number from a summary (NaN when absent), for console lines.
pub fn num(s: &serde_json::Value, key: &str) -> f64 {
    s.get(key)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(f64::NAN)
}
