//! Why a sandbox cannot be used.

use std::path::PathBuf;

/// Why a sandbox cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{tool} is not installed ({why}); install it with `{install}` (`make sandbox` does this on Debian as root)")]
    Missing {
        tool: &'static str,
        why: &'static str,
        install: &'static str,
    },
    #[error("bubblewrap is installed but cannot build a sandbox here ({0}); it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1) or root")]
    Probe(String),
    #[error(
        "{0} is not inside the sandbox's read-only folders ({1}): a program's interpreter must be"
    )]
    NotVisible(PathBuf, String),
    #[error("cannot start the sandbox: {0}")]
    Spawn(std::io::Error),
    #[error("cannot make this process a child subreaper (prctl): {0}")]
    Subreaper(nix::Error),
}
