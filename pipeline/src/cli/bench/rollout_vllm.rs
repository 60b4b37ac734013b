//! `deltarl bench rollout --engine vllm`: the rollout stage's vLLM path (its server, every
//! prompt's request in flight at once, as the stage sends them) against vLLM's own offline
//! `LLM.generate` on the same prompts and sampling parameters. The server's start-up and an
//! in-place weight reload (the kept server's cost per iteration) are timed apart.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::baseline::{Asset, Assets};
use super::timing::{median, Run};
use crate::config::VllmOptions;

/// vLLM's offline engine on the prompts file.
pub const VLLM_GENERATE: Asset = Asset {
    name: "vllm_generate.py",
    text: include_str!("vllm_generate.py"),
};

/// Requests in flight of the comparison line (the stage's default before every prompt went
/// at once).
const EIGHT: usize = 8;

/// What the vLLM side measured.
#[derive(Clone, Debug)]
pub struct VllmRates {
    pub startup_s: f64,
    /// tokens/s of the stage's path (every request in flight), median.
    pub stage: f64,
    /// The same with 8 requests in flight (the stage's earlier default).
    pub eight: f64,
    /// Seconds to load the policy into the running server and probe it; None when it
    /// cannot be kept (a tied head on a CPU).
    pub reload_s: Option<f64>,
    pub offline_startup_s: f64,
    pub offline: f64,
}

impl VllmRates {
    pub fn print(&self, ours: f64) {
        println!(
            "  vLLM, the stage's path {:>10.1} tok/s  ({:.2}x offline LLM.generate; ours {:.2}x)",
            self.stage,
            self.stage / self.offline,
            ours / self.stage
        );
        println!(
            "  vLLM, {EIGHT} in flight      {:>10.1} tok/s  ({:.2}x offline)",
            self.eight,
            self.eight / self.offline
        );
        println!(
            "  vLLM LLM.generate      {:>10.1} tok/s  (the anchor)",
            self.offline
        );
        let reload = self
            .reload_s
            .map_or("n/a (a tied LM head on a CPU is not kept)".into(), |s| {
                format!("{s:.2} s")
            });
        println!(
            "  vLLM start-up: server {:.1} s, offline engine {:.1} s; in-place reload + probe {reload} (not counted)",
            self.startup_s, self.offline_startup_s
        );
    }
}

/// What the vLLM lines are given: the bench's repetitions, model folder, prompts (and the
/// file holding them), samples a prompt, new tokens and precision.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    pub run: Run,
    pub model: &'a Path,
    pub samples: usize,
    pub new_tokens: usize,
    pub prompts: &'a [Vec<u32>],
    pub assets: &'a Assets,
    pub prompts_file: &'a str,
    pub dtype: deltarl_model::Dtype,
}

/// Times the stage's path on a server of the model (CPU, at the setup's precision), then
/// vLLM's offline engine at the same precision.
pub fn rates(x: Setup) -> Result<VllmRates> {
    let Setup {
        run,
        model,
        samples,
        new_tokens,
        prompts,
        dtype,
        ..
    } = x;
    let folder = model
        .canonicalize()
        .with_context(|| format!("{}", model.display()))?;
    let log = std::env::temp_dir().join(format!("deltarl-bench-vllm-{}.log", std::process::id()));
    let config = deltarl_model::read_config(&folder)?;
    let tied = config.tie_word_embeddings;
    let mut settings = crate::vllm::Settings::new(&VllmOptions {
        keep_alive: !tied,
        ..Default::default()
    });
    settings.max_model_len = Some(max_model_len(&config, prompts, new_tokens));
    let at = crate::vllm::Placement {
        log: log.clone(),
        cpu: true,
        dtype,
        seed: 0,
        env: Vec::new(),
    };
    let reference =
        |ids: &[u32]| crate::vllm::trainer_logprobs(&folder, tch::Device::Cpu, dtype, ids);
    let tokenizer = deltarl_model::Tokenizer::from_file(&folder.join("tokenizer.json"))?;
    let probe = crate::vllm::Probe {
        ids: crate::vllm::probe_ids(&tokenizer, config.max_position_embeddings)?,
        reference: &reference,
    };
    let kept = crate::vllm::Kept::default();
    let (vllm, how) = crate::vllm::acquire(&settings, &folder, &at, &kept, &probe)?;
    eprintln!("vLLM server log: {}", log.display());
    let sampling = deltarl_vllm::Sampling {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        max_tokens: new_tokens,
        stop_token_ids: Vec::new(),
        stop: Vec::new(),
        ignore_eos: true,
    };
    let requests: Vec<deltarl_vllm::Prompt> = prompts
        .iter()
        .zip(0u64..)
        .map(|(ids, seed)| deltarl_vllm::Prompt {
            ids: ids.clone(),
            seed,
        })
        .collect();
    let timed = |in_flight: usize| -> Result<f64> {
        let t = Instant::now();
        let out = deltarl_vllm::generate(
            &vllm.client,
            &requests,
            samples as u32,
            &sampling,
            in_flight,
            &|_| {},
        )
        .map_err(|e| vllm.explain(e.into()))?;
        let toks: usize = out.iter().flatten().map(|c| c.tokens.len()).sum();
        Ok(toks as f64 / t.elapsed().as_secs_f64())
    };
    // One untimed call first, as the anchor makes one.
    timed(requests.len())?;
    let stage = median(
        (0..run.reps)
            .map(|_| timed(requests.len()))
            .collect::<Result<Vec<_>>>()?,
    );
    let eight = median(
        (0..run.reps)
            .map(|_| timed(EIGHT))
            .collect::<Result<Vec<_>>>()?,
    );
    let reload_s = if tied {
        drop(vllm);
        None
    } else {
        crate::vllm::release(vllm, &settings, &kept)?;
        let (_, reloaded) = crate::vllm::acquire(&settings, &folder, &at, &kept, &probe)?;
        Some(reloaded.seconds())
    };
    // The server is stopped by now (dropped above): the anchor has the machine to itself.
    let anchor = offline(x, &folder, settings.max_model_len.unwrap_or(0))?;
    Ok(VllmRates {
        startup_s: how.seconds(),
        stage,
        eight,
        reload_s,
        offline_startup_s: anchor.startup_s,
        offline: anchor.tokens_per_s,
    })
}

/// The positions a request may use, as the rollout stage sizes its server: the longest
/// prompt and the response, to a power of two within the model's limit.
fn max_model_len(
    config: &deltarl_model::Qwen3Config,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> usize {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    (longest + new_tokens)
        .next_power_of_two()
        .min(config.max_position_embeddings)
}

/// What vLLM's offline engine measured alone.
#[derive(Clone, Copy, Debug)]
pub struct Offline {
    pub startup_s: f64,
    /// tokens/s, median over the repetitions after one untimed call.
    pub tokens_per_s: f64,
}

impl Offline {
    pub fn print(&self, ours: f64) {
        println!(
            "  vLLM LLM.generate      {:>10.1} tok/s  (deltarl {:.2}x; start-up {:.1} s, not counted)",
            self.tokens_per_s,
            ours / self.tokens_per_s,
            self.startup_s
        );
    }
}

/// vLLM's offline `LLM.generate` alone on the prompts file (CPU, at `dtype`), sized as the
/// stage sizes its server: `--engine vllm-offline`, where the stage's server path (and its
/// line of 8 requests in flight) would take too long at a large batch.
pub fn offline_rate(x: Setup) -> Result<Offline> {
    let folder = x
        .model
        .canonicalize()
        .with_context(|| format!("{}", x.model.display()))?;
    let config = deltarl_model::read_config(&folder)?;
    offline(x, &folder, max_model_len(&config, x.prompts, x.new_tokens))
}

/// Runs the anchor script and reads its result line.
fn offline(x: Setup, folder: &Path, max_model_len: usize) -> Result<Offline> {
    let text = super::baseline::run_text_with(
        &crate::vllm::python(&VllmOptions::default()),
        &[
            x.assets.path(&VLLM_GENERATE),
            folder.display().to_string(),
            x.prompts_file.to_string(),
            x.samples.to_string(),
            x.new_tokens.to_string(),
            x.run.reps.to_string(),
            "1".into(),
            max_model_len.to_string(),
            x.dtype.hf_name().into(),
        ],
    )?;
    let nums: Vec<f64> = text
        .lines()
        .find_map(|l| l.strip_prefix("deltarl-anchor "))
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [startup_s, tokens_per_s] = nums[..] else {
        anyhow::bail!("vLLM's offline anchor printed no result line:\n{text}");
    };
    Ok(Offline {
        startup_s,
        tokens_per_s,
    })
}
