//! `deltarl bench rollout`: generation tokens/s of our decoder (with and without its KV
//! cache) against transformers' `generate`, and optionally vLLM's server, on one model
//! folder.

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

/// The batch every engine generates: one prompt of `prompt_len` tokens, `batch` samples of
/// exactly `new_tokens` each.
#[derive(Clone, Debug)]
pub struct Shape {
    pub model: PathBuf,
    pub batch: usize,
    pub prompt_len: usize,
    pub new_tokens: usize,
}

/// Tokens per second (medians).
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    pub cached: f64,
    pub uncached: f64,
    pub transformers: f64,
}

pub fn run(run: Run, shape: &Shape, engine: EngineArg) -> Result<()> {
    let req = Request {
        prompt_ids: vec![5; shape.prompt_len],
        seeds: (0..shape.batch as u64).collect(),
    };
    let r = rates(run, shape, &req)?;
    println!(
        "rollout: batch {}, prompt {}, {} new tokens, {} threads, median of {}",
        shape.batch, shape.prompt_len, shape.new_tokens, run.threads, run.reps
    );
    println!("  deltarl (KV cache)     {:>10.1} tok/s", r.cached);
    println!(
        "  deltarl (no cache)     {:>10.1} tok/s  ({:.2}x slower)",
        r.uncached,
        r.cached / r.uncached
    );
    println!("  transformers generate  {:>10.1} tok/s", r.transformers);
    println!(
        "  speed-up vs transformers {:.2}x",
        r.cached / r.transformers
    );
    match engine {
        EngineArg::Native => {}
        EngineArg::Vllm => {
            let (startup, rate) = vllm_rate(run, shape, &req)?;
            println!(
                "  vLLM (server)          {rate:>10.1} tok/s  (ours {:.2}x; server start-up \
                 {startup:.1} s, not counted)",
                r.cached / rate
            );
        }
    }
    Ok(())
}

fn rates(run: Run, shape: &Shape, req: &Request) -> Result<Rates> {
    let policy = deltarl_model::load(&shape.model, tch::Device::Cpu, deltarl_model::Dtype::F32)?;
    let rate = |use_cache: bool| -> Result<f64> {
        let s = SampleSettings {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: shape.new_tokens,
            // No EOS: every row generates exactly new_tokens, as the baseline does.
            eos_ids: Vec::new(),
            stop_strings: Vec::new(),
            max_batch_rows: shape.batch,
            max_cache_tokens: None,
            use_cache,
        };
        let mut v = Vec::new();
        for _ in 0..run.reps {
            let t = Instant::now();
            let out = generate(
                &policy.model,
                &policy.tokenizer,
                std::slice::from_ref(req),
                &s,
                &mut |_, _| {},
            )?;
            let toks: usize = out.iter().flatten().map(|x| x.tokens.len()).sum();
            v.push(toks as f64 / t.elapsed().as_secs_f64());
        }
        Ok(median(v))
    };
    let cached = rate(true)?;
    let uncached = rate(false)?;
    let assets = Assets::write(&[&baseline::HF_GENERATE])?;
    let transformers = baseline::run_number(&[
        assets.path(&baseline::HF_GENERATE),
        shape.model.display().to_string(),
        shape.prompt_len.to_string(),
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

/// vLLM's generation rate for `req` (one request of n = its seeds, exactly `new_tokens`
/// each), median of the repetitions, and its server's start-up seconds. The server is the
/// rollout stage's, started with the default `[rollout.vllm]` options.
fn vllm_rate(run: Run, shape: &Shape, req: &Request) -> Result<(f64, f64)> {
    let log = std::env::temp_dir().join(format!("deltarl-bench-vllm-{}.log", std::process::id()));
    let folder = shape
        .model
        .canonicalize()
        .with_context(|| format!("{}", shape.model.display()))?;
    let settings = crate::vllm::Settings::new(&crate::config::VllmOptions {
        keep_alive: false,
        ..Default::default()
    });
    let probe = crate::vllm::Probe {
        ids: Vec::new(),
        reference: &|_| Ok(Vec::new()),
    };
    let (vllm, acquired) = crate::vllm::acquire(
        &settings,
        &folder,
        &crate::vllm::Placement {
            log: log.clone(),
            cpu: true,
            dtype: deltarl_model::Dtype::F32,
            seed: 0,
            env: Vec::new(),
        },
        &crate::vllm::Kept::default(),
        &probe,
    )?;
    eprintln!("vLLM server log: {}", log.display());
    let sampling = deltarl_vllm::Sampling {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        max_tokens: shape.new_tokens,
        stop_token_ids: Vec::new(),
        stop: Vec::new(),
        ignore_eos: true,
    };
    let prompt = deltarl_vllm::Prompt {
        ids: req.prompt_ids.clone(),
        seed: 0,
    };
    let mut v = Vec::new();
    for _ in 0..run.reps {
        let t = Instant::now();
        let out = vllm
            .client
            .complete(&prompt, req.seeds.len() as u32, &sampling)
            .map_err(|e| vllm.explain(anyhow::anyhow!(e)))?;
        let toks: usize = out.iter().map(|c| c.tokens.len()).sum();
        v.push(toks as f64 / t.elapsed().as_secs_f64());
    }
    Ok((acquired.seconds(), median(v)))
}
