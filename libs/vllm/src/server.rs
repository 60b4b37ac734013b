//! The vLLM server as a child process of the rollout stage.

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// How to start a server.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// The Python of the vLLM virtual environment (`make vllm`).
    pub python: PathBuf,
    /// The Hugging Face folder to serve (this iteration's policy).
    pub model: PathBuf,
    /// `float32` | `bfloat16`.
    pub dtype: &'static str,
    /// The port to listen on (None = a free one).
    pub port: Option<u16>,
    /// On a CPU: eager mode, a small share of host memory for the KV cache and no chunked
    /// prefill, unless the extra arguments say otherwise.
    pub cpu: bool,
    /// Passed through to the server (tensor / data parallel size, memory, max length...).
    pub extra_args: Vec<String>,
    /// `--max-model-len` unless `extra_args` gives one: the positions one request may use
    /// (its prompt and response). Without it vLLM sizes for the model's whole context,
    /// which a CPU server's cache (a share of host memory) may not hold: SmolLM2's 8,192
    /// positions did not fit 0.1 of 24 GB and the engine refused to start.
    pub max_model_len: Option<usize>,
    pub start_timeout: Duration,
    /// The server's standard output and error go here.
    pub log: PathBuf,
    /// The server's global seed.
    pub seed: u64,
    /// Expose vLLM's development endpoints (`VLLM_SERVER_DEV_MODE=1`): in-place weight
    /// reloads, prefix-cache resets, sleep and wake. Only on 127.0.0.1, where it listens.
    pub dev_mode: bool,
    /// `--enable-sleep-mode` (CUDA only: vLLM's CPU backend has no sleep mode).
    pub sleep_mode: bool,
    /// Set in the server's environment (the devices or cores it may use).
    pub env: Vec<(String, String)>,
}

/// A running server; stopped (SIGTERM, then SIGKILL) when dropped, and sent SIGTERM by the
/// kernel if this process dies first.
#[derive(Debug)]
pub struct Server {
    child: Mutex<Child>,
    url: String,
    log: PathBuf,
}

/// Runs vLLM's server module after asking the kernel for SIGTERM when the parent dies
/// (`prctl(PR_SET_PDEATHSIG)`, 1 on Linux); exits at once if the parent is already gone.
const LAUNCHER: &str = "import ctypes, os, runpy, signal, sys\n\
parent = os.getppid()\n\
ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n\
if os.getppid() != parent: sys.exit(1)\n\
module = sys.argv[1]\n\
sys.argv = [module] + sys.argv[2:]\n\
runpy.run_module(module, run_name='__main__', alter_sys=True)\n";

/// A port nobody listens on now.
fn free_port() -> Result<u16> {
    let l = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::Setup(format!("cannot find a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Setup(format!("cannot find a free port: {e}")))
}

/// The last `n` lines of a log file (empty when it cannot be read).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    pub fn start(s: &ServerSettings) -> Result<Server> {
        if !s.python.exists() {
            return Err(Error::Setup(format!(
                "vLLM's Python {} does not exist: run `make vllm` (or set rollout.vllm.python)",
                s.python.display()
            )));
        }
        let port = match s.port {
            Some(p) => {
                // Refuse a busy port up front, by name, instead of a server dying later.
                TcpListener::bind(("127.0.0.1", p)).map_err(|e| {
                    Error::Setup(format!(
                        "port {p} is already in use ({e}): set rollout.vllm.port to a free one or 0"
                    ))
                })?;
                p
            }
            None => free_port()?,
        };
        let url = format!("http://127.0.0.1:{port}");
        let mut args: Vec<String> = [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--model",
            &s.model.display().to_string(),
            "--dtype",
            s.dtype,
            "--seed",
            &s.seed.to_string(),
            // Log-probs at the sampling temperature, as our own engine records them.
            "--logprobs-mode",
            "processed_logprobs",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let given = |flag: &str| s.extra_args.iter().any(|a| a.starts_with(flag));
        if s.cpu {
            if !given("--enforce-eager") {
                args.push("--enforce-eager".into());
            }
            // On a CPU vLLM reserves this share of host memory for its cache.
            if !given("--gpu-memory-utilization") {
                args.extend(["--gpu-memory-utilization".into(), "0.1".into()]);
            }
            // vLLM 0.32's CPU runner rewinds a seeded request's generator when a step
            // prefilled only part of its prompt, which CPU generators cannot do: the engine
            // dies ("CPU Generator does not use offset") once the prompts in flight exceed
            // one step's token budget. Whole prompts a step avoid it.
            if !given("--enable-chunked-prefill") && !given("--no-enable-chunked-prefill") {
                args.push("--no-enable-chunked-prefill".into());
            }
        }
        if let Some(len) = s.max_model_len.filter(|_| !given("--max-model-len")) {
            args.extend(["--max-model-len".into(), len.to_string()]);
        }
        if s.sleep_mode && !given("--enable-sleep-mode") {
            args.push("--enable-sleep-mode".into());
        }
        args.extend(s.extra_args.iter().cloned());
        let log = File::create(&s.log).map_err(|e| {
            Error::Setup(format!(
                "cannot create the server log {}: {e}",
                s.log.display()
            ))
        })?;
        let err_log = log
            .try_clone()
            .map_err(|e| Error::Setup(format!("{}: {e}", s.log.display())))?;
        // The server's own process group (stopped as a whole, workers included), and a
        // parent-death signal set by Python before vLLM starts, so the kernel stops the
        // server if this process dies without running destructors (a crash, SIGKILL).
        let mut cmd = Command::new(&s.python);
        cmd.arg("-c")
            .arg(LAUNCHER)
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .process_group(0);
        if s.dev_mode {
            cmd.env("VLLM_SERVER_DEV_MODE", "1");
        }
        cmd.envs(s.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().map_err(|e| {
            Error::Setup(format!(
                "cannot start {} -m vllm...: {e}",
                s.python.display()
            ))
        })?;
        let server = Server {
            child: Mutex::new(child),
            url,
            log: s.log.clone(),
        };
        server.wait_healthy(s.start_timeout)?;
        Ok(server)
    }

    /// Ok when the server runs and answers `/health` with 200 within `within`; otherwise
    /// an error saying which (a process that runs but does not answer is wedged).
    pub fn healthy(&self, within: Duration) -> Result<()> {
        self.check()?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(within))
            .http_status_as_error(false)
            .build()
            .into();
        match agent.get(format!("{}/health", self.url)).call() {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(self.error(&format!("GET /health answered {}", r.status()))),
            Err(e) => Err(self.error(&format!(
                "GET /health had no answer within {} s: {e}",
                within.as_secs()
            ))),
        }
    }

    fn wait_healthy(&self, timeout: Duration) -> Result<()> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .into();
        let start = Instant::now();
        loop {
            self.check()?;
            let health = agent.get(format!("{}/health", self.url)).call();
            if health.is_ok_and(|r| r.status() == 200) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(self.error(&format!(
                    "not healthy after {} s (rollout.vllm.start_timeout_s)",
                    timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// An error about this server, with the last lines of its log.
    pub fn error(&self, message: &str) -> Error {
        Error::Server {
            url: self.url.clone(),
            message: format!(
                "{message}; last lines of {}:\n{}",
                self.log.display(),
                log_tail(&self.log, 20)
            ),
        }
    }

    /// Whether the server stops within `wait` (a request that failed because the server
    /// died can fail a moment before its process is gone): the error saying so, or None.
    pub fn stopped_within(&self, wait: Duration) -> Option<Error> {
        let start = Instant::now();
        loop {
            if let Err(e) = self.check() {
                return Some(e);
            }
            if start.elapsed() >= wait {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ok while the server runs; an error naming its exit status, with its log, once it
    /// has stopped.
    pub fn check(&self) -> Result<()> {
        let polled = match self.child.lock() {
            Ok(mut c) => c.try_wait(),
            Err(_) => return Err(self.error("the server's handle was poisoned")),
        };
        match polled {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.error(&format!("the server exited ({status})"))),
            Err(e) => Err(self.error(&format!("cannot poll the server: {e}"))),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        use nix::sys::signal::{killpg, Signal};
        let Ok(child) = self.child.get_mut() else {
            return;
        };
        // The server leads its own process group: signal it and its workers.
        let group = nix::unistd::Pid::from_raw(child.id() as i32);
        if let Ok(None) = child.try_wait() {
            let _ = killpg(group, Signal::SIGTERM);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // A wedged server (stopped, or deaf to SIGTERM) must not block this wait.
        if let Ok(None) = child.try_wait() {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = child.wait();
        // What is left of the group (Python's resource tracker ignores SIGTERM and cleans
        // shared memory up once its clients are gone) gets a few seconds, then SIGKILL:
        // a server that died hard can leave it waiting forever.
        let start = Instant::now();
        while killpg(group, None).is_ok() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = killpg(group, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(dir: &Path, python: PathBuf, port: Option<u16>) -> ServerSettings {
        ServerSettings {
            python,
            model: dir.to_path_buf(),
            dtype: "float32",
            port,
            cpu: true,
            extra_args: vec![],
            max_model_len: None,
            start_timeout: Duration::from_secs(5),
            log: dir.join("vllm.log"),
            seed: 0,
            dev_mode: false,
            sleep_mode: false,
            env: vec![],
        }
    }

    #[test]
    fn a_missing_python_names_make_vllm() {
        let dir = tempfile::tempdir().unwrap();
        let err = Server::start(&settings(dir.path(), dir.path().join("nope/python"), None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("make vllm"), "{err}");
    }

    #[test]
    fn a_busy_port_is_refused_by_number() {
        let dir = tempfile::tempdir().unwrap();
        let busy = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = busy.local_addr().unwrap().port();
        // Any existing executable: the port is checked before anything starts.
        let err = Server::start(&settings(dir.path(), "/bin/sh".into(), Some(port)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("port {port} is already in use")),
            "{err}"
        );
    }

    #[test]
    fn a_server_that_dies_at_start_up_reports_its_log() {
        let dir = tempfile::tempdir().unwrap();
        // /bin/sh -m ... fails at once with a usage message: the error carries it.
        let err = Server::start(&settings(dir.path(), "/bin/sh".into(), None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the server exited"), "{err}");
        assert!(err.contains("vllm.log"), "{err}");
    }
}
