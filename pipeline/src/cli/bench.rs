//! Benchmarks that report medians side by side with a baseline run in the same process
//! tree, on the same machine and thread count.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use deltarl_coeffs::{estimate, DeltaSettings, Estimator, Response, Settings};
use deltarl_model::generate::{generate, Request, SampleSettings};
use deltarl_schemas::seed::Rng;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
    /// Repetitions (the median is reported).
    #[arg(long, global = true, default_value_t = 5)]
    reps: usize,
    /// Threads for both sides.
    #[arg(long, global = true, default_value_t = 2)]
    threads: usize,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// DelTA coefficient estimation vs a straightforward numpy implementation.
    Coeffs {
        #[arg(long, default_value_t = 1_000_000)]
        tokens: usize,
        #[arg(long, default_value_t = 128)]
        dim: usize,
    },
    /// Verifications per second on the agreement case table vs HF math-verify.
    Verify,
    /// Generation tokens/s vs transformers' generate and our decoder without KV cache.
    Rollout {
        /// Model folder (e.g. runs/tiny-arith/base).
        #[arg(long)]
        model: PathBuf,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, default_value_t = 16)]
        prompt_len: usize,
        #[arg(long, default_value_t = 48)]
        new_tokens: usize,
    },
}

fn python() -> String {
    std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn script(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run_python(args: &[String]) -> Result<f64> {
    let out = Command::new(python())
        .args(args)
        .output()
        .context("cannot run the Python baseline (set DELTARL_PYTHON)")?;
    if !out.status.success() {
        bail!("baseline failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("baseline printed {text:?}"))
}

impl Args {
    pub fn run(self) -> Result<()> {
        tch::set_num_threads(self.threads as i32);
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .build_global();
        let reps = self.reps.max(1);
        match self.what {
            What::Coeffs { tokens, dim } => {
                // Responses of 500 tokens, one advantage each, random features.
                let mut rng = Rng::new(0);
                let n_resp = tokens.div_ceil(500);
                let feats: Vec<Vec<f32>> = (0..n_resp)
                    .map(|i| {
                        let len = 500.min(tokens - i * 500);
                        (0..len * dim).map(|_| rng.normal() as f32).collect()
                    })
                    .collect();
                let ents: Vec<Vec<f32>> = feats.iter().map(|f| vec![1.0; f.len() / dim]).collect();
                let ids: Vec<String> = (0..n_resp).map(|i| format!("p{}", i / 8)).collect();
                let advs: Vec<f32> = (0..n_resp).map(|_| rng.normal() as f32).collect();
                let rs: Vec<Response<'_>> = (0..n_resp)
                    .map(|i| Response {
                        prompt_id: &ids[i],
                        sample_idx: (i % 8) as u32,
                        advantage: advs[i],
                        kept: true,
                        features: &feats[i],
                        entropy: &ents[i],
                    })
                    .collect();
                let s = Settings::new(Estimator::Delta(DeltaSettings::default()))?;
                let ours = median(
                    (0..reps)
                        .map(|_| {
                            let t = Instant::now();
                            let _ = estimate(&s, dim, &rs);
                            t.elapsed().as_secs_f64()
                        })
                        .collect(),
                );
                let numpy = run_python(&[
                    script("../stages/coeffs/tests/reference.py")
                        .display()
                        .to_string(),
                    "bench".into(),
                    tokens.to_string(),
                    dim.to_string(),
                ])?;
                println!(
                    "coeffs: {tokens} tokens x {dim} dims, K = 1, {} threads, median of {reps}",
                    self.threads
                );
                println!(
                    "  deltarl  {ours:>9.4} s  ({:.2} M tokens/s)",
                    tokens as f64 / ours / 1e6
                );
                println!(
                    "  numpy    {numpy:>9.4} s  ({:.2} M tokens/s)",
                    tokens as f64 / numpy / 1e6
                );
                println!("  speed-up {:.2}x", numpy / ours);
            }
            What::Verify => {
                let path = script("../stages/verify/tests/cases.jsonl");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let cases: Vec<(String, String, bool)> = text
                    .lines()
                    .map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l)?;
                        Ok((
                            v["pred"].as_str().unwrap_or_default().to_string(),
                            v["gold"].as_str().unwrap_or_default().to_string(),
                            v["expected"].as_bool().unwrap_or(false),
                        ))
                    })
                    .collect::<Result<_>>()?;
                let agree = cases
                    .iter()
                    .filter(|(p, g, e)| deltarl_verify::verify(p, g) == *e)
                    .count();
                // Single-threaded, like the Python baseline; the score stage adds rayon.
                let ours = median(
                    (0..reps)
                        .map(|_| {
                            let t = Instant::now();
                            for (p, g, _) in &cases {
                                std::hint::black_box(deltarl_verify::verify(p, g));
                            }
                            t.elapsed().as_secs_f64()
                        })
                        .collect(),
                );
                let theirs = run_python(&[
                    script("../stages/verify/tests/bench_math_verify.py")
                        .display()
                        .to_string(),
                    path.display().to_string(),
                    reps.to_string(),
                ])?;
                let n = cases.len() as f64;
                println!(
                    "verify: {} cases, one thread, median of {reps}",
                    cases.len()
                );
                println!("  deltarl      {:>12.0} verifications/s  (agreement with math-verify {agree}/{})", n / ours, cases.len());
                println!("  math-verify  {:>12.0} verifications/s", n / theirs);
                println!("  speed-up {:.1}x", theirs / ours);
            }
            What::Rollout {
                model,
                batch,
                prompt_len,
                new_tokens,
            } => {
                let policy =
                    deltarl_model::load(&model, tch::Device::Cpu, deltarl_model::Dtype::F32)?;
                let req = Request {
                    prompt_ids: vec![5; prompt_len],
                    seeds: (0..batch as u64).collect(),
                };
                let rate = |use_cache: bool| -> Result<f64> {
                    let s = SampleSettings {
                        temperature: 1.0,
                        top_p: 1.0,
                        top_k: 0,
                        max_new_tokens: new_tokens,
                        // No EOS: every row generates exactly new_tokens, as the baseline does.
                        eos_ids: Vec::new(),
                        stop_strings: Vec::new(),
                        max_batch_rows: batch,
                        max_cache_tokens: None,
                        use_cache,
                    };
                    let mut v = Vec::new();
                    for _ in 0..reps {
                        let t = Instant::now();
                        let out = generate(
                            &policy.model,
                            &policy.tokenizer,
                            std::slice::from_ref(&req),
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
                let hf = run_python(&[
                    script("scripts/hf_generate.py").display().to_string(),
                    model.display().to_string(),
                    prompt_len.to_string(),
                    batch.to_string(),
                    new_tokens.to_string(),
                    self.threads.to_string(),
                    reps.to_string(),
                ])?;
                println!(
                    "rollout: batch {batch}, prompt {prompt_len}, {new_tokens} new tokens, {} threads, median of {reps}",
                    self.threads
                );
                println!("  deltarl (KV cache)     {cached:>10.1} tok/s");
                println!(
                    "  deltarl (no cache)     {uncached:>10.1} tok/s  ({:.2}x slower)",
                    cached / uncached
                );
                println!("  transformers generate  {hf:>10.1} tok/s");
                println!("  speed-up vs transformers {:.2}x", cached / hf);
            }
        }
        Ok(())
    }
}
