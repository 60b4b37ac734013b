//! One sandboxed run: the command line, the wall clock, capped output, and nothing left
//! alive afterwards.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::slots::Slot;
use crate::{Error, Limits, Sandbox};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The program's exit code (bubblewrap reports a program killed by signal `n` as
    /// `128 + n`, as a shell does).
    Code(i32),
    /// The sandbox itself died of this signal.
    Signal(i32),
    /// The wall clock ran out and we killed everything.
    WallTimeout,
}

/// What a run left behind.
#[derive(Clone, Debug)]
pub struct Output {
    pub exit: Exit,
    /// Up to `Limits::stdout_bytes` of stdout.
    pub stdout: Vec<u8>,
    /// Whether stdout had more than was kept.
    pub stdout_truncated: bool,
    /// Up to `Limits::stderr_bytes` of stderr.
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
    /// The uid the run had (ours when we are not root).
    pub uid: u32,
}

/// Reads `r` to its end, keeping the first `cap` bytes: a program that floods its output is
/// drained (never blocked on a full pipe) and costs no memory past the cap.
fn read_capped(mut r: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let (mut kept, mut more, mut buf) = (Vec::new(), false, [0u8; 64 << 10]);
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return (kept, more),
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more |= n > room;
            }
        }
    }
}

/// What `/proc/<pid>/status` says of one process: its real uid, its parent, whether it is
/// a zombie.
struct Status {
    uid: u32,
    parent: i32,
    zombie: bool,
}

fn status_of(dir: &Path) -> Option<Status> {
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
    };
    Some(Status {
        uid: field("Uid:")?.parse().ok()?,
        parent: field("PPid:")?.parse().ok()?,
        zombie: field("State:") == Some("Z"),
    })
}

/// The processes whose real uid is `uid`, with their status.
fn statuses_of(uid: u32) -> Vec<(Pid, Status)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let s = status_of(&e.path())?;
        (s.uid == uid).then_some((Pid::from_raw(pid), s))
    })
    .collect()
}

/// Pids of the processes whose real uid is `uid` (from `/proc/<pid>/status`), zombies
/// included or not.
pub fn processes_of(uid: u32, zombies: bool) -> Vec<Pid> {
    statuses_of(uid)
        .into_iter()
        .filter(|(_, s)| zombies || !s.zombie)
        .map(|(p, _)| p)
        .collect()
}

impl Sandbox {
    /// The command line: `[setpriv] prlimit bwrap <argv>`, each of the first two exec'ing
    /// the next, so the child we hold is bubblewrap itself.
    fn command(&self, slot: usize, argv: &[&Path], limits: &Limits) -> Command {
        // Not root: the process limit counts all of our user's processes, so it is set
        // that many above what is running now.
        let processes = match self.setpriv {
            Some(_) => limits.processes,
            None => limits.processes + processes_of(self.uid(slot), true).len() as u64,
        };
        let rlimits = [
            format!("--cpu={}", limits.cpu_seconds),
            format!("--as={}", limits.memory_bytes),
            format!("--fsize={}", limits.file_bytes),
            format!("--nofile={}", limits.open_files),
            format!("--nproc={processes}"),
        ];
        let mut cmd = match &self.setpriv {
            Some(setpriv) => {
                let uid = self.uid(slot);
                let mut c = Command::new(setpriv);
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".into(),
                    "--".into(),
                ]);
                c.arg(&self.prlimit);
                c
            }
            None => Command::new(&self.prlimit),
        };
        cmd.args(rlimits).arg("--").arg(&self.bwrap);
        cmd.args([
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]);
        for dir in &self.read_only {
            cmd.arg("--ro-bind").arg(dir).arg(dir);
        }
        for (target, link) in &self.links {
            cmd.arg("--symlink").arg(target).arg(link);
        }
        // The root and /dev are made read-only once everything is mounted; /dev/shm and /tmp
        // are small tmpfs, the only places a program can write.
        let tmp = limits.tmp_bytes.to_string();
        cmd.args(["--proc", "/proc", "--dev", "/dev"]);
        cmd.args([
            "--size",
            "1048576",
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
        ]);
        cmd.args(["--size", &tmp, "--tmpfs", "/tmp", "--remount-ro", "/"]);
        cmd.args(["--chdir", "/tmp", "--"]);
        cmd.args(argv);
        // Our own process group, so one signal reaches bubblewrap and anything it forked.
        cmd.process_group(0);
        cmd
    }

    /// Runs `argv` (its first element visible inside: under `/usr` or a read-only folder)
    /// with `stdin` as its input. Safe to call from many threads at once (each run takes a
    /// slot, and with it a uid of its own). Everything the run started is dead when this
    /// returns.
    pub fn run(&self, argv: &[&Path], stdin: &[u8], limits: &Limits) -> Result<Output, Error> {
        let slot = Slot::take();
        let uid = self.uid(slot.0);
        let start = Instant::now();
        let mut child = self
            .command(slot.0, argv, limits)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::Spawn)?;
        let (input, out, err) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (exit, stdout, stderr) = std::thread::scope(|s| {
            // The input is written from its own thread: a program that never reads its
            // stdin must not block us (the write fails when the sandbox ends).
            s.spawn(move || {
                if let Some(mut i) = input {
                    let _ = i.write_all(stdin);
                }
            });
            let out = s.spawn(move || out.map(|o| read_capped(o, limits.stdout_bytes)));
            let err = s.spawn(move || err.map(|e| read_capped(e, limits.stderr_bytes)));
            let exit = loop {
                match child.try_wait() {
                    Ok(Some(status)) => match (status.code(), status.signal()) {
                        (Some(c), _) => break Exit::Code(c),
                        (None, Some(s)) => break Exit::Signal(s),
                        (None, None) => break Exit::Signal(0),
                    },
                    Ok(None) if start.elapsed() < limits.wall => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Ok(None) | Err(_) => {
                        self.stop(&mut child, uid);
                        break Exit::WallTimeout;
                    }
                }
            };
            self.kill_uid(uid, None);
            self.reap_uid(uid);
            let stdout = out.join().ok().flatten().unwrap_or_default();
            let stderr = err.join().ok().flatten().unwrap_or_default();
            (exit, stdout, stderr)
        });
        Ok(Output {
            exit,
            stdout: stdout.0,
            stdout_truncated: stdout.1,
            stderr: stderr.0,
            elapsed: start.elapsed(),
            uid,
        })
    }

    /// Ends a run from the inside out: as root, first every process of the run's uid but
    /// bubblewrap's outer process (our child), so that it sees its namespace end and reaps
    /// it; then the child and its process group. Killing the child first would orphan the
    /// namespace's first process to the host's init, which may never reap it.
    fn stop(&self, child: &mut Child, uid: u32) {
        let outer = Pid::from_raw(child.id() as i32);
        if self.setpriv.is_some() {
            self.kill_uid(uid, Some(outer));
            let waited = Instant::now();
            while waited.elapsed() < Duration::from_secs(2) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let _ = killpg(outer, Signal::SIGKILL);
        let _ = child.wait();
    }

    /// Waits (at most 2 s) until no process of `uid` is left, zombies included, reaping
    /// those whose parent is this process (as its subreaper, see [`Sandbox::detect`]), so
    /// the slot's next run starts with none against its process limit. As root only.
    fn reap_uid(&self, uid: u32) {
        if self.setpriv.is_none() {
            return;
        }
        let me = nix::unistd::getpid().as_raw();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            let left = statuses_of(uid);
            if left.is_empty() {
                return;
            }
            for (pid, s) in left {
                if s.zombie && s.parent == me {
                    let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
                } else if !s.zombie {
                    let _ = kill(pid, Signal::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Kills every process of `uid` but `spare` (as root only: otherwise `uid` is ours),
    /// repeated while any remain, since a fork bomb forks while it is being killed. Zombies
    /// are left to their parents.
    fn kill_uid(&self, uid: u32, spare: Option<Pid>) {
        if self.setpriv.is_none() {
            return;
        }
        for _ in 0..200 {
            let left: Vec<Pid> = processes_of(uid, false)
                .into_iter()
                .filter(|p| Some(*p) != spare)
                .collect();
            if left.is_empty() {
                return;
            }
            for pid in left {
                let _ = kill(pid, Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
