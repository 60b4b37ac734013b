//! The rollout stage: sample G responses per prompt with the policy of the previous
//! iteration (`deltarl_sample`, the sampler the evaluation shares) and record what the
//! update needs (token ids, old log-probs, finish reason) in rollouts.parquet.

use std::io::Write;

use deltarl_schemas::{write_table, FileMeta, RolloutRow};

pub use deltarl_sample::{run, run_with, Engine, Error, Plan, Result};

/// The stage's Parquet shell: writes rollouts.parquet from rows of [`run_with`] (merged
/// from several processes first, when there are several), with the settings in the file
/// metadata.
pub fn write<W: Write + Send>(
    s: &Plan,
    rows: &[RolloutRow],
    out: W,
    meta: FileMeta,
) -> deltarl_schemas::Result<()> {
    let meta = meta.with("settings", serde_json::to_string(s).unwrap_or_default());
    write_table(out, rows, &meta)?;
    Ok(())
}
