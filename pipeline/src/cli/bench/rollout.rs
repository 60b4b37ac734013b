//! `deltarl bench rollout`: generation tokens/s of our engine against transformers'
//! `generate` (and, with `--engine vllm`, the rollout stage's vLLM path and vLLM's offline
//! engine, [`super::rollout_vllm`]) on one model folder and the same prompts, each measured
//! in the same run; and how close ours comes to the machine: its useful FLOP/s against this
//! machine's measured matrix-product rate, and the weight bytes it reads a second against
//! the measured memory bandwidth.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use deltarl_model::generate::{generate, Request, SampleSettings};
use tch::{Device, Kind, Tensor};

use super::baseline::{self, Assets};
use super::timing::{median, median_seconds, Run};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    /// Our engine and transformers only.
    Native,
    /// Also the rollout stage's vLLM path (`make vllm`) against vLLM's offline
    /// `LLM.generate`, start-up and in-place reload apart.
    Vllm,
    /// vLLM's offline `LLM.generate` alone, without the stage's server path (whose line of
    /// 8 requests in flight takes long at a large batch).
    VllmOffline,
}

/// The batch every engine generates: `prompts` distinct prompts of `min_prompt_len` to
/// `prompt_len` tokens, `batch` samples of each, exactly `new_tokens` a sample.
#[derive(Clone, Debug)]
pub struct Shape {
    pub model: PathBuf,
    pub prompts: usize,
    pub batch: usize,
    pub prompt_len: usize,
    /// None: every prompt `prompt_len` tokens.
    pub min_prompt_len: Option<usize>,
    pub new_tokens: usize,
    /// Rows our engine decodes together (None: every row at once).
    pub slots: Option<usize>,
    /// The precision every engine decodes at.
    pub dtype: deltarl_model::Dtype,
}

impl Shape {
    /// The prompts' token ids: distinct per prompt (so no prefix is shared but the
    /// samples'), inside the model's vocabulary; lengths spread over the range by a fixed
    /// stride, so neighbouring prompts differ in length.
    pub fn prompt_ids(&self) -> Result<Vec<Vec<u32>>> {
        let vocab = deltarl_model::read_config(&self.model)?.vocab_size as u32;
        let span = vocab.saturating_sub(5).max(1);
        let lo = self
            .min_prompt_len
            .unwrap_or(self.prompt_len)
            .min(self.prompt_len);
        let spread = (self.prompt_len - lo + 1) as u32;
        Ok((0..self.prompts as u32)
            .map(|i| {
                let len = lo as u32 + (i * 37) % spread;
                (0..len).map(|t| 5 + (i * 31 + t * 7) % span).collect()
            })
            .collect())
    }

    fn rows(&self) -> usize {
        self.prompts * self.batch
    }

    fn slots(&self) -> usize {
        self.slots
            .unwrap_or(self.rows())
            .clamp(1, self.rows().max(1))
    }

    /// Decoding steps our engine takes: every row runs exactly `new_tokens` tokens, so
    /// the rows go through the slots in ceil(rows / slots) waves of `new_tokens` steps
    /// (the last token of a row is sampled, not decoded).
    fn steps(&self) -> usize {
        self.rows().div_ceil(self.slots()) * self.new_tokens.saturating_sub(1)
    }
}

/// This machine's limits, measured in the same run with the same thread count.
#[derive(Clone, Copy, Debug)]
pub struct Machine {
    /// A 1024^3 matrix product at the decoding precision, GFLOP/s (median).
    pub matmul_gflops: f64,
    /// Copying 256 MiB of f32, bytes read + written a second, GB/s (median).
    pub copy_gbs: f64,
}

impl Machine {
    pub fn measure(run: Run, dtype: deltarl_model::Dtype) -> Machine {
        tch::no_grad(|| {
            let n = 1024;
            let a = Tensor::randn([n, n], (dtype.kind(), Device::Cpu));
            let b = Tensor::randn([n, n], (dtype.kind(), Device::Cpu));
            let _ = a.matmul(&b);
            let mm = median_seconds(run.reps.max(3), || {
                let _ = a.matmul(&b);
            });
            let len = 64 << 20;
            let src = Tensor::ones([len], (Kind::Float, Device::Cpu));
            let mut dst = Tensor::zeros([len], (Kind::Float, Device::Cpu));
            dst.copy_(&src);
            let cp = median_seconds(run.reps.max(3), || {
                dst.copy_(&src);
            });
            Machine {
                matmul_gflops: 2.0 * (n * n * n) as f64 / mm / 1e9,
                copy_gbs: 2.0 * (len * 4) as f64 / cp / 1e9,
            }
        })
    }
}

/// What one decoded token costs a model: FLOPs of its matrix products (every 2-d weight
/// but the embedding lookup, the LM head included once) and, per decoding step, the bytes
/// of weights read.
#[derive(Clone, Copy, Debug)]
pub struct Cost {
    pub flops_per_token: f64,
    pub weight_bytes: f64,
}

impl Cost {
    fn of(policy: &deltarl_model::Policy, mean_context: f64) -> Cost {
        let c = &policy.model.config;
        let vars = policy.vs.variables();
        let bytes: usize = vars
            .values()
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum();
        let matmul: usize = vars
            .iter()
            .filter(|(name, t)| t.dim() == 2 && !name.ends_with("embed_tokens.weight"))
            .map(|(_, t)| t.numel())
            .sum();
        let head = if c.tie_word_embeddings {
            c.vocab_size * c.hidden_size
        } else {
            0
        };
        // Attention: q·k and p·v over the context, per layer and head.
        let attention = 4.0
            * (c.num_hidden_layers * c.num_attention_heads * c.head_dim()) as f64
            * mean_context;
        Cost {
            flops_per_token: 2.0 * (matmul + head) as f64 + attention,
            weight_bytes: bytes as f64,
        }
    }
}

/// Our engine's medians.
#[derive(Clone, Copy, Debug)]
pub struct Ours {
    pub tokens_per_s: f64,
    pub seconds: f64,
}

pub fn run(
    run: Run,
    shape: &Shape,
    transformers: bool,
    unpacked: bool,
    engine: EngineArg,
) -> Result<()> {
    let prompts = shape.prompt_ids()?;
    let assets = Assets::write(&[&baseline::HF_GENERATE, &super::rollout_vllm::VLLM_GENERATE])?;
    let prompts_file = assets.path(&baseline::HF_GENERATE) + ".prompts.json";
    std::fs::write(&prompts_file, serde_json::to_string(&prompts)?)
        .with_context(|| format!("cannot write {prompts_file}"))?;
    let machine = Machine::measure(run, shape.dtype);
    let policy = deltarl_model::load(&shape.model, Device::Cpu, shape.dtype)?;
    let mean_prompt =
        prompts.iter().map(Vec::len).sum::<usize>() as f64 / prompts.len().max(1) as f64;
    let cost = Cost::of(&policy, mean_prompt + shape.new_tokens as f64 / 2.0);
    let packed = policy.model.pack().is_some();
    let ours = ours(run, shape, &prompts, &policy)?;
    let plain = if unpacked && packed {
        deltarl_model::packed::set_enabled(false);
        let plain = self::ours(run, shape, &prompts, &policy);
        deltarl_model::packed::set_enabled(true);
        Some(plain?)
    } else {
        None
    };
    drop(policy);
    let (lo, hi) = (
        prompts.iter().map(Vec::len).min().unwrap_or(0),
        prompts.iter().map(Vec::len).max().unwrap_or(0),
    );
    println!(
        "rollout: {} prompts ({lo}-{hi} tokens) x {} samples, {} new tokens, {} slots, {} threads, {}, median of {}",
        shape.prompts,
        shape.batch,
        shape.new_tokens,
        shape.slots(),
        run.threads,
        shape.dtype.hf_name(),
        run.reps
    );
    println!(
        "  machine: {} matmul 1024^3 {:.1} GFLOP/s; memory copy {:.1} GB/s",
        shape.dtype.hf_name(),
        machine.matmul_gflops,
        machine.copy_gbs
    );
    let gflops = ours.tokens_per_s * cost.flops_per_token / 1e9;
    let steps = shape.steps();
    let step_ms = 1e3 * ours.seconds / steps.max(1) as f64;
    let read_gbs = cost.weight_bytes * steps as f64 / ours.seconds / 1e9;
    println!(
        "  deltarl{}{:>10.1} tok/s  {step_ms:.1} ms/step; {gflops:.1} GFLOP/s useful = {:.0}% of matmul; weights {read_gbs:.1} GB/s = {:.0}% of copy",
        if packed { " (packed)       " } else { " (libtorch GEMM)" },
        ours.tokens_per_s,
        100.0 * gflops / machine.matmul_gflops,
        100.0 * read_gbs / machine.copy_gbs
    );
    if let Some(plain) = plain {
        println!(
            "  deltarl (unpacked)     {:>10.1} tok/s  {:.1} ms/step (packed {:.2}x)",
            plain.tokens_per_s,
            1e3 * plain.seconds / steps.max(1) as f64,
            ours.tokens_per_s / plain.tokens_per_s
        );
    }
    if !transformers {
        return Ok(());
    }
    let transformers = baseline::run_number(&[
        assets.path(&baseline::HF_GENERATE),
        shape.model.display().to_string(),
        prompts_file.clone(),
        shape.batch.to_string(),
        shape.new_tokens.to_string(),
        run.threads.to_string(),
        run.reps.to_string(),
        shape.dtype.hf_name().to_string(),
    ])?;
    println!(
        "  transformers generate  {transformers:>10.1} tok/s  (deltarl {:.2}x)",
        ours.tokens_per_s / transformers
    );
    let vllm = super::rollout_vllm::Setup {
        run,
        model: &shape.model,
        samples: shape.batch,
        new_tokens: shape.new_tokens,
        prompts: &prompts,
        assets: &assets,
        prompts_file: &prompts_file,
        dtype: shape.dtype,
    };
    match engine {
        EngineArg::Native => {}
        EngineArg::Vllm => super::rollout_vllm::rates(vllm)?.print(ours.tokens_per_s),
        EngineArg::VllmOffline => super::rollout_vllm::offline_rate(vllm)?.print(ours.tokens_per_s),
    }
    Ok(())
}

fn ours(
    run: Run,
    shape: &Shape,
    prompts: &[Vec<u32>],
    policy: &deltarl_model::Policy,
) -> Result<Ours> {
    let g = shape.batch as u64;
    let requests: Vec<Request> = prompts
        .iter()
        .zip(0u64..)
        .map(|(ids, i)| Request {
            prompt_ids: ids.clone(),
            seeds: (i * g..(i + 1) * g).collect(),
        })
        .collect();
    // No EOS: every row generates exactly new_tokens, as the baseline does.
    let s =
        SampleSettings::plain(1.0, shape.new_tokens, Vec::new()).batched(shape.slots(), None, None);
    let (mut rates, mut secs) = (Vec::new(), Vec::new());
    for _ in 0..run.reps {
        let t = Instant::now();
        let out = generate(
            &policy.model,
            &policy.tokenizer,
            &requests,
            &s,
            &mut |_, _| {},
        )?;
        let dt = t.elapsed().as_secs_f64();
        let toks: usize = out.iter().flatten().map(|x| x.tokens.len()).sum();
        rates.push(toks as f64 / dt);
        secs.push(dt);
    }
    Ok(Ours {
        tokens_per_s: median(rates),
        seconds: median(secs),
    })
}
