//! The record of pruned files, `runs/<run>/pruned.json`: each file pruning removed, by its
//! path relative to the run, with its hash when it was removed. The run's hashing answers
//! from it for a file that is gone. What is pruned and when is decided a layer above, by
//! the pruning that `[checkpoint]` configures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const FILE: &str = "pruned.json";

/// Path relative to the run -> hash when removed.
pub type Entries = BTreeMap<String, String>;

/// Where the record of the run in `root` lives.
pub fn path(root: &Path) -> PathBuf {
    root.join(FILE)
}

/// The record of the run in `root`: empty when the run has pruned nothing. A record that
/// cannot be read is an error naming the file, never an empty record: that would make every
/// pruned iteration look unfinished, and `iterate` would redo the run from its start.
pub fn read(root: &Path) -> Result<Entries> {
    let p = path(root);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Entries::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
    };
    serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{}: not a record of pruned files (a JSON object of path -> hash); restore it \
             from a backup, or delete it only if no iteration's checkpoint was pruned",
            p.display()
        )
    })
}

/// Replaces the record (written atomically: a reader sees the old one or the new one).
pub fn write(root: &Path, entries: &Entries) -> Result<()> {
    let json = serde_json::to_vec_pretty(entries).context("pruned.json")?;
    deltarl_schemas::atomic_write_bytes(&path(root), &json)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn missing_is_empty_and_garbled_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        let mut e = Entries::new();
        e.insert("iter-0001/policy/model.safetensors".into(), "abc".into());
        write(dir.path(), &e).unwrap();
        assert_eq!(read(dir.path()).unwrap(), e);
        std::fs::write(path(dir.path()), b"{\"iter-0001/policy/model.safe").unwrap();
        let err = format!("{:#}", read(dir.path()).unwrap_err());
        assert!(
            err.contains("pruned.json") && err.contains("not a record"),
            "{err}"
        );
    }
}
