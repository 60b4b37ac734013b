//! The run's hash cache (`.hash-cache.json`): SHA-256 of its files keyed by relative path,
//! so that finding where to resume does not re-read every (possibly GB-sized) table of every
//! iteration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use deltarl_schemas::sha256_file;

use crate::rundir::RunDir;

/// The hash cache as loaded (on first use) plus whether it gained entries since.
#[derive(Debug, Default)]
pub(crate) struct HashState {
    entries: Option<HashCache>,
    dirty: bool,
}

/// What a file looked like when it was hashed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        let mtime_ns = m
            .modified()?
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let ino = 0;
        Ok(Stamp {
            len: m.len(),
            mtime_ns,
            ino,
        })
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct CacheEntry {
    stamp: Stamp,
    /// When the hash was taken; see [`RunDir::hash`] on racy entries.
    hashed_at_ns: i128,
    sha256: String,
}

/// SHA-256 of the run's files keyed by relative path, so that finding where to resume does
/// not re-read every (possibly GB-sized) table of every iteration.
type HashCache = BTreeMap<String, CacheEntry>;

/// An entry is trusted only if the file was last modified well before it was hashed:
/// file times have a clock-tick granularity, so a same-size rewrite within the tick of a
/// hash would otherwise go unnoticed (git's "racy clean" rule).
const RACY_NS: i128 = 2_000_000_000;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl RunDir {
    pub(crate) fn cache_path(&self) -> PathBuf {
        self.root.join(".hash-cache.json")
    }

    /// SHA-256 of a file of this run, from the cache when the file's size, modification
    /// time and inode are those it had when hashed (and that was not racy); otherwise the
    /// file is read and the cache updated. A lost or corrupt cache only costs re-hashing.
    pub fn hash(&self, path: &Path) -> Result<String> {
        let rel = self.rel(path);
        let stamp = Stamp::of(path).with_context(|| format!("cannot stat {}", path.display()))?;
        let mut guard = self
            .hash_state()
            .lock()
            .map_err(|_| anyhow::anyhow!("hash cache lock poisoned"))?;
        let cache = guard.entries.get_or_insert_with(|| {
            std::fs::read(self.cache_path())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        });
        if let Some(e) = cache.get(&rel) {
            if e.stamp == stamp && e.hashed_at_ns - stamp.mtime_ns > RACY_NS {
                return Ok(e.sha256.clone());
            }
        }
        let hashed_at_ns = now_ns();
        let sha256 = sha256_file(path)?;
        cache.insert(
            rel,
            CacheEntry {
                stamp,
                hashed_at_ns,
                sha256: sha256.clone(),
            },
        );
        guard.dirty = true;
        Ok(sha256)
    }

    /// Writes the hash cache if it gained entries: once per stage check or stage run, not
    /// once per file. Best effort: a reader without write access still gets right answers,
    /// and a cache that is never written only costs re-hashing.
    pub fn save_hashes(&self) {
        let Ok(mut guard) = self.hash_state().lock() else {
            return;
        };
        if !guard.dirty || !self.root.is_dir() {
            return;
        }
        if let Some(json) = guard
            .entries
            .as_ref()
            .and_then(|c| serde_json::to_vec(c).ok())
        {
            if deltarl_schemas::atomic_write_bytes(&self.cache_path(), &json).is_ok() {
                guard.dirty = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn set_mtime(path: &Path, t: SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn hash_cache_serves_old_files_and_notices_changes() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path(), "r").unwrap();
        std::fs::create_dir_all(&run.root).unwrap();
        let f = run.root.join("a.parquet");
        std::fs::write(&f, b"first").unwrap();
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        set_mtime(&f, old);
        assert_eq!(run.hash(&f).unwrap(), sha256_file(&f).unwrap());
        run.save_hashes();

        // A fresh RunDir reads the cache file: a non-racy entry is trusted as is (shown by
        // planting a marker hash in it).
        let mut cache: HashCache =
            serde_json::from_slice(&std::fs::read(run.cache_path()).unwrap()).unwrap();
        cache.get_mut("a.parquet").unwrap().sha256 = "planted".into();
        std::fs::write(run.cache_path(), serde_json::to_vec(&cache).unwrap()).unwrap();
        let again = RunDir::new(dir.path(), "r").unwrap();
        assert_eq!(again.hash(&f).unwrap(), "planted");

        // New content (new size and time) is hashed again.
        std::fs::write(&f, b"second!").unwrap();
        assert_eq!(again.hash(&f).unwrap(), sha256_file(&f).unwrap());

        // Racy: rewritten in place with the same size and the same mtime right after being
        // hashed. The entry was taken within the clock tick of the write, so it is not
        // trusted and the change is seen.
        let t = SystemTime::now();
        std::fs::write(&f, b"third!!").unwrap();
        set_mtime(&f, t);
        let before = again.hash(&f).unwrap();
        std::fs::write(&f, b"fourth!").unwrap();
        set_mtime(&f, t);
        let after = again.hash(&f).unwrap();
        assert_ne!(before, after);
        assert_eq!(after, sha256_file(&f).unwrap());

        // A corrupt cache file costs only a re-hash.
        std::fs::write(run.cache_path(), b"{not json").unwrap();
        let fresh = RunDir::new(dir.path(), "r").unwrap();
        assert_eq!(fresh.hash(&f).unwrap(), sha256_file(&f).unwrap());
    }
}
