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
        /// Also time vLLM (`make vllm`) on the same folder: its server start-up apart from
        /// its generation.
        #[arg(long, value_enum, default_value = "native")]
        engine: EngineArg,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EngineArg {
    Native,
    Vllm,
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

/// vLLM's generation rate on `model` for the request `req` (one request of n = its seeds,
/// exactly `new_tokens` each), median of `reps`, and its server's start-up seconds.
fn vllm_rate(
    model: &Path,
    req: &deltarl_model::generate::Request,
    new_tokens: usize,
    reps: usize,
) -> Result<(f64, f64)> {
    let log = std::env::temp_dir().join(format!("deltarl-bench-vllm-{}.log", std::process::id()));
    let t = Instant::now();
    let server = deltarl_vllm::Server::start(&deltarl_vllm::ServerSettings {
        python: crate::vllm::python(&Default::default()),
        model: model
            .canonicalize()
            .with_context(|| format!("{}", model.display()))?,
        dtype: "float32",
        port: None,
        cpu: true,
        extra_args: Vec::new(),
        start_timeout: std::time::Duration::from_secs(900),
        log: log.clone(),
        seed: 0,
    })?;
    eprintln!("vLLM server log: {}", log.display());
    let startup = t.elapsed().as_secs_f64();
    let client = deltarl_vllm::Client::connect(server.url())?;
    let sampling = deltarl_vllm::Sampling {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        max_tokens: new_tokens,
        stop_token_ids: Vec::new(),
        stop: Vec::new(),
        ignore_eos: true,
    };
    let prompt = deltarl_vllm::Prompt {
        ids: req.prompt_ids.clone(),
        seed: 0,
    };
    let mut v = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let out = client
            .complete(&prompt, req.seeds.len() as u32, &sampling)
            .map_err(|e| server.error(&e))?;
        let toks: usize = out.iter().map(|c| c.tokens.len()).sum();
        v.push(toks as f64 / t.elapsed().as_secs_f64());
    }
    Ok((startup, median(v)))
}

/// One labelled case of a verifier case file.
struct Case {
    pred: String,
    gold: String,
    /// The file's label (`expected` or `intended`).
    label: bool,
    /// The strict policy's label (`boxed`, else the label).
    boxed: bool,
}

fn read_cases(path: &Path, label: &str) -> Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
            let field = |k: &str| {
                v[k].as_str()
                    .map(str::to_string)
                    .with_context(|| format!("{}:{}: no string `{k}`", path.display(), i + 1))
            };
            let flag = v[label]
                .as_bool()
                .with_context(|| format!("{}:{}: no boolean `{label}`", path.display(), i + 1))?;
            Ok(Case {
                pred: field("pred")?,
                gold: field("gold")?,
                label: flag,
                boxed: v["boxed"].as_bool().unwrap_or(flag),
            })
        })
        .collect()
}

/// Runs a Python baseline and returns its standard output.
fn run_python_text(args: &[String]) -> Result<String> {
    let out = Command::new(python())
        .args(args)
        .output()
        .context("cannot run the Python baseline (set DELTARL_PYTHON)")?;
    if !out.status.success() {
        bail!("baseline failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_python(args: &[String]) -> Result<f64> {
    let text = run_python_text(args)?;
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
                use deltarl_verify::{verify_with, Policy};
                // Two case files: `cases.jsonl` labelled by math-verify (`expected`), and the
                // hand-written `written.jsonl` labelled with the intended verdicts.
                let table = script("../stages/verify/tests/cases.jsonl");
                let written = script("../stages/verify/tests/written.jsonl");
                let cases = read_cases(&table, "expected")?;
                let mine = read_cases(&written, "intended")?;
                let theirs_on_mine: Vec<bool> = serde_json::from_str(&run_python_text(&[
                    script("../stages/verify/tests/bench_math_verify.py")
                        .display()
                        .to_string(),
                    "verdicts".into(),
                    written.display().to_string(),
                ])?)
                .context("math-verify's verdicts on written.jsonl")?;
                let agree = |cases: &[Case], policy: Policy, label: &dyn Fn(&Case) -> bool| {
                    let n = cases
                        .iter()
                        .filter(|c| verify_with(&c.pred, &c.gold, policy) == label(c))
                        .count();
                    format!("{n}/{}", cases.len())
                };
                let mv = |i: usize| theirs_on_mine.get(i).copied().unwrap_or(false);
                let mv_intended = mine
                    .iter()
                    .enumerate()
                    .filter(|(i, c)| mv(*i) == c.label)
                    .count();
                // Single-threaded, like the Python baseline; the score stage adds rayon.
                let ours = median(
                    (0..reps)
                        .map(|_| {
                            let t = Instant::now();
                            for c in &cases {
                                std::hint::black_box(deltarl_verify::verify(&c.pred, &c.gold));
                            }
                            t.elapsed().as_secs_f64()
                        })
                        .collect(),
                );
                let theirs = run_python(&[
                    script("../stages/verify/tests/bench_math_verify.py")
                        .display()
                        .to_string(),
                    table.display().to_string(),
                    reps.to_string(),
                ])?;
                let n = cases.len() as f64;
                println!("verify: agreement (cases right / cases)");
                println!(
                    "  {:<44} {:>9} {:>9} {:>11}",
                    "", "boxed", "lenient", "math-verify"
                );
                let by_label = |c: &Case| c.label;
                println!(
                    "  {:<44} {:>9} {:>9} {:>11}",
                    "cases.jsonl vs math-verify",
                    agree(&cases, Policy::Boxed, &by_label),
                    agree(&cases, Policy::Lenient, &by_label),
                    "-"
                );
                println!(
                    "  {:<44} {:>9} {:>9} {:>11}",
                    "written.jsonl vs intended labels",
                    agree(&mine, Policy::Boxed, &|c: &Case| c.boxed),
                    agree(&mine, Policy::Lenient, &by_label),
                    format!("{mv_intended}/{}", mine.len())
                );
                let indexed: Vec<(usize, &Case)> = mine.iter().enumerate().collect();
                let vs_mv = |policy: Policy| {
                    let k = indexed
                        .iter()
                        .filter(|(i, c)| verify_with(&c.pred, &c.gold, policy) == mv(*i))
                        .count();
                    format!("{k}/{}", mine.len())
                };
                println!(
                    "  {:<44} {:>9} {:>9} {:>11}",
                    "written.jsonl vs math-verify",
                    vs_mv(Policy::Boxed),
                    vs_mv(Policy::Lenient),
                    "-"
                );
                println!("speed: {} cases, one thread, median of {reps}", cases.len());
                println!("  deltarl      {:>12.0} verifications/s", n / ours);
                println!("  math-verify  {:>12.0} verifications/s", n / theirs);
                println!("  speed-up {:.1}x", theirs / ours);
            }
            What::Rollout {
                model,
                batch,
                prompt_len,
                new_tokens,
                engine,
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
                if engine == EngineArg::Vllm {
                    let (startup, rate) = vllm_rate(&model, &req, new_tokens, reps)?;
                    println!(
                        "  vLLM (server)          {rate:>10.1} tok/s  (ours {:.2}x; server start-up {startup:.1} s, not counted)",
                        cached / rate
                    );
                }
            }
        }
        Ok(())
    }
}
