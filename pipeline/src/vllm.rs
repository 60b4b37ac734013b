//! The rollout stage's vLLM engine: a server started on this iteration's policy folder (its
//! log in the iteration folder, stopped when dropped) or one the user runs, which must serve
//! that very folder.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use deltarl_model::Dtype;
use deltarl_vllm::{Client, Server, ServerSettings};

use crate::config::VllmOptions;

/// A client and, when started here, its server.
pub struct Vllm {
    pub client: Client,
    server: Option<Server>,
    /// Seconds from starting the server to its first healthy answer (0 for a user's).
    pub startup_seconds: f64,
}

/// The interpreter of vLLM's virtual environment.
pub fn python(o: &VllmOptions) -> PathBuf {
    if !o.python.is_empty() {
        return PathBuf::from(&o.python);
    }
    if let Some(p) = std::env::var_os("DELTARL_VLLM_PYTHON") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/deltarl/vllm-venv/bin/python")
}

pub fn concurrency(o: &VllmOptions) -> usize {
    if o.concurrency == 0 {
        8
    } else {
        o.concurrency
    }
}

/// Where and how a server runs: its log file, whether on the CPU, the weights' dtype, its
/// global seed.
#[derive(Clone, Debug)]
pub struct Placement {
    pub log: PathBuf,
    pub cpu: bool,
    pub dtype: Dtype,
    pub seed: u64,
}

/// Starts (or reaches, with `url`) the server for the policy in `policy`.
pub fn connect(o: &VllmOptions, policy: &Path, at: &Placement) -> Result<Vllm> {
    let folder = policy
        .canonicalize()
        .with_context(|| format!("policy folder {}", policy.display()))?;
    if !o.url.is_empty() {
        let client = Client::connect(&o.url)?;
        let (name, root) = client.served();
        let served = root.unwrap_or(name);
        let same = Path::new(served).canonicalize().is_ok_and(|p| p == folder);
        if !same {
            bail!(
                "rollout.vllm.url {} serves {served}, not this iteration's policy {}: start it \
                 with --model {} (or leave url empty to let the stage start one)",
                o.url,
                folder.display(),
                folder.display()
            );
        }
        return Ok(Vllm {
            client,
            server: None,
            startup_seconds: 0.0,
        });
    }
    start(o, folder, at)
}

/// Starts a server on the policy folder `folder` (canonical) as `o` says.
pub fn start(o: &VllmOptions, folder: PathBuf, at: &Placement) -> Result<Vllm> {
    let settings = ServerSettings {
        python: python(o),
        model: folder,
        dtype: at.dtype.hf_name(),
        port: crate::config::zero_is_off(o.port),
        cpu: at.cpu,
        extra_args: o.extra_args.clone(),
        start_timeout: Duration::from_secs(if o.start_timeout_s == 0 {
            600
        } else {
            o.start_timeout_s
        }),
        log: at.log.clone(),
        seed: at.seed,
    };
    let t0 = Instant::now();
    let server = Server::start(&settings)?;
    let startup_seconds = t0.elapsed().as_secs_f64();
    let client = Client::connect(server.url())?;
    Ok(Vllm {
        client,
        server: Some(server),
        startup_seconds,
    })
}

impl Vllm {
    /// A failed rollout: when the server started here has stopped, that is the cause,
    /// said with its exit status and the end of its log.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        let died = self
            .server
            .as_ref()
            .and_then(|s| s.stopped_within(Duration::from_secs(5)));
        match died {
            Some(died) => e.context(died.to_string()),
            None => e,
        }
    }
}
