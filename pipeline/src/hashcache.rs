//! The run's hash cache (`.hash-cache.json`): SHA-256 of its files keyed by relative path,
//! so that finding where to resume does not re-read every (possibly GB-sized) table of every
//! iteration.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use deltarl_schemas::sha256_file;

/// A run's hash cache: the entries as loaded from its file (on first use), and whether
/// they gained entries since. Shared by the clones of a run directory.
#[derive(Debug, Default)]
pub struct HashCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: Option<Entries>,
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
    /// When the hash was taken; see [`RACY_NS`].
    hashed_at_ns: i128,
    sha256: String,
}

/// SHA-256 of the run's files keyed by their path relative to the run.
type Entries = BTreeMap<String, CacheEntry>;

/// An entry is trusted only if the file was last modified well before it was hashed:
/// file times have a clock-tick granularity, so a same-size rewrite within the tick of a
/// hash would otherwise go unnoticed (git's "racy clean" rule).
const RACY_NS: i128 = 2_000_000_000;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl HashCache {
    /// SHA-256 of `path` (cached under `rel`; the cache lives in `cache_file`), from the
    /// cache when the file's size, modification time and inode are those it had when
    /// hashed (and that was not racy) and `reread` is false; otherwise the file is read and
    /// the cache updated. A lost or corrupt cache only costs re-hashing.
    pub fn hash(
        &self,
        cache_file: &Path,
        rel: String,
        path: &Path,
        reread: bool,
    ) -> Result<String> {
        let stamp = Stamp::of(path).with_context(|| format!("cannot stat {}", path.display()))?;
        let mut guard = self
            .state
            .lock()
            .map_err(|_| anyhow::anyhow!("hash cache lock poisoned"))?;
        let cache = guard.entries.get_or_insert_with(|| {
            std::fs::read(cache_file)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        });
        if let Some(e) = cache.get(&rel).filter(|_| !reread) {
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

    /// Writes the cache to `cache_file` if it gained entries: once per stage check or
    /// stage run, not once per file. Best effort: a reader without write access still gets
    /// right answers, and a cache that is never written only costs re-hashing.
    pub fn save(&self, cache_file: &Path) {
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        if !guard.dirty {
            return;
        }
        if let Some(json) = guard
            .entries
            .as_ref()
            .and_then(|c| serde_json::to_vec(c).ok())
        {
            if deltarl_schemas::atomic_write_bytes(cache_file, &json).is_ok() {
                guard.dirty = false;
            }
        }
    }
}
