//! What a stage run sees besides its settings: the run, the device, the iteration, its
//! policies and, among several processes, its share.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use deltarl_dist::{Group, Launch};
use deltarl_model::{Dtype, Policy};
use deltarl_schemas::{atomic_write, FileMeta, Shard, Stage};
use tch::Device;

use crate::rundir::RunDir;

/// What a stage run sees besides its settings.
pub struct Env<'a> {
    pub run: &'a RunDir,
    pub device: Device,
    /// The iteration (0 for the warm start).
    pub iter: u32,
    /// The base policy folder: the run's `base/`, or `model.source`.
    pub base: &'a Path,
    /// The stage's hash, written into its files' metadata.
    pub hash: String,
    pub stage: Stage,
    /// The process group when several processes share the stage ([`shared`]).
    pub ranks: Option<&'a Group>,
    /// What the launcher said, among several processes (the stage shared or not).
    pub launch: Option<&'a Launch>,
    /// The vLLM server kept between this process's rollouts.
    pub kept: &'a crate::vllm::Kept,
}

impl<'a> Env<'a> {
    /// Where this stage's vLLM server runs ([`crate::vllm::for_policy`]): this rank's
    /// device, the log named `log` in this iteration's folder, the server kept between the
    /// process's stages, the policy's `dtype` and the run's `seed`.
    pub fn vllm_site(&self, log: &'static str, dtype: Dtype, seed: u64) -> crate::vllm::Site<'a> {
        crate::vllm::Site {
            launch: self.launch,
            device: self.device,
            iter_dir: self.run.iter_dir(self.iter),
            log,
            kept: self.kept,
            dtype,
            seed,
        }
    }

    /// The vLLM server this stage samples from ([`crate::vllm::for_policy`], at
    /// [`Env::vllm_site`]), asked for requests of up to `longest_prompt` prompt tokens
    /// plus `max_new_tokens` (`crate::vllm::max_model_len`; capped at the model's context
    /// where the policy's configuration is read).
    pub fn vllm_server(
        &self,
        site: (&'static str, Dtype, u64),
        vs: &mut crate::vllm::Settings,
        (longest_prompt, max_new_tokens): (usize, usize),
        dir: &Path,
        tokenizer: &deltarl_model::Tokenizer,
    ) -> Result<(crate::vllm::Vllm, crate::vllm::Acquired)> {
        vs.max_model_len = Some(crate::vllm::max_model_len(
            longest_prompt,
            max_new_tokens,
            usize::MAX,
        ));
        let (log, dtype, seed) = site;
        crate::vllm::for_policy(&self.vllm_site(log, dtype, seed), vs, dir, tokenizer)
    }

    /// This process's share of the stage's work.
    pub fn shard(&self) -> Shard {
        crate::ranks::shard(self.ranks)
    }

    /// Whether this process writes the stage's files (rank 0, or the only process).
    pub fn writes(&self) -> bool {
        self.ranks.is_none_or(|g| g.rank() == 0)
    }

    /// The output file of `stage` in this iteration.
    pub fn file(&self, stage: Stage) -> PathBuf {
        self.run.output(self.iter, stage)
    }

    /// Writes the output file of `stage` in this iteration atomically (a temporary name,
    /// then the rename); an error names the file, whichever layer it came from — a full
    /// disk surfaces inside the Parquet writer, which knows only the table's name.
    pub fn write_output<E>(
        &self,
        stage: Stage,
        fill: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), E>,
    ) -> Result<()>
    where
        E: From<deltarl_schemas::Error>,
        anyhow::Error: From<E>,
    {
        let path = self.file(stage);
        atomic_write(&path, fill)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Opens the output file of `stage` in this iteration, with its name for errors.
    pub fn open(&self, stage: Stage) -> Result<(std::fs::File, String)> {
        let p = self.file(stage);
        let f = std::fs::File::open(&p).with_context(|| format!("cannot open {}", p.display()))?;
        Ok((f, p.display().to_string()))
    }

    /// The file metadata of this stage's outputs.
    pub fn meta(&self) -> FileMeta {
        FileMeta::new(self.stage.name(), &self.hash)
    }

    /// The policy that samples this iteration: the previous iteration's, or the base.
    pub fn previous_policy(&self) -> PathBuf {
        policy_before(self.run, self.base, self.iter)
    }

    /// The policy this iteration's update writes.
    pub fn this_policy(&self) -> PathBuf {
        self.run.policy_dir(self.iter)
    }
}

/// The policy that samples iteration `iter`: the base for the first, else the policy the
/// previous iteration's update wrote.
pub fn policy_before(run: &RunDir, base: &Path, iter: u32) -> PathBuf {
    if iter <= 1 {
        base.to_path_buf()
    } else {
        run.policy_dir(iter - 1)
    }
}

/// What sampling through vLLM needs of a policy folder, its weights left unloaded (the
/// server loads them): the tokenizer, the end tokens and the context.
pub struct Vocabulary {
    pub tokenizer: deltarl_model::Tokenizer,
    pub eos_ids: Vec<u32>,
    /// Positions the policy has (prompt and response together).
    pub context: usize,
}

impl Vocabulary {
    /// The policy folder `dir`'s.
    pub fn of(dir: &Path) -> Result<Self> {
        let tokenizer = deltarl_model::Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let cfg = deltarl_model::read_config(dir)?;
        Ok(Vocabulary {
            eos_ids: deltarl_model::eos_ids(&cfg, &tokenizer),
            context: cfg.max_position_embeddings,
            tokenizer,
        })
    }
}

/// The longest of `prompts` (each a template and the problem it is filled with) in
/// tokens.
pub fn longest_prompt<'a>(
    tokenizer: &deltarl_model::Tokenizer,
    prompts: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<usize> {
    let mut longest = 0;
    for (template, problem) in prompts {
        let text = deltarl_schemas::render_template(template, problem);
        longest = longest.max(tokenizer.encode(&text)?.len());
    }
    Ok(longest)
}

/// The engine a stage that samples draws with: our decoder on the policy it loaded, or
/// the vLLM server it got (`concurrency` requests in flight), whichever it has.
pub fn sampling_engine<'p>(
    policy: Option<&'p Policy>,
    server: Option<&'p crate::vllm::Vllm>,
    concurrency: Option<usize>,
) -> Result<deltarl_sample::Engine<'p>> {
    match (policy, server) {
        (Some(p), _) => Ok(deltarl_sample::Engine::Native(&p.model)),
        (None, Some(v)) => Ok(deltarl_sample::Engine::Vllm {
            client: &v.client,
            concurrency,
        }),
        (None, None) => anyhow::bail!("no engine to sample with: neither a policy nor a server"),
    }
}

/// Loads a policy folder.
pub fn load_policy(dir: &Path, device: Device, dtype: Dtype) -> Result<Policy> {
    deltarl_model::load(dir, device, dtype)
        .with_context(|| format!("cannot load the policy in {}", dir.display()))
}
