//! The run directory (DESIGN.md 2.2), its lock, and stage completion.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use deltarl_schemas::{layout, sha256_file, Manifest};

pub use deltarl_schemas::layout::{stage_output, STAGES};

/// Checks a run name: one path component, no `..`, nothing hidden.
pub fn check_run_name(name: &str) -> Result<()> {
    deltarl_schemas::layout::check_run_name(name).map_err(anyhow::Error::msg)
}

/// A run directory `runs/<run>/`.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub root: PathBuf,
    hashes: Arc<Mutex<HashState>>,
}

/// The hash cache as loaded (on first use) plus whether it gained entries since.
#[derive(Debug, Default)]
struct HashState {
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
    pub fn new(runs: &Path, name: &str) -> Result<Self> {
        check_run_name(name)?;
        Ok(RunDir {
            root: runs.join(name),
            hashes: Arc::default(),
        })
    }

    fn cache_path(&self) -> PathBuf {
        self.root.join(".hash-cache.json")
    }

    /// SHA-256 of a file of this run, from the cache when the file's size, modification
    /// time and inode are those it had when hashed (and that was not racy); otherwise the
    /// file is read and the cache updated. A lost or corrupt cache only costs re-hashing.
    pub fn hash(&self, path: &Path) -> Result<String> {
        let rel = self.rel(path);
        let stamp = Stamp::of(path).with_context(|| format!("cannot stat {}", path.display()))?;
        let mut guard = self
            .hashes
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
        let Ok(mut guard) = self.hashes.lock() else {
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

    pub fn base(&self) -> PathBuf {
        self.root.join("base")
    }

    pub fn iter_dir(&self, iter: u32) -> PathBuf {
        layout::iter_dir(&self.root, iter)
    }

    /// The policy that samples iteration `iter` (that of iter - 1, or the base).
    pub fn policy_for(&self, iter: u32) -> PathBuf {
        if iter <= 1 {
            self.base()
        } else {
            self.iter_dir(iter - 1).join("policy")
        }
    }

    pub fn manifest_path(&self, iter: u32, stage: &str) -> PathBuf {
        layout::manifest_path(&self.root, iter, stage)
    }

    pub fn stale_path(&self, iter: u32, stage: &str) -> PathBuf {
        layout::stale_path(&self.root, iter, stage)
    }

    /// Iterations that have a directory, ascending.
    pub fn iterations(&self) -> Vec<u32> {
        layout::iterations(&self.root)
    }

    /// Relative path (for manifests) of a file under the run directory.
    pub fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Hashes of input files, keyed by their path relative to the run.
    pub fn hash_inputs(&self, inputs: &[PathBuf]) -> Result<BTreeMap<String, String>> {
        inputs
            .iter()
            .map(|p| {
                let h = self
                    .hash(p)
                    .with_context(|| format!("input {} of this stage", p.display()))?;
                Ok((self.rel(p), h))
            })
            .collect()
    }
}

/// The state of one stage of one iteration.
#[derive(Clone, Debug, PartialEq)]
pub enum StageState {
    /// Manifest present and matching inputs and configuration.
    Done(Box<Manifest>),
    /// Finished once, but its inputs or configuration changed, or an upstream stage was
    /// forced.
    Stale(String),
    Missing,
}

/// Whether a stage is complete for the given configuration hash and input files.
pub fn stage_state(
    run: &RunDir,
    iter: u32,
    stage: &str,
    config_hash: &str,
    inputs: &[PathBuf],
) -> Result<StageState> {
    let Some(m) = Manifest::read(&run.manifest_path(iter, stage))? else {
        if run.stale_path(iter, stage).exists() {
            return Ok(StageState::Stale("an upstream stage was rerun".into()));
        }
        return Ok(StageState::Missing);
    };
    if m.config_hash != config_hash {
        return Ok(StageState::Stale("configuration changed".into()));
    }
    for p in inputs {
        if !p.exists() {
            return Ok(StageState::Stale(format!(
                "input {} is missing",
                run.rel(p)
            )));
        }
    }
    let now = run.hash_inputs(inputs)?;
    if now != m.inputs {
        return Ok(StageState::Stale("inputs changed".into()));
    }
    for (out, hash) in &m.outputs {
        let p = run.root.join(out);
        if !p.exists() || &run.hash(&p)? != hash {
            return Ok(StageState::Stale(format!(
                "output {out} is missing or changed"
            )));
        }
    }
    Ok(StageState::Done(Box::new(m)))
}

/// Marks the stages after `stage` in this iteration stale (their manifests are moved
/// aside so `status` can say why they will rerun).
pub fn invalidate_downstream(run: &RunDir, iter: u32, stage: &str) -> Result<()> {
    let pos = STAGES
        .iter()
        .position(|s| *s == stage)
        .unwrap_or(STAGES.len());
    for s in &STAGES[pos + 1..] {
        let m = run.manifest_path(iter, s);
        if m.exists() {
            std::fs::rename(&m, run.stale_path(iter, s))
                .with_context(|| format!("cannot mark {} stale", m.display()))?;
        }
    }
    Ok(())
}

/// An exclusive lock on a run directory: a second `iterate` on the same run is refused.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl RunLock {
    pub fn acquire(run: &RunDir) -> Result<Self> {
        std::fs::create_dir_all(&run.root)
            .with_context(|| format!("cannot create run directory {}", run.root.display()))?;
        let path = run.root.join(".lock");
        for _ in 0..2 {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    writeln!(f, "{}", std::process::id())?;
                    return Ok(RunLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let pid: Option<u32> = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|s| s.trim().parse().ok());
                    match pid {
                        Some(pid) if pid_alive(pid) && pid != std::process::id() => bail!(
                            "run {} is in use by process {pid} (lock file {}); wait for it to finish",
                            run.root.display(),
                            path.display()
                        ),
                        // A lock left by a killed process: take it over.
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()))
                }
            }
        }
        bail!("cannot take the lock {}", path.display())
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes temporary files a killed process may have left in `dir` (never final names).
pub fn clean_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains(".tmp-") {
            let p = e.path();
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
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
