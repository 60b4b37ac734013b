//! Runs untrusted programs (the model's code) isolated from the host, with an existing,
//! maintained tool for each part of the job:
//!
//! 1. **bubblewrap** (`bwrap`) gives every run new namespaces: no network (only its own
//!    loopback, so a server on the host's 127.0.0.1 is unreachable), its own process tree
//!    (when its first process ends, the kernel kills the rest), a root made of `/usr`
//!    read-only and a private size-capped `/tmp`: the run folder, the home folder and the
//!    host's `/tmp` do not exist inside.
//! 2. **setpriv** (util-linux), when we are root, drops to an unprivileged uid of its own
//!    per worker slot, so the process limit counts this sandbox's processes only (root is
//!    exempt from it) and the slot's leftovers can be killed by uid.
//! 3. **prlimit** (util-linux) sets the rlimits every process inherits ([`Limits`]).
//! 4. Here: a wall clock, stdout and stderr read to a cap (the rest drained and dropped),
//!    and at the end the whole process group killed and, as root, every process of the
//!    slot's uid.
//!
//! [`Sandbox::detect`] checks the tools are there and work before anything runs; there is
//! no fallback to running unsandboxed.

mod limits;
mod run;
mod slots;

use std::path::{Path, PathBuf};

pub use limits::Limits;
pub use run::{processes_of, Exit, Output};

/// Uids of the runs when we are root: `UID_BASE + pid * SLOTS + slot`, where `pid` is our
/// process id (so two deltarl processes never share one) and `slot` the run's place among
/// those in flight (so two runs never do). All far above the ranges any distribution gives
/// to accounts, so no real user's processes share them.
pub const UID_BASE: u32 = 4_000_000;

/// Runs one process may have in flight at once; more wait for a free slot.
pub const SLOTS: usize = 256;

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

/// A checked sandbox: the tools found, the folders programs see.
#[derive(Clone, Debug)]
pub struct Sandbox {
    bwrap: PathBuf,
    prlimit: PathBuf,
    /// `Some` when we are root: programs then run as `UID_BASE + slot`.
    setpriv: Option<PathBuf>,
    /// Host folders mounted read-only at the same place.
    read_only: Vec<PathBuf>,
    /// Top-level links of a merged-/usr system (`/bin -> usr/bin`), recreated inside.
    links: Vec<(PathBuf, PathBuf)>,
}

/// The first executable called `name` on `PATH` (and in the sbin folders root uses).
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Sandbox {
    /// Finds bubblewrap, prlimit and (as root) setpriv, and runs `/usr/bin/true` inside to
    /// prove the namespaces can be made. The error names what is missing and how to
    /// install it.
    ///
    /// As root this process also becomes a child subreaper: bubblewrap's outer process
    /// exits without reaping the namespace's first process, which the kernel then hands to
    /// the nearest subreaper — the host's init otherwise, which may reap late, and until it
    /// does each leftover counts against the slot uid's process limit, so the next runs of
    /// the slot fail to fork (seen here: 64 zombies, then "bwrap: Can't fork"). Each run
    /// reaps its own ([`Sandbox::run`]). Other orphans of this process's children are
    /// reparented here too and stay zombies until it exits.
    pub fn detect() -> Result<Self, Error> {
        let bwrap = which("bwrap").ok_or(Error::Missing {
            tool: "bubblewrap (bwrap)",
            why: "every program runs in its namespaces",
            install: "apt-get install bubblewrap",
        })?;
        let prlimit = which("prlimit").ok_or(Error::Missing {
            tool: "prlimit",
            why: "it sets the programs' resource limits",
            install: "apt-get install util-linux",
        })?;
        let setpriv = if nix::unistd::geteuid().is_root() {
            let setpriv = which("setpriv").ok_or(Error::Missing {
                tool: "setpriv",
                why: "as root, programs must drop to an unprivileged uid",
                install: "apt-get install util-linux",
            })?;
            nix::sys::prctl::set_child_subreaper(true).map_err(Error::Subreaper)?;
            Some(setpriv)
        } else {
            None
        };
        let mut read_only = vec![PathBuf::from("/usr")];
        let mut links = Vec::new();
        for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
            let p = Path::new(top);
            match std::fs::read_link(p) {
                Ok(target) => links.push((target, p.to_path_buf())),
                Err(_) if p.is_dir() => read_only.push(p.to_path_buf()),
                Err(_) => {}
            }
        }
        let sandbox = Sandbox {
            bwrap,
            prlimit,
            setpriv,
            read_only,
            links,
        };
        let limits = Limits {
            wall: std::time::Duration::from_secs(20),
            ..Limits::default()
        };
        let out = sandbox.run(&["/usr/bin/true".as_ref()], b"", &limits)?;
        if out.exit != Exit::Code(0) {
            return Err(Error::Probe(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(sandbox)
    }

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
