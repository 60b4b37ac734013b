//! `deltarl bench rollout`: generation tokens/s of our decoder (with and without its KV
//! cache) against transformers' `generate`, and optionally the rollout stage's vLLM path
//! against vLLM's offline engine ([`super::rollout_vllm`]), on one model folder.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use deltarl_model::generate::{generate, Request, SampleSettings};

use super::baseline::{self, Assets};
use super::timing::{median, Run};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Native,
    Vllm,
}

/// The batch every engine generates: `prompts` distinct prompts of `prompt_len` tokens,
/// `batch` samples of each, exactly `new_tokens` a sample.
#[derive(Clone, Debug)]
pub struct Shape {
    pub model: PathBuf,
    pub prompts: usize,
    pub batch: usize,
    pub prompt_len: usize,
    pub new_tokens: usize,
}

impl Shape {
    /// The prompts' token ids: distinct per prompt (so no prefix is shared but the
    /// samples'), inside the model's vocabulary.
    pub fn prompt_ids(&self) -> Result<Vec<Vec<u32>>> {
        let vocab = deltarl_model::read_config(&self.model)?.vocab_size as u32;
        let span = vocab.saturating_sub(5).max(1);
        Ok((0..self.prompts as u32)
            .map(|i| {
                (0..self.prompt_len as u32)
                    .map(|t| 5 + (i * 31 + t * 7) % span)
                    .collect()
            })
            .collect())
    }
}

/// Tokens per second (medians).
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    pub cached: f64,
    /// Without the cache (left out with `--engine vllm`: it measures our decoder only, and
    /// at real vocabularies it is the slowest part by far).
    pub uncached: Option<f64>,
    pub transformers: f64,
}

pub fn run(run: Run, shape: &Shape, engine: EngineArg) -> Result<()> {
    let prompts = shape.prompt_ids()?;
    let assets = Assets::write(&[&baseline::HF_GENERATE, &super::rollout_vllm::VLLM_GENERATE])?;
    let prompts_file = assets.path(&baseline::HF_GENERATE) + ".prompts.json";
    std::fs::write(&prompts_file, serde_json::to_string(&prompts)?)
        .with_context(|| format!("cannot write {prompts_file}"))?;
    let r = rates(
        run,
        shape,
        &prompts,
        &assets,
        &prompts_file,
        engine == EngineArg::Native,
    )?;
    println!(
        "rollout: {} prompts x {} samples, prompt {}, {} new tokens, {} threads, median of {}",
        shape.prompts, shape.batch, shape.prompt_len, shape.new_tokens, run.threads, run.reps
    );
    println!("  deltarl (KV cache)     {:>10.1} tok/s", r.cached);
    if let Some(uncached) = r.uncached {
        println!(
            "  deltarl (no cache)     {uncached:>10.1} tok/s  ({:.2}x slower)",
            r.cached / uncached
        );
    }
    println!("  transformers generate  {:>10.1} tok/s", r.transformers);
    println!(
        "  speed-up vs transformers {:.2}x",
        r.cached / r.transformers
    );
    match engine {
        EngineArg::Native => {}
        EngineArg::Vllm => {
            let v = super::rollout_vllm::rates(
                run,
                &shape.model,
                shape.batch,
                shape.new_tokens,
                &prompts,
                &assets,
                &prompts_file,
            )?;
            v.print(r.cached);
        }
    }
    Ok(())
}

fn rates(
    run: Run,
    shape: &Shape,
    prompts: &[Vec<u32>],
    assets: &Assets,
    prompts_file: &str,
    with_uncached: bool,
) -> Result<Rates> {
    let policy = deltarl_model::load(&shape.model, tch::Device::Cpu, deltarl_model::Dtype::F32)?;
    let g = shape.batch as u64;
    let requests: Vec<Request> = prompts
        .iter()
        .zip(0u64..)
        .map(|(ids, i)| Request {
            prompt_ids: ids.clone(),
            seeds: (i * g..(i + 1) * g).collect(),
        })
        .collect();
    let rate = |use_cache: bool| -> Result<f64> {
        let s = SampleSettings {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: shape.new_tokens,
            // No EOS: every row generates exactly new_tokens, as the baseline does.
            eos_ids: Vec::new(),
            stop_strings: Vec::new(),
            max_batch_rows: shape.batch * shape.prompts,
            max_cache_tokens: None,
            use_cache,
        };
        let mut v = Vec::new();
        for _ in 0..run.reps {
            let t = Instant::now();
            let out = generate(
                &policy.model,
                &policy.tokenizer,
                &requests,
                &s,
                &mut |_, _| {},
            )?;
            let toks: usize = out.iter().flatten().map(|x| x.tokens.len()).sum();
            v.push(toks as f64 / t.elapsed().as_secs_f64());
        }
        Ok(median(v))
    };
    let cached = rate(true)?;
    let uncached = if with_uncached {
        Some(rate(false)?)
    } else {
        None
    };
    let transformers = baseline::run_number(&[
        assets.path(&baseline::HF_GENERATE),
        shape.model.display().to_string(),
        prompts_file.to_string(),
        shape.batch.to_string(),
        shape.new_tokens.to_string(),
        run.threads.to_string(),
        run.reps.to_string(),
    ])?;
    Ok(Rates {
        cached,
        uncached,
        transformers,
    })
}
