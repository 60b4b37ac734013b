//! Stage manifests: the record, written last, that a stage finished with given inputs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{atomic_write_bytes, Error, Result};

/// What a finished stage ran on and produced. A stage is complete when its manifest exists
/// and its `config_hash` and `inputs` match the current configuration and input files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub stage: crate::Stage,
    pub iter: u32,
    /// Hash of the stage-relevant resolved configuration.
    pub config_hash: String,
    /// The stage seed derived from (run seed, iteration, stage).
    pub seed: u64,
    /// Input file (relative to the run directory) -> SHA-256.
    pub inputs: BTreeMap<String, String>,
    /// Output file (relative to the run directory) -> SHA-256.
    pub outputs: BTreeMap<String, String>,
    pub rows: u64,
    pub seconds: f64,
    pub version: String,
    /// Stage-specific summary (metrics, diagnostics).
    #[serde(default)]
    pub summary: serde_json::Value,
    /// The settings `config_hash` was taken of, so a changed configuration can be named
    /// key by key (null in manifests written before they were recorded).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub settings: serde_json::Value,
    /// How the process computed the outputs (absent in manifests written before it was
    /// recorded): a float's last bits depend on it, so a rerun with other thread counts is
    /// equal only to round-off, not byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
}

/// What a stage's floating-point results depend on beyond its settings and inputs: libtorch
/// splits a reduction over its intra-op threads and sums the parts in that grouping, and
/// several processes sum their parts of a gradient in another order than one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    /// libtorch's intra-op threads in each process (`model.threads`, or the process's
    /// share of the cores when that is 0).
    pub threads: u32,
    /// Processes that shared the stage (torchrun ranks; 1 alone).
    pub processes: u32,
}

impl std::fmt::Display for Compute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |n: u32| if n == 1 { "" } else { "s" };
        write!(
            f,
            "{} thread{} x {} process{}",
            self.threads,
            s(self.threads),
            self.processes,
            if self.processes == 1 { "" } else { "es" }
        )
    }
}

impl Manifest {
    /// Writes the manifest atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| Error::Manifest {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        atomic_write_bytes(path, &json)
    }

    /// Reads a manifest; `Ok(None)` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    file: path.display().to_string(),
                    source,
                })
            }
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Manifest {
                path: path.to_path_buf(),
                message: format!("not a valid manifest: {e}"),
            })
    }
}
