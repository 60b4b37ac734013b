//! The vLLM engine of the stages that sample: a server started on the policy folder (its log in the
//! iteration folder where it started, stopped when dropped) or one the user runs, which must
//! serve that very folder.
//!
//! With `rollout.vllm.keep_alive` the server this process starts outlives the stage
//! ([`Kept`], owned by the runner): the next rollout loads the new policy into it in place
//! and, before any request, checks that the log-probs it serves for a fixed probe sequence
//! are the trainer's ([`acquire`]). A kept server that died is started afresh; one that
//! fails the probe is stopped and the stage fails, so the next attempt starts a new one.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use deltarl_model::Dtype;
use deltarl_vllm::{Client, Server, ServerSettings};

use crate::config::VllmOptions;

mod args;
mod placement;
mod probe;
pub use args::{covers, max_model_len, parallel_size, server_arg};
pub use placement::rank_env;
pub use probe::{max_abs_diff, probe_ids, trainer_logprobs, PROBE_TEXT};

/// The `[rollout.vllm]` options resolved once.
#[derive(Clone, Debug)]
pub struct Settings {
    pub python: PathBuf,
    pub extra_args: Vec<String>,
    pub start_timeout: Duration,
    /// Requests in flight at once; None = every prompt of the stage at once.
    pub concurrency: Option<usize>,
    /// A server the user runs.
    pub url: Option<String>,
    pub port: Option<u16>,
    pub keep_alive: bool,
    /// Positions one request may use (`--max-model-len`), when the caller knows them.
    pub max_model_len: Option<usize>,
    /// The largest |served - trainer| probe log-prob a reloaded server may show; None =
    /// by dtype ([`Settings::tolerance`]).
    pub probe_tolerance: Option<f64>,
}

impl Settings {
    pub fn new(o: &VllmOptions) -> Self {
        Settings {
            python: python(o),
            extra_args: o.extra_args.clone(),
            start_timeout: Duration::from_secs(if o.start_timeout_s == 0 {
                600
            } else {
                o.start_timeout_s
            }),
            concurrency: crate::config::zero_is_off(o.concurrency),
            url: (!o.url.is_empty()).then(|| o.url.clone()),
            port: crate::config::zero_is_off(o.port),
            keep_alive: o.keep_alive,
            max_model_len: None,
            probe_tolerance: (o.probe_tolerance > 0.0).then_some(o.probe_tolerance),
        }
    }

    /// The probe tolerance for weights in `dtype`: f32 engines agree to ~2e-6 on the
    /// tests' models (measured), so 1e-4 leaves room for larger vocabularies; bf16 kernels
    /// differ by a few 1e-3 per log-prob, so 5e-2.
    pub fn tolerance(&self, dtype: Dtype) -> f64 {
        self.probe_tolerance.unwrap_or(match dtype {
            Dtype::F32 => 1e-4,
            Dtype::Bf16 => 5e-2,
        })
    }
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

/// Where and how a server runs: its log file, whether on the CPU, the weights' dtype, its
/// global seed, and what its environment pins (the devices or cores of one rank).
#[derive(Clone, Debug)]
pub struct Placement {
    pub log: PathBuf,
    pub cpu: bool,
    pub dtype: Dtype,
    pub seed: u64,
    pub env: Vec<(String, String)>,
}

/// A client and, when started here, its server.
pub struct Vllm {
    pub client: Client,
    server: Option<Server>,
    /// How it was started (compared with the next rollout's wish before it is reused).
    started: Option<ServerSettings>,
    /// The policy folder whose weights it serves (canonical).
    serves: PathBuf,
}

/// How a rollout got its server, for its manifest.
pub use deltarl_schemas::Acquired;

/// The server kept between this process's rollouts (none until the first one starts).
#[derive(Default)]
pub struct Kept(RefCell<Option<Vllm>>);

/// What [`acquire`] needs to probe a reloaded server: the probe's token ids and the
/// trainer's log-probs of them (computed only when a reload happens).
pub struct Probe<'a> {
    pub ids: Vec<u32>,
    pub reference: &'a dyn Fn(&[u32]) -> Result<Vec<f32>>,
}

/// The server for `policy`: the user's (which must serve it), the kept one with `policy`
/// loaded in place, or a new one.
pub fn acquire(
    s: &Settings,
    policy: &Path,
    at: &Placement,
    kept: &Kept,
    probe: &Probe,
) -> Result<(Vllm, Acquired)> {
    let folder = policy
        .canonicalize()
        .with_context(|| format!("policy folder {}", policy.display()))?;
    release_device_cache()?;
    if let Some(url) = &s.url {
        return Ok((user(url, folder)?, Acquired::User));
    }
    let wish = server_settings(s, folder.clone(), at);
    let restarted = match kept.0.borrow_mut().take() {
        None => None,
        Some(v) => match reuse(v, &wish) {
            Ok(v) => return reload(v, &folder, at, s, probe),
            Err(why) => Some(why),
        },
    };
    let t0 = Instant::now();
    let server = Server::start(&wish)?;
    let seconds = t0.elapsed().as_secs_f64();
    let client = Client::connect(server.url())?;
    let v = Vllm {
        client,
        server: Some(server),
        started: Some(wish),
        serves: folder,
    };
    Ok((v, Acquired::Started { seconds, restarted }))
}

/// vLLM's own default share of a GPU's memory (`--gpu-memory-utilization`).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// Where a stage's server runs: the launch (one server a rank), the device, the iteration
/// folder its log goes to and the log's name, the server kept between this process's
/// stages, and the policy's dtype and the run's seed.
pub struct Site<'a> {
    pub launch: Option<&'a deltarl_dist::Launch>,
    pub device: tch::Device,
    pub iter_dir: PathBuf,
    /// The log of a server started here: `{log}.log`, `{log}-rank{R}.log` among several
    /// processes (a kept server goes on writing to the log it started with).
    pub log: &'static str,
    pub kept: &'a Kept,
    pub dtype: Dtype,
    pub seed: u64,
}

/// This rank's vLLM server for the policy in `dir` (see [`acquire`]): its log in the
/// iteration's folder (one per rank among several processes, each pinned to the
/// rank's device or cores), said on stderr when started or reloaded. A policy whose LM head
/// is tied to its embeddings is not kept on a CPU (`vs.keep_alive` turned off): vLLM's CPU
/// backend serves the head from a packed copy of the embeddings made at load time, which
/// an in-place reload does not refresh (the probe fails on it, measured).
pub fn for_policy(
    site: &Site,
    vs: &mut Settings,
    dir: &Path,
    tokenizer: &deltarl_model::Tokenizer,
) -> Result<(Vllm, Acquired)> {
    let cfg = deltarl_model::read_config(dir)?;
    if site.launch.is_some_and(|l| l.world > 1) {
        if let Some(tp) = parallel_size(&vs.extra_args) {
            anyhow::bail!(
                "rollout.vllm.extra_args asks for {tp}-way tensor parallelism, but under \
                 torchrun every rank serves from a vLLM server on its own device: drop \
                 --tensor-parallel-size, or run one process (one server over all devices)"
            );
        }
    }
    let (log, pin) = match site.launch {
        Some(l) => (
            format!("{}-rank{}.log", site.log, l.rank),
            rank_env(site.device, l.local_rank, l.local_world),
        ),
        None => (format!("{}.log", site.log), Vec::new()),
    };
    let at = Placement {
        log: site.iter_dir.join(log),
        cpu: site.device == tch::Device::Cpu,
        dtype: site.dtype,
        seed: site.seed,
        env: pin,
    };
    if vs.keep_alive && at.cpu && cfg.tie_word_embeddings {
        vs.keep_alive = false;
        eprintln!(
            "  vLLM server not kept: the policy ties its LM head to its embeddings, which \
             vLLM's CPU backend cannot reload in place"
        );
    }
    // Loaded only when a kept server is reloaded: the trainer's own numbers for the probe.
    let reference = |ids: &[u32]| trainer_logprobs(dir, site.device, site.dtype, ids);
    let probe = Probe {
        ids: probe_ids(tokenizer, cfg.max_position_embeddings)?,
        reference: &reference,
    };
    // Never past the model's own context.
    vs.max_model_len = vs.max_model_len.map(|n| n.min(cfg.max_position_embeddings));
    let (v, acquired) = acquire(vs, dir, &at, site.kept, &probe)?;
    match &acquired {
        Acquired::User => {}
        Acquired::Started { seconds, restarted } => eprintln!(
            "  vLLM server started on {} in {seconds:.1} s{} (log {})",
            dir.display(),
            restarted
                .as_ref()
                .map_or(String::new(), |why| format!(" ({why})")),
            at.log.display()
        ),
        Acquired::Reloaded {
            seconds,
            probe_max_abs,
            ..
        } => eprintln!(
            "  vLLM server reloaded with {} in {seconds:.1} s (probe max |d| {probe_max_abs:.1e})",
            dir.display()
        ),
    }
    Ok((v, acquired))
}

/// Before a server starts or wakes on this device: the memory libtorch's caching allocator
/// still holds for tensors the earlier stages of this process dropped (the update's
/// weights, gradients and optimizer state: tens of GB at 8B) goes back to the device, or
/// a level-2 wake-up sized by `--gpu-memory-utilization` finds it taken. Nothing happens
/// without an accelerator (the CPU build).
fn release_device_cache() -> Result<()> {
    let r = deltarl_dist::empty_device_cache()
        .context("releasing the trainer's cached device memory before vLLM takes the device")?;
    if r.reserved_before > r.reserved_after {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        eprintln!(
            "  trainer's cached device memory released for vLLM: {:.2} GiB ({:.2} GiB still held)",
            gib(r.reserved_before - r.reserved_after),
            gib(r.reserved_after)
        );
    }
    Ok(())
}

/// After a successful rollout: keeps the server for the next one (asleep on CUDA, so
/// training gets the device memory back), or stops it.
pub fn release(v: Vllm, s: &Settings, kept: &Kept) -> Result<()> {
    if !s.keep_alive || v.server.is_none() {
        return Ok(());
    }
    if v.started.as_ref().is_some_and(|w| w.sleep_mode) {
        v.client
            .sleep(2)
            .map_err(|e| v.explain(e.into()))
            .context("putting the kept vLLM server to sleep for training")?;
    }
    *kept.0.borrow_mut() = Some(v);
    Ok(())
}

/// The user's server, which must serve `folder`.
fn user(url: &str, folder: PathBuf) -> Result<Vllm> {
    let client = Client::connect(url)?;
    let (name, root) = client.served();
    let served = root.unwrap_or(name);
    let same = Path::new(served).canonicalize().is_ok_and(|p| p == folder);
    if !same {
        bail!(
            "rollout.vllm.url {url} serves {served}, not this iteration's policy {}: start it \
             with --model {} (or leave url empty to let the stage start one)",
            folder.display(),
            folder.display()
        );
    }
    Ok(Vllm {
        client,
        server: None,
        started: None,
        serves: folder,
    })
}

/// How to start a server on `folder` for these settings and placement.
fn server_settings(s: &Settings, folder: PathBuf, at: &Placement) -> ServerSettings {
    ServerSettings {
        python: s.python.clone(),
        model: folder,
        dtype: at.dtype.hf_name(),
        port: s.port,
        cpu: at.cpu,
        extra_args: s.extra_args.clone(),
        max_model_len: s.max_model_len,
        start_timeout: s.start_timeout,
        log: at.log.clone(),
        seed: at.seed,
        dev_mode: s.keep_alive,
        sleep_mode: s.keep_alive && !at.cpu,
        env: at.env.clone(),
    }
}

/// The kept server when it still runs and was started as `wish` asks (the folder, log and
/// time-out aside, and with at least the positions a request may use that `wish` asks:
/// a server with room for longer requests serves shorter ones alike); otherwise why not
/// (it is stopped when dropped here).
fn reuse(v: Vllm, wish: &ServerSettings) -> Result<Vllm, String> {
    let Some(server) = &v.server else {
        return Err("the kept server was not started here".into());
    };
    if let Err(e) = server.check() {
        return Err(format!("the kept server had stopped: {e}"));
    }
    if let Err(e) = server.healthy(Duration::from_secs(30)) {
        return Err(format!("the kept server does not answer: {e}"));
    }
    let comparable = |w: &ServerSettings| ServerSettings {
        model: PathBuf::new(),
        log: PathBuf::new(),
        start_timeout: Duration::ZERO,
        max_model_len: None,
        ..w.clone()
    };
    let Some(started) = &v.started else {
        return Err("the kept server was not started here".into());
    };
    if comparable(started) != comparable(wish) {
        return Err("the kept server was started with other settings".into());
    }
    if !covers(started.max_model_len, wish.max_model_len) {
        let wanted = wish
            .max_model_len
            .map_or("the model's whole context".to_string(), |w| w.to_string());
        return Err(format!(
            "the kept server takes requests of up to {} positions, {wanted} are needed",
            started.max_model_len.unwrap_or(0),
        ));
    }
    Ok(v)
}

/// Loads `folder` into the kept server and checks the probe before any request.
fn reload(
    v: Vllm,
    folder: &Path,
    at: &Placement,
    s: &Settings,
    probe: &Probe,
) -> Result<(Vllm, Acquired)> {
    let t0 = Instant::now();
    // The trainer's numbers first: on CUDA the server still sleeps, so this load has the
    // device to itself.
    let want = (probe.reference)(&probe.ids).context("the probe's log-probs under the policy")?;
    let step = |what: &str, r: deltarl_vllm::Result<()>| -> Result<()> {
        r.map_err(|e| v.explain(e.into()))
            .with_context(|| format!("{what} the kept vLLM server"))
    };
    if v.started.as_ref().is_some_and(|w| w.sleep_mode) {
        step("waking", v.client.wake_up())?;
    }
    step(
        "loading the policy into",
        v.client.reload_weights(folder, s.start_timeout),
    )
    .with_context(|| format!("policy {}", folder.display()))?;
    step(
        "resetting the prefix cache of",
        v.client.reset_prefix_cache(),
    )?;
    let got = v
        .client
        .prompt_logprobs(&probe.ids)
        .map_err(|e| v.explain(e.into()))
        .context("probing the kept vLLM server")?;
    let max_abs = max_abs_diff(&got, &want)?;
    let tolerance = s.tolerance(at.dtype);
    if max_abs.is_nan() || max_abs > tolerance {
        // Dropping `v` stops the server: the next attempt starts one on the folder.
        bail!(
            "the kept vLLM server does not serve {} after reloading it: the probe's log-probs \
             differ from the trainer's by up to {max_abs:.3e} (tolerance {tolerance:.1e}, \
             rollout.vllm.probe_tolerance); the server is stopped and the next attempt starts \
             a new one",
            folder.display()
        );
    }
    let v = Vllm {
        serves: folder.to_path_buf(),
        ..v
    };
    let acquired = Acquired::Reloaded {
        seconds: t0.elapsed().as_secs_f64(),
        probe_tokens: got.len(),
        probe_max_abs: max_abs,
    };
    Ok((v, acquired))
}

impl Vllm {
    /// The policy folder it serves.
    pub fn serves(&self) -> &Path {
        &self.serves
    }

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
