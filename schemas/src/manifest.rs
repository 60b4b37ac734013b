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
