//! What one sandboxed run may use.

use std::time::Duration;

/// Limits of one sandboxed run. CPU time, address space, file size, open files and
/// processes are rlimits (inherited by every process the program starts); the wall clock is
/// kept by the caller's side, which kills the whole sandbox when it runs out.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Wall-clock time, from spawn to the end of the last process.
    pub wall: Duration,
    /// CPU seconds of each process (RLIMIT_CPU; SIGXCPU then SIGKILL past it).
    pub cpu_seconds: u64,
    /// Address space of each process in bytes (RLIMIT_AS): an allocation past it fails.
    pub memory_bytes: u64,
    /// Largest file a process may write (RLIMIT_FSIZE).
    pub file_bytes: u64,
    /// Size of the private `/tmp` (a tmpfs, so its bytes are memory).
    pub tmp_bytes: u64,
    /// Processes (and threads) of the sandbox's user (RLIMIT_NPROC): a fork bomb stops here.
    pub processes: u64,
    /// Open file descriptors of each process (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Bytes of stdout kept; the rest is read and dropped, so a flood cannot block the
    /// program nor fill the host's memory.
    pub stdout_bytes: usize,
    /// Bytes of stderr kept (the same way).
    pub stderr_bytes: usize,
}

impl Default for Limits {
    /// Room for a contest solution in Python: 10 s, 4 GiB, 64 processes.
    fn default() -> Self {
        Limits {
            wall: Duration::from_secs(10),
            cpu_seconds: 10,
            memory_bytes: 4 << 30,
            file_bytes: 16 << 20,
            tmp_bytes: 64 << 20,
            processes: 64,
            open_files: 256,
            stdout_bytes: 1 << 20,
            stderr_bytes: 64 << 10,
        }
    }
}
