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

mod detect;
mod error;
mod limits;
mod run;
mod sandbox;
mod slots;

pub use error::Error;
pub use limits::Limits;
pub use run::{processes_of, Exit, Output};
pub use sandbox::{Sandbox, SLOTS, UID_BASE};
