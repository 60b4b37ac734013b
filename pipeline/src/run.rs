//! Running stages: completion checks, atomic outputs, manifests written last, resume.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tch::Device;

use deltarl_model::generate::SampleSettings;
use deltarl_model::Policy;
use deltarl_schemas::seed::seed_for;
use deltarl_schemas::{
    atomic_write, read_path, CoeffRow, FeatureRow, FileMeta, Manifest, RolloutRow, ScoreRow,
    TOOL_VERSION,
};

use crate::config::{AdvantageKind, DeviceKind, Resolved};
use crate::data;
use crate::rundir::{
    clean_temporaries, invalidate_downstream, stage_output, stage_state, RunDir, RunLock,
    StageState, STAGES,
};

/// An opened run: configuration, directory, device.
pub struct Ctx {
    pub cfg: Resolved,
    pub run: RunDir,
    pub device: Device,
}

/// What happened to a stage.
#[derive(Debug)]
pub enum Outcome {
    Skipped,
    Ran(Box<Manifest>),
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = if std::env::var_os("DELTARL_NO_PROGRESS").is_some() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what:>8} [{{bar:30}}] {{pos}}/{{len}} {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

impl Ctx {
    /// Opens (or creates) a run for a configuration. A run made with another
    /// configuration is refused unless `force`.
    pub fn open(config: &Path, runs: &Path, name: &str, force: bool) -> Result<Self> {
        let cfg = Resolved::load(config)?;
        let run = RunDir::new(runs, name)?;
        let threads = if cfg.opts.model.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            cfg.opts.model.threads
        };
        tch::set_num_threads(threads as i32);
        // libtorch allows setting the inter-op pool once per process (compare opens many runs).
        static INTEROP: std::sync::Once = std::sync::Once::new();
        INTEROP.call_once(|| tch::set_num_interop_threads(1));
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global();
        let device = match cfg.opts.model.device {
            DeviceKind::Auto => Device::cuda_if_available(),
            DeviceKind::Cpu => Device::Cpu,
            DeviceKind::Cuda => {
                if !tch::Cuda::is_available() {
                    bail!("config key `model.device` = cuda, but no CUDA device is available");
                }
                Device::Cuda(0)
            }
        };
        let ctx = Ctx { cfg, run, device };
        ctx.check_run_config(force)?;
        Ok(ctx)
    }

    /// Opens an existing run with the configuration recorded in it.
    pub fn open_existing(runs: &Path, name: &str) -> Result<Self> {
        let run = RunDir::new(runs, name)?;
        let path = run.root.join("run.toml");
        if !path.exists() {
            bail!("{}: no such run (missing run.toml)", run.root.display());
        }
        Self::open(&path, runs, name, false)
    }

    fn check_run_config(&self, force: bool) -> Result<()> {
        let path = self.run.root.join("run.toml");
        let hash_path = self.run.root.join("run.hash");
        let hash = self.cfg.hash();
        if let Ok(old) = std::fs::read_to_string(&hash_path) {
            if old.trim() == hash {
                return Ok(());
            }
            if !force {
                bail!(
                    "run {} was made with another configuration (hash {} != {}); use --force to \
                     continue it with this one (changed stages will rerun)",
                    self.run.root.display(),
                    &old.trim()[..12.min(old.trim().len())],
                    &hash[..12]
                );
            }
        }
        std::fs::create_dir_all(&self.run.root)?;
        if path != self.cfg.config_path {
            let text = toml::to_string_pretty(&self.cfg.opts)
                .context("cannot serialise the configuration")?;
            let text = format!("# Resolved configuration of this run (hash {hash}).\n{text}");
            deltarl_schemas::atomic_write_bytes(&path, text.as_bytes())?;
        }
        deltarl_schemas::atomic_write_bytes(&hash_path, hash.as_bytes())?;
        Ok(())
    }

    /// The directory of the base policy.
    pub fn base_dir(&self) -> PathBuf {
        match self.cfg.opts.model.source.as_str() {
            "tiny" => self.run.base(),
            path => PathBuf::from(path),
        }
    }

    /// The policy folder that samples iteration `iter`.
    pub fn policy_dir(&self, iter: u32) -> PathBuf {
        if iter <= 1 {
            self.base_dir()
        } else {
            self.run.policy_for(iter)
        }
    }

    pub fn load_policy(&self, dir: &Path) -> Result<Policy> {
        deltarl_model::load(dir, self.device, self.cfg.opts.model.dtype)
            .with_context(|| format!("cannot load the policy in {}", dir.display()))
    }

    fn stage_hash(&self, stage: &str) -> String {
        let o = &self.cfg.opts;
        let c = &self.cfg;
        match stage {
            "rollout" => c.part_hash(&[&o.seed, &o.data, &o.rollout, &o.model.dtype]),
            "score" => c.part_hash(&[
                &o.score,
                &c.advantage,
                &c.overlong_penalty,
                &o.rollout.max_new_tokens,
            ]),
            "features" => c.part_hash(&[&o.features, &o.rollout.temperature, &o.model.dtype]),
            "coeffs" => c.part_hash(&[&c.estimator]),
            "update" => c.part_hash(&[
                &o.seed,
                &o.update,
                &c.aggregation,
                &c.eps_high,
                &o.rollout.temperature,
            ]),
            "eval" => c.part_hash(&[
                &o.eval,
                &o.data.template,
                &o.rollout.max_new_tokens,
                &o.model.dtype,
            ]),
            _ => String::new(),
        }
    }

    fn file(&self, iter: u32, stage: &str) -> PathBuf {
        self.run.iter_dir(iter).join(stage_output(stage))
    }

    fn policy_weights(&self, iter: u32) -> Vec<PathBuf> {
        let dir = self.policy_dir(iter);
        let single = dir.join("model.safetensors");
        if single.exists() || self.cfg.opts.model.source == "tiny" {
            vec![single]
        } else {
            vec![dir.join("model.safetensors.index.json")]
        }
    }

    /// The input files of a stage.
    fn inputs(&self, iter: u32, stage: &str) -> Vec<PathBuf> {
        let f = |s: &str| self.file(iter, s);
        let mut v = match stage {
            "rollout" => self.policy_weights(iter),
            "score" => vec![f("rollout")],
            "features" => [vec![f("rollout")], self.policy_weights(iter)].concat(),
            "coeffs" => vec![f("rollout"), f("score"), f("features")],
            "update" => [
                vec![f("rollout"), f("score"), f("coeffs")],
                self.policy_weights(iter),
            ]
            .concat(),
            "eval" => vec![self
                .run
                .iter_dir(iter)
                .join("policy")
                .join("model.safetensors")],
            _ => Vec::new(),
        };
        if stage == "rollout" && self.cfg.opts.data.source != "tiny-arith" {
            v.push(PathBuf::from(&self.cfg.opts.data.source));
        }
        if stage == "update" {
            let opt = self.policy_dir(iter).join("optimizer.safetensors");
            if opt.exists() {
                v.push(opt);
            }
        }
        v
    }

    pub fn state(&self, iter: u32, stage: &str) -> Result<StageState> {
        let state = stage_state(
            &self.run,
            iter,
            stage,
            &self.stage_hash(stage),
            &self.inputs(iter, stage),
        );
        self.run.save_hashes();
        state
    }

    fn eval_due(&self, iter: u32) -> bool {
        let every = self.cfg.opts.eval.every;
        every > 0 && iter.is_multiple_of(every)
    }

    /// The stages `iterate` runs for an iteration.
    pub fn stages_of(&self, iter: u32) -> Vec<&'static str> {
        STAGES
            .iter()
            .copied()
            .filter(|s| *s != "eval" || self.eval_due(iter))
            .collect()
    }

    fn meta(&self, stage: &str) -> FileMeta {
        FileMeta::new(stage, &self.stage_hash(stage))
    }

    /// Runs one stage unless it is complete (or `force`). Outputs are committed
    /// atomically, then the manifest is written last.
    pub fn run_stage(&self, iter: u32, stage: &str, force: bool) -> Result<Outcome> {
        if !STAGES.contains(&stage) {
            bail!("unknown stage {stage:?} (one of {})", STAGES.join(", "));
        }
        if iter == 0 {
            bail!("iterations start at 1");
        }
        if !force {
            if let StageState::Done(_) = self.state(iter, stage)? {
                return Ok(Outcome::Skipped);
            }
        }
        let inputs = self.inputs(iter, stage);
        for p in &inputs {
            if !p.exists() {
                bail!(
                    "stage {stage} of iteration {iter} needs {} (run the stages before it first)",
                    p.display()
                );
            }
        }
        let dir = self.run.iter_dir(iter);
        std::fs::create_dir_all(dir.join("manifest"))?;
        clean_temporaries(&dir);
        // Anything downstream is no longer known to match this stage's output.
        let _ = std::fs::remove_file(self.run.manifest_path(iter, stage));
        invalidate_downstream(&self.run, iter, stage)?;
        let input_hashes = self.run.hash_inputs(&inputs)?;
        let start = Instant::now();
        let (rows, summary, mut outputs) = match stage {
            "rollout" => self.rollout(iter)?,
            "score" => self.score(iter)?,
            "features" => self.features(iter)?,
            "coeffs" => self.coeffs(iter)?,
            "update" => self.update(iter)?,
            "eval" => self.eval(iter)?,
            _ => unreachable!("checked above"),
        };
        outputs.push(self.file(iter, stage));
        let mut out_hashes = std::collections::BTreeMap::new();
        for p in outputs {
            out_hashes.insert(self.run.rel(&p), self.run.hash(&p)?);
        }
        let m = Manifest {
            stage: stage.to_string(),
            iter,
            config_hash: self.stage_hash(stage),
            seed: seed_for(self.cfg.opts.seed, iter, stage, "", 0),
            inputs: input_hashes,
            outputs: out_hashes,
            rows: rows as u64,
            seconds: start.elapsed().as_secs_f64(),
            version: TOOL_VERSION.to_string(),
            summary,
        };
        m.write(&self.run.manifest_path(iter, stage))?;
        self.run.save_hashes();
        let _ = std::fs::remove_file(self.run.stale_path(iter, stage));
        Ok(Outcome::Ran(Box::new(m)))
    }

    fn sampling(&self, temperature: f64, eos: Vec<u32>) -> SampleSettings {
        let r = &self.cfg.opts.rollout;
        SampleSettings {
            temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            max_new_tokens: r.max_new_tokens,
            eos_ids: eos,
            stop_strings: r.stop.clone(),
            max_batch_rows: r.max_batch_rows,
            use_cache: true,
        }
    }

    fn rollout(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let o = &self.cfg.opts;
        let prompts = data::load_prompts(&o.data.source, o.data.train_size)?;
        let mut drawn = data::draw(&prompts, o.rollout.prompts_per_iter, o.seed, iter);
        let policy = self.load_policy(&self.policy_dir(iter))?;
        let template = self.apply_chat(&mut drawn, iter)?;
        let s = deltarl_rollout::Settings {
            samples_per_prompt: o.rollout.samples_per_prompt,
            template,
            sampling: self.sampling(o.rollout.temperature, policy.eos_ids()),
            run_seed: o.seed,
            iter,
            policy_iter: iter - 1,
        };
        let total = drawn.len() as u64 * u64::from(o.rollout.samples_per_prompt);
        let pb = bar(total, "rollout");
        let t0 = Instant::now();
        let mut rows = Vec::new();
        let path = self.file(iter, "rollout");
        atomic_write(&path, |w| {
            rows = deltarl_rollout::run_io(
                &s,
                &policy,
                &drawn,
                w,
                self.meta("rollout"),
                &mut |done, toks| {
                    pb.set_position(done as u64);
                    pb.set_message(format!(
                        "{:.0} tok/s",
                        toks as f64 / t0.elapsed().as_secs_f64().max(1e-9)
                    ));
                },
            )
            .map_err(|e| deltarl_schemas::Error::Build {
                table: "rollouts".into(),
                message: e.to_string(),
            })?;
            Ok(())
        })?;
        pb.finish_and_clear();
        let tokens: usize = rows.iter().map(|r| r.response_token_ids.len()).sum();
        let secs = t0.elapsed().as_secs_f64();
        let truncated = rows
            .iter()
            .filter(|r| r.finish_reason == deltarl_schemas::FinishReason::Length)
            .count();
        Ok((
            rows.len(),
            json!({
                "prompts": drawn.len(),
                "tokens": tokens,
                "tokens_per_s": tokens as f64 / secs.max(1e-9),
                "mean_response_len": tokens as f64 / rows.len().max(1) as f64,
                "truncated_frac": truncated as f64 / rows.len().max(1) as f64,
            }),
            Vec::new(),
        ))
    }

    fn score(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let o = &self.cfg.opts;
        let fb = &o.score.extract_fallbacks;
        let s = deltarl_score::Settings {
            std_normalize: self.cfg.advantage == AdvantageKind::Grpo,
            overlong: self.cfg.overlong_penalty.then_some((
                o.rollout.max_new_tokens,
                o.score.overlong_buffer,
                o.score.overlong_factor,
            )),
            dynamic_sampling: o.score.dynamic_sampling,
            extract: deltarl_verify::ExtractOptions {
                answer_is: fb.iter().any(|f| f == "answer-is"),
                hashes: fb.iter().any(|f| f == "hashes"),
                last_number: fb.iter().any(|f| f == "last-number"),
            },
        };
        let src = self.file(iter, "rollout");
        let bytes =
            std::fs::read(&src).with_context(|| format!("cannot read {}", src.display()))?;
        let pb = bar(0, "score");
        let mut scores = Vec::new();
        atomic_write(&self.file(iter, "score"), |w| {
            scores = deltarl_score::run_io(
                &s,
                (bytes.as_slice(), &src.display().to_string()),
                w,
                self.meta("score"),
                &|k| pb.inc(k as u64),
            )
            .map_err(|e| deltarl_schemas::Error::Build {
                table: "scores".into(),
                message: e.to_string(),
            })?;
            Ok(())
        })?;
        pb.finish_and_clear();
        let n = scores.len().max(1) as f64;
        Ok((
            scores.len(),
            json!({
                "accuracy": scores.iter().filter(|r| r.correct).count() as f64 / n,
                "reward_mean": scores.iter().map(|r| f64::from(r.reward)).sum::<f64>() / n,
                "kept_frac": scores.iter().filter(|r| r.kept).count() as f64 / n,
                "extracted_frac": scores.iter().filter(|r| r.extracted.is_some()).count() as f64 / n,
            }),
            Vec::new(),
        ))
    }

    fn features(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let o = &self.cfg.opts;
        let (rollouts, _) = read_path::<RolloutRow>(&self.file(iter, "rollout"))?;
        let policy = self.load_policy(&self.policy_dir(iter))?;
        let s = deltarl_features::Settings {
            proxy: o.features.proxy,
            project_dim: (o.features.project_dim > 0).then_some(o.features.project_dim),
            projection_seed: seed_for(o.seed, iter, "features", "projection", 0),
            temperature: if o.rollout.temperature > 0.0 {
                o.rollout.temperature
            } else {
                1.0
            },
            chunk_rows: o.features.chunk_rows,
        };
        let mut rows = Vec::new();
        atomic_write(&self.file(iter, "features"), |w| {
            rows = deltarl_features::run_io(&s, &policy.model, &rollouts, w, self.meta("features"))
                .map_err(|e| deltarl_schemas::Error::Build {
                    table: "features".into(),
                    message: e.to_string(),
                })?;
            Ok(())
        })?;
        let tokens: usize = rows.iter().map(FeatureRow::tokens).sum();
        let ent: f64 = rows
            .iter()
            .flat_map(|r| r.entropy.iter())
            .map(|&e| f64::from(e))
            .sum();
        Ok((
            rows.len(),
            json!({"tokens": tokens, "dim": rows.first().map_or(0, |r| r.dim), "entropy_mean": ent / tokens.max(1) as f64}),
            Vec::new(),
        ))
    }

    fn coeffs(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let settings = deltarl_coeffs::Settings::new(self.cfg.estimator)?;
        let tok_path = self.policy_dir(iter).join("tokenizer.json");
        let tokenizer = deltarl_model::Tokenizer::from_file(&tok_path)?;
        let decode = |ids: &[u32]| tokenizer.decode(ids);
        let open = |s: &str| -> Result<(std::fs::File, String)> {
            let p = self.file(iter, s);
            Ok((
                std::fs::File::open(&p).with_context(|| format!("cannot open {}", p.display()))?,
                p.display().to_string(),
            ))
        };
        let (r, rn) = open("rollout")?;
        let (sc, sn) = open("score")?;
        let (f, fname) = open("features")?;
        let mut written = None;
        atomic_write(&self.file(iter, "coeffs"), |w| {
            let s = deltarl_coeffs::shell::run_io(
                &settings,
                (r, &rn),
                (sc, &sn),
                (f, &fname),
                w,
                self.meta("coeffs"),
                &decode,
            )
            .map_err(|e| deltarl_schemas::Error::Build {
                table: "coeffs".into(),
                message: e.to_string(),
            })?;
            written = Some(s);
            Ok(())
        })?;
        let (rows, summary) = written.unwrap_or_default();
        Ok((rows, serde_json::to_value(&summary)?, Vec::new()))
    }

    fn update(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let o = &self.cfg.opts;
        let (rollouts, _) = read_path::<RolloutRow>(&self.file(iter, "rollout"))?;
        let (scores, _) = read_path::<ScoreRow>(&self.file(iter, "score"))?;
        let (coeffs, _) = read_path::<CoeffRow>(&self.file(iter, "coeffs"))?;
        let key = |p: &str, k: u32| (p.to_string(), k);
        let sc: std::collections::HashMap<_, _> = scores
            .iter()
            .map(|s| (key(&s.prompt_id, s.sample_idx), s))
            .collect();
        let co: std::collections::HashMap<_, _> = coeffs
            .iter()
            .map(|c| (key(&c.prompt_id, c.sample_idx), c))
            .collect();
        let mut rows = Vec::new();
        for r in &rollouts {
            let k = key(&r.prompt_id, r.sample_idx);
            let (Some(s), Some(c)) = (sc.get(&k), co.get(&k)) else {
                bail!(
                    "prompt_id {:?}, sample_idx {}: missing from scores or coeffs",
                    r.prompt_id,
                    r.sample_idx
                );
            };
            if !s.kept {
                continue;
            }
            rows.push(deltarl_update::TrainRow {
                prompt_id: r.prompt_id.clone(),
                prompt_ids: r.prompt_token_ids.clone(),
                response_ids: r.response_token_ids.clone(),
                old_logprobs: r.old_logprobs.clone(),
                advantage: s.advantage,
                coeff: c.coeff.clone(),
            });
        }
        let src = self.policy_dir(iter);
        let policy = self.load_policy(&src)?;
        let mut opt = deltarl_update::AdamW::new(
            &policy.vs,
            deltarl_update::AdamWSettings {
                lr: o.update.lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: o.update.weight_decay,
            },
        );
        if src.join("optimizer.safetensors").exists() {
            opt.load(&src)?;
        }
        let reference = if o.update.kl_coef != 0.0 {
            Some(self.load_policy(&self.base_dir())?)
        } else {
            None
        };
        let s = deltarl_update::Settings {
            loss: deltarl_update::LossSettings {
                eps_low: o.update.eps_low,
                eps_high: self.cfg.eps_high,
                dual_clip: (o.update.dual_clip > 0.0).then_some(o.update.dual_clip),
                aggregation: self.cfg.aggregation,
                norm_len: o.rollout.max_new_tokens as f64,
                kl_coef: o.update.kl_coef,
                entropy_coef: o.update.entropy_coef,
            },
            optimizer_steps: o.update.optimizer_steps,
            micro_batch_rows: o.update.micro_batch_rows,
            warmup_steps: o.update.warmup_steps,
            lr: o.update.lr,
            grad_clip: o.update.grad_clip,
            temperature: if o.rollout.temperature > 0.0 {
                o.rollout.temperature
            } else {
                1.0
            },
            seed: seed_for(o.seed, iter, "update", "", 0),
        };
        let metrics = deltarl_update::run(
            &s,
            &policy,
            &mut opt,
            reference.as_ref().map(|p| &p.model),
            &rows,
        )?;
        // The new policy goes to a temporary folder, renamed into place when complete.
        let dir = self.run.iter_dir(iter);
        let final_dir = dir.join("policy");
        let tmp = dir.join(format!(".policy.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        deltarl_model::save(&policy, &tmp)?;
        opt.save(&tmp)?;
        if final_dir.exists() {
            std::fs::remove_dir_all(&final_dir)?;
        }
        std::fs::rename(&tmp, &final_dir)?;
        let meta = self
            .meta("update")
            .with("settings", serde_json::to_string(&s)?);
        deltarl_schemas::write_path(&self.file(iter, "update"), &metrics, &meta)?;
        let last = metrics.last();
        Ok((
            metrics.len(),
            json!({
                "responses": rows.len(),
                "loss": last.map(|m| m.loss),
                "grad_norm": last.map(|m| m.grad_norm),
                "clip_frac": last.map(|m| m.clip_frac),
                "entropy": last.map(|m| m.entropy),
                "kl": last.map(|m| m.kl),
                "approx_kl_old": last.map(|m| m.approx_kl_old),
            }),
            vec![
                final_dir.join("model.safetensors"),
                final_dir.join("optimizer.safetensors"),
            ],
        ))
    }

    fn eval(&self, iter: u32) -> Result<(usize, serde_json::Value, Vec<PathBuf>)> {
        let o = &self.cfg.opts;
        let policy = self.load_policy(&self.run.iter_dir(iter).join("policy"))?;
        let prompts = if o.data.source == "tiny-arith" {
            data::tiny_test_prompts(o.eval.problems)
        } else {
            bail!("the eval stage needs data.source = tiny-arith (use `deltarl eval --bench` for files)");
        };
        let rows = crate::eval::evaluate(
            &policy,
            "tiny-arith-test",
            &prompts,
            &self.eval_settings(iter),
        )?;
        deltarl_schemas::write_path(&self.file(iter, "eval"), &rows, &self.meta("eval"))?;
        let acc = rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64;
        Ok((rows.len(), json!({"accuracy": acc}), Vec::new()))
    }

    /// With `data.chat_template`, renders each problem through the template and the
    /// model's chat template, and returns the identity template; else the configured one.
    pub fn apply_chat(
        &self,
        prompts: &mut [deltarl_schemas::PromptRow],
        iter: u32,
    ) -> Result<String> {
        let o = &self.cfg.opts;
        if !o.data.chat_template {
            return Ok(o.data.template.clone());
        }
        let chat = crate::chat::ChatTemplate::from_model_dir(&self.policy_dir(iter))?;
        for p in prompts.iter_mut() {
            p.problem = chat.render(&deltarl_rollout::render(&o.data.template, &p.problem))?;
        }
        Ok("{question}".into())
    }

    /// Evaluation sampling for iteration `iter` (0 = the base).
    pub fn eval_settings(&self, iter: u32) -> crate::eval::EvalSettings {
        let o = &self.cfg.opts;
        crate::eval::EvalSettings {
            template: o.data.template.clone(),
            samples: o.eval.samples,
            temperature: o.eval.temperature,
            top_p: 1.0,
            max_new_tokens: o.rollout.max_new_tokens,
            stop: o.rollout.stop.clone(),
            max_batch_rows: o.rollout.max_batch_rows,
            seed: o.seed,
            iter,
        }
    }

    /// The first iteration that is not complete (1 when there is none).
    pub fn next_iteration(&self) -> Result<u32> {
        let mut it = 1;
        for i in self.run.iterations() {
            let done = self
                .stages_of(i)
                .iter()
                .all(|s| matches!(self.state(i, s), Ok(StageState::Done(_))));
            if done {
                it = i + 1;
            } else {
                return Ok(i);
            }
        }
        Ok(it)
    }

    /// Runs `iters` iterations starting from the first incomplete stage.
    pub fn iterate(&self, iters: u32) -> Result<()> {
        let _lock = RunLock::acquire(&self.run)?;
        // Leftovers of a killed process (never final names) go first.
        clean_temporaries(&self.run.root);
        crate::warmstart::ensure_base(self)?;
        for _ in 0..iters {
            let it = self.next_iteration()?;
            eprintln!("iteration {it} ({})", self.run.root.display());
            for stage in self.stages_of(it) {
                let outcome = self.run_stage(it, stage, false)?;
                eprintln!("{}", summary_line(stage, &outcome));
            }
        }
        Ok(())
    }
}

/// The one-line summary of a stage.
pub fn summary_line(stage: &str, o: &Outcome) -> String {
    let Outcome::Ran(m) = o else {
        return format!("  {stage:<9} done already (skipped)");
    };
    let s = &m.summary;
    let f = |k: &str| s.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    let key = match stage {
        "rollout" => format!(
            "{:.0} tok/s, mean len {:.1}, truncated {:.1}%",
            f("tokens_per_s"),
            f("mean_response_len"),
            100.0 * f("truncated_frac")
        ),
        "score" => format!(
            "accuracy {:.3}, reward {:.3}, kept {:.2}",
            f("accuracy"),
            f("reward_mean"),
            f("kept_frac")
        ),
        "features" => format!(
            "{} tokens, k = {}, entropy {:.3}",
            s["tokens"],
            s["dim"],
            f("entropy_mean")
        ),
        "coeffs" if s["scopes"].as_u64() == Some(0) => format!(
            "cos(mu+, mu-) {:.4} (uniform or top-entropy: no DelTA statistics)",
            f("cos_before")
        ),
        "coeffs" => format!(
            "cos(mu+, mu-) {:.4} -> {:.4}, gamma+ {:.3e} gamma- {:.3e}, g {:.4}",
            f("cos_before"),
            f("cos_after"),
            f("gamma_pos"),
            f("gamma_neg"),
            f("norm")
        ),
        "update" => format!(
            "loss {:.4}, grad norm {:.3}, clip {:.3}",
            f("loss"),
            f("grad_norm"),
            f("clip_frac")
        ),
        "eval" => format!("held-out accuracy {:.3}", f("accuracy")),
        _ => String::new(),
    };
    format!(
        "  {stage:<9} {:>6} rows {:>7.2} s  {key}",
        m.rows, m.seconds
    )
}
