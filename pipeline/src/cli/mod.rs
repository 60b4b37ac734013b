//! The `deltarl` command line (clap derive, one file per subcommand).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub(crate) mod bench;
mod compare;
mod config;
mod data;
mod eval;
mod extract;
mod flags;
mod generate;
mod import_gguf;
mod iterate;
mod mechanism;
mod model_arg;
mod plan;
mod plan_inputs;
mod plan_rates;
mod prune;
mod random_model;
mod report;
mod stage;
mod status;
mod stdout;
mod verify;
mod warmstart;

/// deltarl: offline RLVR with DelTA token credit assignment.
#[derive(Debug, Parser)]
#[command(name = "deltarl", version, about)]
pub struct Cli {
    /// Folder holding the runs.
    #[arg(long, global = true, default_value = "runs", env = "DELTARL_RUNS")]
    pub runs_dir: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the next iteration(s), resuming wherever the last one stopped.
    Iterate(iterate::Args),
    /// Run (or rerun with --force) one stage of one iteration.
    Stage(stage::Args),
    /// Show each stage's state and timing, per iteration.
    Status(status::Args),
    /// Warm-start the tiny base policy of a run.
    Warmstart(warmstart::Args),
    /// Generate a continuation of a prompt with a model folder.
    Generate(generate::Args),
    /// Write a randomly initialised Qwen3 model folder of a given shape, with a byte-level
    /// BPE tokenizer of its vocabulary size (for tests and benchmarks at real scale).
    RandomModel(random_model::Args),
    /// Convert a GGUF model file to a Hugging Face model folder (transformers' GGUF
    /// loader), recorded with both sides' SHA-256 so a second run is a no-op.
    ImportGguf(import_gguf::Args),
    /// Grade answers: one pair, or a JSONL file.
    Verify(verify::Args),
    /// Benchmarks side by side with a baseline.
    Bench(bench::Args),
    /// Evaluate a model on benchmark files: avg@k, pass@k, maj@k with 95 % intervals.
    Eval(eval::Args),
    /// Per-iteration table of one or more runs (polars scans), printed and written as CSV
    /// and PNG curves; runs the `deltarl-report` binary (`make report`).
    Report(report::Args),
    /// DelTA's mechanism on runs of a built-in arithmetic task: whether the coefficients
    /// separate wrong answers' correct prefixes (and right answers' text shared with wrong
    /// ones) from the rest, as a gradient-weighted AUROC per iteration and over runs.
    Mechanism(mechanism::Args),
    /// Run variants x seeds and compare final held-out accuracy.
    Compare(compare::Args),
    /// Several comparisons, one per warm-started base, read together: each arm's paired
    /// difference from the baseline with the bases as blocks, Holm over the arms, a TOST
    /// against a margin set as a share of the baseline's gain, and the pre-registered rule.
    Strata(compare::strata::Args),
    /// The resolved configuration (`config show --config FILE [--set K=V]`).
    Config(config::Args),
    /// Prepare a published training set as the paper trains on it
    /// (`data prepare --recipe dapo-math --input FILE --out FILE.jsonl`).
    Data(data::Args),
    /// Memory per device for a configuration, and whether it fits (`--memory 141GB`).
    Plan(plan::Args),
    /// Prune a run's old checkpoints now, as `[checkpoint] keep_last` / `save_every` would
    /// have (their hashes kept, so the run stays complete).
    Prune(prune::Args),
}

impl Cli {
    pub fn run(self) -> Result<()> {
        match self.command {
            Command::Iterate(a) => a.run(&self.runs_dir),
            Command::Stage(a) => a.run(&self.runs_dir),
            Command::Status(a) => a.run(&self.runs_dir),
            Command::Warmstart(a) => a.run(&self.runs_dir),
            Command::Generate(a) => a.run(&self.runs_dir),
            Command::RandomModel(a) => a.run(),
            Command::ImportGguf(a) => a.run(),
            Command::Verify(a) => a.run(),
            Command::Bench(a) => a.run(&self.runs_dir),
            Command::Eval(a) => a.run(&self.runs_dir),
            Command::Report(a) => a.run(&self.runs_dir),
            Command::Mechanism(a) => a.run(&self.runs_dir),
            Command::Compare(a) => a.run(&self.runs_dir),
            Command::Strata(a) => a.run(&self.runs_dir),
            Command::Config(a) => a.run(),
            Command::Data(a) => a.run(),
            Command::Plan(a) => a.run(),
            Command::Prune(a) => a.run(&self.runs_dir),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    /// Counts that would make an empty result are refused by the parser, by flag: `compare
    /// --seeds 0` once wrote a table of NaN, `eval --k 0` another.
    #[test]
    fn counts_of_nothing_are_refused_by_flag() {
        for (args, flag) in [
            (&["compare", "--seeds", "0"][..], "--seeds"),
            (&["compare", "--iters", "0"][..], "--iters"),
            (&["eval", "--bench", "x", "--k", "0"][..], "--k"),
            (&["eval", "--bench", "x", "--limit", "0"][..], "--limit"),
            (
                &["generate", "--prompt", "x", "--max-new-tokens", "0"][..],
                "--max-new-tokens",
            ),
            (&["bench", "--reps", "0", "verify"][..], "--reps"),
            (
                &["bench", "rollout", "--model", "m", "--batch", "0"][..],
                "--batch",
            ),
            (&["bench", "code", "--workers", "1,0"][..], "--workers"),
        ] {
            let argv = std::iter::once("deltarl").chain(args.iter().copied());
            let err = Cli::try_parse_from(argv)
                .map(|_| ())
                .map_err(|e| e.to_string());
            let err = err.err().unwrap_or_default();
            assert!(
                err.contains(&format!("invalid value '0' for '{flag}")),
                "{args:?}: {err}"
            );
        }
        let ok = ["deltarl", "compare", "--seeds", "1", "--iters", "1"];
        assert!(Cli::try_parse_from(ok).is_ok());
    }

    /// A prompt template without the placeholder would give every problem one prompt.
    #[test]
    fn an_eval_template_holds_the_question() {
        let err = Cli::try_parse_from(["deltarl", "eval", "--bench", "x", "--template", "Q:"])
            .map(|_| ())
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(err.contains("\"Q:\" must contain {question}"), "{err}");
        let ok = [
            "deltarl",
            "eval",
            "--model",
            "m",
            "--bench",
            "x",
            "--template",
            "Q: {question}",
        ];
        assert!(Cli::try_parse_from(ok).is_ok());
    }

    /// The comparison's folder is `runs/<name>`: a name that leaves the runs folder is
    /// refused by flag, before any run is named after it.
    #[test]
    fn a_comparison_name_is_a_plain_name() {
        let err = Cli::try_parse_from(["deltarl", "compare", "--name", "../x"])
            .map(|_| ())
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("invalid value '../x' for '--name") && err.contains("plain name"),
            "{err}"
        );
    }
}
