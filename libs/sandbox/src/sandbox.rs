//! The checked sandbox: the tools found, the folders programs see, the uid of each slot
//! (found and proved to work by [`Sandbox::detect`]).

use std::path::{Path, PathBuf};

use crate::Error;

/// Uids of the runs when we are root: `UID_BASE + pid * SLOTS + slot`, where `pid` is our
/// process id (so two deltarl processes never share one) and `slot` the run's place among
/// those in flight (so two runs never do). All far above the ranges any distribution gives
/// to accounts, so no real user's processes share them.
pub const UID_BASE: u32 = 4_000_000;

/// Runs one process may have in flight at once; more wait for a free slot.
pub const SLOTS: usize = 256;

/// A checked sandbox: the tools found, the folders programs see.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub(crate) bwrap: PathBuf,
    pub(crate) prlimit: PathBuf,
    /// `Some` when we are root: programs then run as `UID_BASE + slot`.
    pub(crate) setpriv: Option<PathBuf>,
    /// Host folders mounted read-only at the same place.
    pub(crate) read_only: Vec<PathBuf>,
    /// Top-level links of a merged-/usr system (`/bin -> usr/bin`), recreated inside.
    pub(crate) links: Vec<(PathBuf, PathBuf)>,
}

impl Sandbox {
    /// Also mounts `dir` read-only (an interpreter's libraries outside `/usr`).
    pub fn with_read_only(mut self, dir: &Path) -> Self {
        self.read_only.push(dir.to_path_buf());
        self
    }

    /// Refuses a program path the sandbox would not see.
    pub fn check_visible(&self, path: &Path) -> Result<(), Error> {
        let seen = self.read_only.iter().any(|d| path.starts_with(d))
            || self.links.iter().any(|(_, l)| path.starts_with(l));
        if seen && path.exists() {
            return Ok(());
        }
        let dirs: Vec<String> = self
            .read_only
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        Err(Error::NotVisible(path.to_path_buf(), dirs.join(", ")))
    }

    /// Whether programs run under a uid of their own (we are root).
    pub fn drops_privileges(&self) -> bool {
        self.setpriv.is_some()
    }

    /// The uid a slot's programs run as (ours when we are not root).
    pub fn uid(&self, slot: usize) -> u32 {
        match self.setpriv {
            Some(_) => UID_BASE + std::process::id() * SLOTS as u32 + slot as u32,
            None => nix::unistd::geteuid().as_raw(),
        }
    }
}
