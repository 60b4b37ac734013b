//! Finding the tools a sandbox needs and proving they work here, before anything runs.

use std::path::{Path, PathBuf};

use crate::{Error, Exit, Limits, Sandbox};

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
}
