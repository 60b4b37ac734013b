//! A folder written under a temporary name and renamed when complete.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A folder being written under a temporary name beside its final one: removed if dropped
/// before [`TempFolder::commit`], so no error path leaves it behind.
pub struct TempFolder {
    path: PathBuf,
    committed: bool,
}

impl TempFolder {
    /// The folder process `pid` writes as `name` in `parent`: `.NAME.tmp-PID`.
    pub fn path_for(parent: &Path, name: &str, pid: u32) -> PathBuf {
        parent.join(format!(".{name}.tmp-{pid}"))
    }

    /// [`TempFolder::path_for`] this process, emptied first.
    pub fn new(parent: &Path, name: &str) -> Result<Self> {
        let path = Self::path_for(parent, name, std::process::id());
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(TempFolder {
            path,
            committed: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces `dest` with the folder.
    pub fn commit(mut self, dest: &Path) -> Result<()> {
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .with_context(|| format!("cannot replace {}", dest.display()))?;
        }
        std::fs::rename(&self.path, dest).with_context(|| {
            format!("cannot move {} to {}", self.path.display(), dest.display())
        })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
