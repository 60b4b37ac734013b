//! The run directory (see `docs/method.md`, "Run directory"), its lock, and the completion
//! state of one stage.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use deltarl_schemas::{layout, Manifest, Stage};

use crate::hashcache::HashState;

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

impl RunDir {
    pub fn new(runs: &Path, name: &str) -> Result<Self> {
        check_run_name(name)?;
        Ok(RunDir {
            root: runs.join(name),
            hashes: Arc::default(),
        })
    }

    pub(crate) fn hash_state(&self) -> &Mutex<HashState> {
        &self.hashes
    }

    pub fn base(&self) -> PathBuf {
        layout::base_dir(&self.root)
    }

    pub fn iter_dir(&self, iter: u32) -> PathBuf {
        layout::iter_dir(&self.root, iter)
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
    Stale(String),
    Missing,
    /// Not run here: the base policy is the model folder named by `model.source`.
    External(PathBuf),
}

/// Whether a stage's own record is complete for the given configuration hash and input
/// files (the stages it depends on are the runner's business).
pub fn stage_state(
    run: &RunDir,
    iter: u32,
    stage: Stage,
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

