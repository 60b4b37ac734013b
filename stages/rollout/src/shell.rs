//! The stage's Parquet shell.

use std::io::Write;

use deltarl_sample::Plan;
use deltarl_schemas::{write_table, FileMeta, RolloutRow};

/// The stage's Parquet shell: writes rollouts.parquet from rows of [`crate::run_with`] (merged
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
