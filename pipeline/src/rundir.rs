//! The run directory (see `docs/method.md`, "Run directory"), its lock, and the completion
//! state of one stage.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use deltarl_schemas::{layout, Manifest, Stage};

use crate::hashcache::HashCache;

/// Checks a run name: one path component, no `..`, nothing hidden.
pub fn check_run_name(name: &str) -> Result<()> {
    deltarl_schemas::layout::check_run_name(name).map_err(anyhow::Error::msg)
}

/// A run directory `runs/<run>/`.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub root: PathBuf,
    hashes: Arc<HashCache>,
    /// Re-read every file instead of trusting the hash cache (`--verify`).
    verify: bool,
    /// The record of pruned files, read once on first use ([`crate::pruned`]).
    pruned: Arc<Mutex<Option<crate::pruned::Entries>>>,
}

impl RunDir {
    pub fn new(runs: &Path, name: &str) -> Result<Self> {
        check_run_name(name)?;
        Ok(RunDir {
            root: runs.join(name),
            hashes: Arc::default(),
            verify: false,
            pruned: Arc::default(),
        })
    }

    fn cache_path(&self) -> PathBuf {
        self.root.join(".hash-cache.json")
    }

    /// SHA-256 of a file of this run, through the run's hash cache unless every file is
    /// being verified.
    pub fn hash(&self, path: &Path) -> Result<String> {
        if !path.exists() {
            if let Some(h) = self.pruned_hash(path)? {
                return Ok(h);
            }
        }
        self.hashes
            .hash(&self.cache_path(), self.rel(path), path, self.verify)
    }

    /// `f` of the record of pruned files, read on first use.
    fn with_pruned<T>(&self, f: impl FnOnce(&crate::pruned::Entries) -> T) -> Result<T> {
        let mut pruned = self
            .pruned
            .lock()
            .map_err(|_| anyhow::anyhow!("the record of pruned files was poisoned"))?;
        let entries = match pruned.take() {
            Some(e) => e,
            None => crate::pruned::read(&self.root)?,
        };
        let out = f(&entries);
        *pruned = Some(entries);
        Ok(out)
    }

    /// The hash on record of `path` if pruning removed it.
    fn pruned_hash(&self, path: &Path) -> Result<Option<String>> {
        let rel = self.rel(path);
        self.with_pruned(|p| p.get(&rel).cloned())
    }

    /// Whether `path` was removed by pruning (its hash is still on record).
    pub fn is_pruned(&self, path: &Path) -> Result<bool> {
        Ok(!path.exists() && self.pruned_hash(path)?.is_some())
    }

    /// Whether pruning removed any file under the folder `dir`.
    pub fn pruned_under(&self, dir: &Path) -> Result<bool> {
        let prefix = format!("{}/", self.rel(dir));
        self.with_pruned(|p| p.keys().any(|k| k.starts_with(&prefix)))
    }

    /// Adds `entries` (files about to be pruned, with their hashes) to the record, on disk
    /// before the caller removes anything.
    pub fn record_pruned(&self, entries: crate::pruned::Entries) -> Result<()> {
        let mut pruned = self
            .pruned
            .lock()
            .map_err(|_| anyhow::anyhow!("the record of pruned files was poisoned"))?;
        let mut all = crate::pruned::read(&self.root)?;
        all.extend(entries);
        crate::pruned::write(&self.root, &all)?;
        *pruned = Some(all);
        Ok(())
    }

    /// From now on, re-read every file instead of trusting the cache's size, time and inode
    /// stamps (which a same-size rewrite with the time put back would fool).
    pub fn verify_every_file(&mut self) {
        self.verify = true;
    }

    /// Writes the hash cache if it gained entries (not before the run has a folder).
    pub fn save_hashes(&self) {
        if self.root.is_dir() {
            self.hashes.save(&self.cache_path());
        }
    }

    pub fn base(&self) -> PathBuf {
        layout::base_dir(&self.root)
    }

    pub fn iter_dir(&self, iter: u32) -> PathBuf {
        layout::iter_dir(&self.root, iter)
    }

    /// The policy folder iteration `iter`'s update writes.
    pub fn policy_dir(&self, iter: u32) -> PathBuf {
        self.iter_dir(iter).join("policy")
    }

    pub fn manifest_path(&self, iter: u32, stage: Stage) -> PathBuf {
        layout::manifest_path(&self.root, iter, stage)
    }

    pub fn stale_path(&self, iter: u32, stage: Stage) -> PathBuf {
        layout::stale_path(&self.root, iter, stage)
    }

    /// The folder a stage writes into (`base/` or the iteration's).
    pub fn stage_dir(&self, iter: u32, stage: Stage) -> PathBuf {
        layout::stage_dir(&self.root, iter, stage)
    }

    /// A stage's main output file.
    pub fn output(&self, iter: u32, stage: Stage) -> PathBuf {
        layout::output_path(&self.root, iter, stage)
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
    /// Finished once, but its inputs or configuration changed, or a stage it depends on
    /// was rerun or is not done.
    Stale(Stale),
    Missing,
    /// Not run here: the base policy is the model folder named by `model.source`.
    External(PathBuf),
}

/// Why a finished stage will rerun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stale {
    UpstreamRerun,
    /// The stage's settings changed: the keys that did, when its manifest recorded them.
    ConfigChanged(Vec<String>),
    /// An input (relative to the run, or a path outside it) is gone.
    InputMissing(String),
    /// Inputs whose bytes differ from the recorded ones (relative to the run, or paths
    /// outside it), or that were not recorded.
    InputsChanged(Vec<String>),
    /// A recorded output (relative to the run) is gone or its bytes changed.
    OutputChanged(String),
    /// A stage it reads (`the base`, `update of iteration 3`) is not done.
    DependencyNotDone(String),
    /// A stage it reads finished once but will rerun itself.
    DependencyStale(String),
}

impl Stale {
    /// Whether files the run recorded changed under it (damage, or edits outside deltarl),
    /// as opposed to a rerun or a configuration that asks for one.
    pub fn is_damage(&self) -> bool {
        match self {
            Stale::InputMissing(_) | Stale::InputsChanged(_) | Stale::OutputChanged(_) => true,
            Stale::UpstreamRerun
            | Stale::ConfigChanged(_)
            | Stale::DependencyNotDone(_)
            | Stale::DependencyStale(_) => false,
        }
    }
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::UpstreamRerun => f.write_str("an upstream stage was rerun"),
            Stale::ConfigChanged(keys) if keys.is_empty() => f.write_str("configuration changed"),
            Stale::ConfigChanged(keys) => write!(f, "configuration changed: {}", keys.join(", ")),
            Stale::InputMissing(p) => write!(f, "input {p} is missing"),
            Stale::InputsChanged(paths) if paths.is_empty() => f.write_str("inputs changed"),
            Stale::InputsChanged(paths) => write!(f, "inputs changed: {}", paths.join(", ")),
            Stale::OutputChanged(p) => write!(f, "output {p} is missing or changed"),
            Stale::DependencyNotDone(at) => write!(f, "{at} is not done"),
            Stale::DependencyStale(at) => write!(f, "{at} will rerun"),
        }
    }
}

/// Whether a stage's own record is complete for the given configuration hash (of
/// `settings`) and input files (the stages it depends on are the runner's business).
pub fn stage_state(
    run: &RunDir,
    iter: u32,
    stage: Stage,
    (config_hash, settings): (&str, &serde_json::Value),
    inputs: &[PathBuf],
) -> Result<StageState> {
    let Some(m) = Manifest::read(&run.manifest_path(iter, stage))? else {
        if run.stale_path(iter, stage).exists() {
            return Ok(StageState::Stale(Stale::UpstreamRerun));
        }
        return Ok(StageState::Missing);
    };
    if m.config_hash != config_hash {
        let keys = crate::settings_diff::changed_keys(&m.settings, settings);
        return Ok(StageState::Stale(Stale::ConfigChanged(keys)));
    }
    for p in inputs {
        if !p.exists() && !run.is_pruned(p)? {
            return Ok(StageState::Stale(Stale::InputMissing(run.rel(p))));
        }
    }
    let now = run.hash_inputs(inputs)?;
    if now != m.inputs {
        // Each input whose hash differs, and each one recorded but no longer read or read
        // but not recorded.
        let changed = now
            .keys()
            .chain(m.inputs.keys())
            .filter(|k| now.get(*k) != m.inputs.get(*k))
            .cloned()
            .collect::<std::collections::BTreeSet<String>>()
            .into_iter()
            .collect();
        return Ok(StageState::Stale(Stale::InputsChanged(changed)));
    }
    for (out, hash) in &m.outputs {
        let p = run.root.join(out);
        if !(p.exists() || run.is_pruned(&p)?) || &run.hash(&p)? != hash {
            return Ok(StageState::Stale(Stale::OutputChanged(out.clone())));
        }
    }
    Ok(StageState::Done(Box::new(m)))
}

/// Marks the stages after `stage` in this iteration stale (their manifests are moved
/// aside so `status` can say why they will rerun). Later iterations need no marker: they
/// read this iteration's policy, whose change the runner sees.
pub fn invalidate_downstream(run: &RunDir, iter: u32, stage: Stage) -> Result<()> {
    for &s in stage.downstream() {
        let m = run.manifest_path(iter, s);
        if m.exists() {
            std::fs::rename(&m, run.stale_path(iter, s))
                .with_context(|| format!("cannot mark {} stale", m.display()))?;
        }
    }
    Ok(())
}

/// An exclusive lock on a run directory: a second `iterate` (or `stage`) on the same run is
/// refused. It is an OS file lock (`flock`) on `.lock`, so it is released when the process
/// ends however it ends, and two processes starting at once cannot both take it. The file
/// holds the holder's process id, for the message only.
#[derive(Debug)]
pub struct RunLock {
    file: std::fs::File,
    /// The run directory, when this lock made it: a command refused before it recorded
    /// anything (a configuration whose file is missing) leaves no empty run behind.
    made: Option<PathBuf>,
}

impl RunLock {
    pub fn acquire(run: &RunDir) -> Result<Self> {
        // A link to a folder that is gone would otherwise read "File exists".
        if run.root.is_symlink() && !run.root.exists() {
            let target = std::fs::read_link(&run.root).unwrap_or_default();
            bail!(
                "run directory {} is a symbolic link to {}, which does not exist: restore \
                 its target, or remove the link to start a new run there",
                run.root.display(),
                target.display()
            );
        }
        let made = (!run.root.exists()).then(|| run.root.clone());
        std::fs::create_dir_all(&run.root)
            .with_context(|| format!("cannot create run directory {}", run.root.display()))?;
        let path = run.root.join(".lock");
        let writable = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        // A run on a read-only disk (an archive, a read-only mount) still takes the lock, on
        // a read-only handle (flock needs none), so that what only reads it — a no-op
        // `iterate --until N`, `status` — works; anything that writes fails naming its file.
        let (mut file, read_only) = match writable {
            Ok(f) => (f, false),
            Err(e) if read_only_error(&e) => (
                std::fs::File::open(&path).with_context(|| {
                    format!("cannot open the lock file {} (read-only)", path.display())
                })?,
                true,
            ),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot open the lock file {}", path.display()))
            }
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .map_or("another process".to_string(), |pid| {
                        format!("process {pid}")
                    });
                bail!(
                    "run {} is in use by {holder} (lock file {}); wait for it to finish",
                    run.root.display(),
                    path.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        if !read_only {
            file.set_len(0)
                .and_then(|()| writeln!(file, "{}", std::process::id()))
                .with_context(|| format!("cannot write {}", path.display()))?;
            // The lock's holder is the run's only writer, so every temporary in it is what a
            // killed process left (a stage's `.scores.parquet.tmp-PID`): removed now rather
            // than when that stage next runs.
            clean_temporaries_under(&run.root);
        }
        Ok(RunLock { file, made })
    }
}

impl Drop for RunLock {
    /// Clears the process id while the lock is still held (closing the file releases it).
    /// A run directory this lock made and nothing was written to (only `.lock` in it) is
    /// removed, the lock file first, while the lock is still held.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        if let Some(root) = &self.made {
            let only_lock = std::fs::read_dir(root).is_ok_and(|entries| {
                entries
                    .map(|e| e.map(|e| e.file_name()))
                    .collect::<Result<Vec<_>, _>>()
                    .is_ok_and(|names| names == [std::ffi::OsString::from(".lock")])
            });
            if only_lock {
                // remove_dir refuses a folder that gained an entry meanwhile.
                let _ = std::fs::remove_file(root.join(".lock"))
                    .and_then(|()| std::fs::remove_dir(root));
            }
        }
    }
}

/// Whether opening for writing failed because the disk or the folder is read-only.
fn read_only_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
    )
}

/// [`clean_temporaries`] in `dir` and every folder below it.
pub fn clean_temporaries_under(dir: &Path) {
    clean_temporaries(dir);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            clean_temporaries_under(&e.path());
        }
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
mod tests;
