//! The rollout stage's vLLM engine: a server started on the policy folder (its log in the
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

mod placement;
pub use placement::rank_env;

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

/// A fixed text whose tokens the probe scores: words, digits and LaTeX, as responses have.
pub const PROBE_TEXT: &str =
    "Question: what is 12 + 30? Let's think step by step. 12 + 30 = 42, so the answer is \\boxed{42}.";

/// The probe's length in tokens (short: the trainer scores it once per reload).
const PROBE_TOKENS: usize = 32;

/// The probe's token ids: the first [`PROBE_TOKENS`] tokens of [`PROBE_TEXT`], at most
/// `context` (the model's context length).
pub fn probe_ids(tokenizer: &deltarl_model::Tokenizer, context: usize) -> Result<Vec<u32>> {
    let mut ids = tokenizer.encode(PROBE_TEXT)?;
    ids.truncate(PROBE_TOKENS.min(context));
    Ok(ids)
}

/// The trainer's log-probs of `ids` under the policy in `folder`, loaded for this only.
pub fn trainer_logprobs(
    folder: &Path,
    device: tch::Device,
    dtype: Dtype,
    ids: &[u32],
) -> Result<Vec<f32>> {
    let p = deltarl_model::load(folder, device, dtype)
        .with_context(|| format!("cannot load the policy in {}", folder.display()))?;
    Ok(p.model.sequence_logprobs(ids, device)?)
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

/// The positions one request may use (`--max-model-len`): the longest prompt and the
/// response, rounded up to a power of two so that a kept server restarts only when an
/// iteration's prompts need more, and never past the model's context.
pub fn max_model_len(longest_prompt: usize, max_new_tokens: usize, context: usize) -> usize {
    (longest_prompt + max_new_tokens)
        .next_power_of_two()
        .min(context)
}

/// The value a server argument is given in `args` (`--name V` or `--name=V`), the last
/// one when repeated, as vLLM's parser takes it.
pub fn server_arg<'a>(args: &'a [String], names: &[&str]) -> Option<&'a str> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.split_once('=') {
            Some((k, v)) if names.contains(&k) => found = Some(v),
            None if names.contains(&a.as_str()) => found = it.next().map(String::as_str),
            _ => {}
        }
    }
    found
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
/// time-out aside); otherwise why not (it is stopped when dropped here).
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
        ..w.clone()
    };
    match &v.started {
        Some(started) if comparable(started) == comparable(wish) => Ok(v),
        _ => Err("the kept server was started with other settings".into()),
    }
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

/// max |a - b| over two equally long lists (an error when they are not).
fn max_abs_diff(a: &[f32], b: &[f32]) -> Result<f64> {
    if a.len() != b.len() || a.is_empty() {
        bail!(
            "the server scored {} probe tokens, the trainer {}",
            a.len(),
            b.len()
        );
    }
    Ok(a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, |m, d| if d.is_nan() || d > m { d } else { m }))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_probe_difference_is_the_largest_and_nan_counts_as_a_mismatch() {
        assert_eq!(max_abs_diff(&[-1.0, -2.5], &[-1.25, -2.0]).unwrap(), 0.5);
        assert!(max_abs_diff(&[f32::NAN, -1.0], &[-1.0, -1.0])
            .unwrap()
            .is_nan());
        assert!(max_abs_diff(&[-1.0], &[-1.0, -2.0]).is_err());
        assert!(max_abs_diff(&[], &[]).is_err());
    }

    #[test]
    fn server_arguments_and_the_context_by_hand() {
        let args: Vec<String> = ["--gpu-memory-utilization", "0.85", "-tp=2", "--seed"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(
            server_arg(&args, &["--gpu-memory-utilization"]),
            Some("0.85")
        );
        assert_eq!(
            server_arg(&args, &["--tensor-parallel-size", "-tp"]),
            Some("2")
        );
        // A flag at the end has no value; one never given is None.
        assert_eq!(server_arg(&args, &["--seed"]), None);
        assert_eq!(server_arg(&args, &["--max-model-len"]), None);
        // 2,048 + 20,480 = 22,528 -> 32,768, Qwen3-8B's context; a shorter context caps it.
        assert_eq!(max_model_len(2048, 20480, 32768), 32768);
        assert_eq!(max_model_len(2048, 20480, 24576), 24576);
        assert_eq!(max_model_len(100, 28, 4096), 128);
    }
}
