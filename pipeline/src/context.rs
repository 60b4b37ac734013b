//! An opened run: its validated configuration, its directory and the device. Opening reads
//! and validates; nothing is written until the run's lock is held ([`Ctx::adopt_config`]).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tch::Device;

use crate::config::{DeviceKind, Resolved};
use crate::ranks::Ranks;
use crate::rundir::{RunDir, RunLock};

/// An opened run: configuration, directory, device, and its place among several processes
/// when `torchrun` launched it as one of them.
pub struct Ctx {
    pub cfg: Resolved,
    pub run: RunDir,
    pub device: Device,
    pub ranks: Option<Ranks>,
}

/// Sets libtorch's and rayon's thread counts (0 = all cores), once per process where the
/// library allows only that.
fn set_threads(threads: usize) {
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    tch::set_num_threads(threads as i32);
    // libtorch allows setting the inter-op pool once per process (compare opens many runs).
    static INTEROP: std::sync::Once = std::sync::Once::new();
    INTEROP.call_once(|| tch::set_num_interop_threads(1));
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global();
}

fn device(kind: DeviceKind) -> Result<Device> {
    Ok(match kind {
        DeviceKind::Auto => Device::cuda_if_available(),
        DeviceKind::Cpu => Device::Cpu,
        DeviceKind::Cuda => {
            if !tch::Cuda::is_available() {
                bail!("config key `model.device` = cuda, but no CUDA device is available");
            }
            Device::Cuda(0)
        }
    })
}

impl Ctx {
    /// Loads and validates a configuration for run `name`. Writes nothing.
    pub fn open(config: &Path, runs: &Path, name: &str) -> Result<Self> {
        Self::open_with(config, runs, name, &[])
    }

    /// [`Ctx::open`] with `--set section.key=value` changes to the configuration.
    pub fn open_with(config: &Path, runs: &Path, name: &str, sets: &[String]) -> Result<Self> {
        let cfg = Resolved::load_with(config, sets)?;
        let run = RunDir::new(runs, name)?;
        set_threads(cfg.opts.model.threads);
        let device = device(cfg.opts.model.device)?;
        Ok(Ctx {
            cfg,
            run,
            device,
            ranks: None,
        })
    }

    /// Joins the other processes when launched as one of several (`WORLD_SIZE > 1`): each
    /// rank then computes on `cuda:LOCAL_RANK` when the run is on CUDA, takes its share of
    /// the machine's cores for libtorch when `model.threads = 0` (all of them for one
    /// process), and only rank 0 shows progress bars.
    pub fn join_ranks(&mut self) -> Result<()> {
        let Some(r) = Ranks::join(self.device.is_cuda(), &self.cfg.opts.rollout)? else {
            return Ok(());
        };
        if self.cfg.opts.model.threads == 0 {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            set_threads((cores / r.launch.local_world).max(1));
        }
        if self.device.is_cuda() {
            self.device = r.cuda_device();
        }
        if !r.is_leader() {
            std::env::set_var("DELTARL_NO_PROGRESS", "1");
        }
        self.ranks = Some(r);
        Ok(())
    }

    /// Opens an existing run with the configuration recorded in it.
    pub fn open_existing(runs: &Path, name: &str) -> Result<Self> {
        let run = RunDir::new(runs, name)?;
        let path = run.root.join("run.toml");
        if !path.exists() {
            bail!("{}: no such run (missing run.toml)", run.root.display());
        }
        let ctx = Self::open(&path, runs, name)?;
        ctx.check_recorded(false)?;
        Ok(ctx)
    }

    /// Whether the run may go on with this configuration: yes when it has none recorded or
    /// the same one; a different one only with `force`.
    fn check_recorded(&self, force: bool) -> Result<bool> {
        let hash = self.cfg.hash();
        let Ok(old) = std::fs::read_to_string(self.run.root.join("run.hash")) else {
            return Ok(false);
        };
        let old = old.trim();
        if old == hash {
            return Ok(true);
        }
        if !force {
            bail!(
                "run {} was made with another configuration (hash {} != {}); use --force to \
                 continue it with this one (changed stages will rerun)",
                self.run.root.display(),
                &old[..12.min(old.len())],
                &hash[..12]
            );
        }
        Ok(false)
    }

    /// Records this configuration as the run's (`run.toml`, then `run.hash`), after checking
    /// everything it names exists. Needs the run's lock, so a refused command has written
    /// nothing; a different recorded configuration is replaced only with `force`.
    pub fn adopt_config(&self, _lock: &RunLock, force: bool) -> Result<()> {
        self.check_sources()?;
        if self.check_recorded(force)? {
            return Ok(());
        }
        let hash = self.cfg.hash();
        let text =
            toml::to_string_pretty(&self.cfg.opts).context("cannot serialise the configuration")?;
        let text = format!("# Resolved configuration of this run (hash {hash}).\n{text}");
        deltarl_schemas::atomic_write_bytes(&self.run.root.join("run.toml"), text.as_bytes())?;
        deltarl_schemas::atomic_write_bytes(&self.run.root.join("run.hash"), hash.as_bytes())?;
        Ok(())
    }

    /// The files the configuration names exist: checked before any long work.
    fn check_sources(&self) -> Result<()> {
        let o = &self.cfg.opts;
        if let Some(file) = o.data.source.file().filter(|f| !f.is_file()) {
            bail!(
                "config key `data.source` = {:?}: {}",
                file.display().to_string(),
                crate::data::not_a_file(file)
            );
        }
        // Every training record is read (its reward decided, code tests parsed), and when
        // some are code, the sandbox must work here: both before anything is recorded.
        let routing = crate::rewards::Routing::of(&o.data);
        let prompts = crate::data::load_prompts(&o.data.source, o.data.train_size, &routing)
            .with_context(|| format!("config key `data.source` = \"{}\"", o.data.source))?;
        if prompts
            .iter()
            .any(|p| p.reward_kind == deltarl_schemas::RewardKind::Code)
        {
            let settings = o.score.code.settings().map_err(anyhow::Error::msg)?;
            deltarl_code::Grader::new(settings)
                .with_context(|| format!("data.source \"{}\" has code prompts", o.data.source))?;
        }
        for b in &o.eval.benchmarks {
            if !Path::new(b).is_file() {
                bail!(
                    "config key `eval.benchmarks`: {b:?}: {}",
                    crate::data::not_a_file(Path::new(b))
                );
            }
            // Read whole (benchmarks are small), so a file the eval stage would refuse is
            // refused before this configuration is recorded.
            crate::data::read_benchmark(Path::new(b))
                .with_context(|| format!("config key `eval.benchmarks`: {b:?}"))?;
        }
        let hidden = if self.tiny() {
            o.model.tiny.hidden_size
        } else {
            let dir = self.base_dir();
            if !dir.join("config.json").is_file() {
                bail!(
                    "config key `model.source` = {:?}: no config.json there",
                    o.model.source
                );
            }
            // Opened as the rollout will open it (but no tensor read), so a broken folder
            // is refused before this configuration is recorded.
            let model = deltarl_model::check_folder(&dir)
                .with_context(|| format!("config key `model.source` = {:?}", o.model.source))?;
            // The chat template compiled and rendered now, not first at the rollout after
            // the run is recorded.
            if o.data.chat_template {
                crate::chat::ChatTemplate::from_model_dir(&dir).with_context(|| {
                    format!(
                        "config key `data.chat_template` = true, with `model.source` = {:?}",
                        o.model.source
                    )
                })?;
            }
            model.hidden_size
        };
        // A sketch keeps fewer dimensions than the pass's vectors have.
        let features = &self.cfg.stages.features;
        if let deltarl_features::Stored::Projected { dim: k } = features.persist {
            let dim = deltarl_features::output_dim(hidden, &features.pass);
            if k >= dim {
                bail!(
                    "config key `features.persist_dim` = {k}: the policy's vectors have {dim} \
                     dimensions (`model.source` = {:?}), so a sketch of {k} keeps nothing \
                     less; use features.persist = \"full\"",
                    o.model.source
                );
            }
        }
        Ok(())
    }

    /// Whether the base policy is the tiny model warm-started in this run.
    pub fn tiny(&self) -> bool {
        self.cfg.opts.model.source == "tiny"
    }

    /// The directory of the base policy.
    pub fn base_dir(&self) -> PathBuf {
        if self.tiny() {
            self.run.base()
        } else {
            self.cfg.opts.model.folder()
        }
    }

    /// Whether iteration `iter` evaluates (`[eval] every`).
    pub fn eval_due(&self, iter: u32) -> bool {
        let every = self.cfg.opts.eval.every;
        every > 0 && iter.is_multiple_of(every)
    }
}
