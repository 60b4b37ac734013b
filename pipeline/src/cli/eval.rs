use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use deltarl_eval::{fitting, summarize, Request, Sampler, Summary};

use crate::config::CodeOptions;
use crate::stage::eval::evaluate;

/// Held-out problems of a built-in dataset evaluated when --limit does not say.
const DEFAULT_HELDOUT: usize = 200;

/// The DelTA prompt template (`docs/method.md` §8).
pub const DELTA_TEMPLATE: &str =
    "User:\n{question}\nPlease reason step by step, and put your final answer within \\boxed{}.\n\nAssistant:\n";

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: crate::cli::model_arg::ModelArg,
    /// Benchmark files (JSONL or Parquet, simple or verl layout), or a built-in dataset's
    /// name for its held-out split (`word-problems`, `tiny-arith`, ...: the problems the
    /// eval stage draws); repeat for several.
    #[arg(long = "bench", required = true)]
    benches: Vec<PathBuf>,
    /// Samples per problem.
    #[arg(long, default_value_t = 1, value_parser = crate::config::ranges::samples_arg)]
    k: u32,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = crate::config::ranges::temperature_arg)]
    temperature: f64,
    /// Nucleus sampling (1 = off; the authors validate at 0.7 with temperature 1).
    #[arg(long, default_value_t = 1.0, value_parser = crate::config::ranges::top_p_arg)]
    top_p: f64,
    /// The k most probable tokens only (0 = off).
    #[arg(long, default_value_t = 0, value_parser = crate::config::ranges::top_k_arg)]
    top_k: usize,
    #[arg(long, default_value_t = 1024, value_parser = crate::config::ranges::new_tokens_arg)]
    max_new_tokens: usize,
    /// Prompt template with `{question}` (default: the DelTA template).
    #[arg(long, value_parser = crate::config::template_arg)]
    template: Option<String>,
    /// Wrap the prompt in the model's chat template (tokenizer_config.json).
    #[arg(long)]
    chat_template: bool,
    /// Only the first N problems of each benchmark.
    #[arg(long, value_parser = crate::config::ranges::limit_arg)]
    limit: Option<usize>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Rows decoded together at most.
    #[arg(long, default_value_t = 256, value_parser = crate::config::ranges::batch_rows_arg)]
    max_batch_rows: usize,
    /// Answer extraction from the sampled responses.
    #[arg(long, value_enum, default_value = "lenient")]
    extract: crate::cli::extract::ExtractArg,
    /// Write every sample's verdict here (eval.parquet layout).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn ci(e: deltarl_eval::Estimate) -> String {
    format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lo, e.hi)
}

impl Args {
    pub fn run(self, runs: &std::path::Path) -> Result<()> {
        // Every benchmark is read before the model loads and anything is printed, so a bad
        // file is refused before any is evaluated.
        let benches = self.read_benchmarks()?;
        let model = self.model.folder(runs)?;
        let policy = deltarl_model::load(
            &model,
            deltarl_model::default_device(),
            deltarl_model::Dtype::F32,
        )
        .with_context(|| format!("cannot load {}", model.display()))?;
        let template = self
            .template
            .clone()
            .unwrap_or_else(|| DELTA_TEMPLATE.to_string());
        // With a chat template the prompts are rendered in full before sampling.
        let mut s = Request {
            template: template.clone(),
            samples: self.k,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_new_tokens: self.max_new_tokens,
            stop: Vec::new(),
            max_batch_rows: self.max_batch_rows,
            max_cache_tokens: None,
            session_rows: None,
            shard: deltarl_schemas::Shard::WHOLE,
            extract: deltarl_verify::Policy::from(self.extract).options(),
            seed: self.seed,
            iter: 0,
        };
        // The chat template too is applied before the table starts: a model without one
        // is refused before any line is printed.
        let mut prepared = Vec::with_capacity(benches.len());
        for (name, mut prompts) in benches {
            let template = if self.chat_template {
                crate::chat::apply(&mut prompts, &template, &model)?
            } else {
                template.clone()
            };
            prepared.push((name, prompts, template));
        }
        let mut all = Vec::new();
        println!(
            "{:<16} {:>8} {:>3}  {:<24} {:<24} {:<24} {:>8} {:>9}",
            "benchmark",
            "problems",
            "k",
            "avg@k [95% CI]",
            "pass@k [95% CI]",
            "maj@k [95% CI]",
            "mean len",
            "truncated"
        );
        for (name, prompts, template) in prepared {
            s.template = template;
            let ctx = policy.model.max_positions() as usize;
            let total = prompts.len();
            let (prompts, skipped) = fitting(
                &policy.tokenizer,
                ctx,
                &s.template,
                self.max_new_tokens,
                prompts,
            )?;
            if prompts.is_empty() {
                println!(
                    "{:<16} {:>8} skipped: all {total} prompts + {} new tokens exceed the context of {ctx}",
                    name,
                    0,
                    self.max_new_tokens
                );
                continue;
            }
            let rows = evaluate(
                &Sampler::native(&policy),
                &name,
                &prompts,
                &s,
                &CodeOptions::default(),
            )?;
            print_row(&summarize(&name, &rows));
            // A benchmark that mixes sources (verl's `data_source`) gets a line per source.
            let mut sources: Vec<&str> = rows
                .iter()
                .filter_map(|r| r.data_source.as_deref())
                .collect();
            sources.sort_unstable();
            sources.dedup();
            if sources.len() > 1 {
                for src in sources {
                    let part: Vec<_> = rows
                        .iter()
                        .filter(|r| r.data_source.as_deref() == Some(src))
                        .cloned()
                        .collect();
                    print_row(&summarize(&format!("  {src}"), &part));
                }
            }
            if skipped > 0 {
                println!("{:<16} ({skipped} of {total} problems skipped: prompt + {} new tokens exceed the context of {ctx})", "", self.max_new_tokens);
            }
            all.extend(rows);
        }
        if let Some(out) = self.out {
            let meta = deltarl_schemas::FileMeta::new("eval", "")
                .with("model", model.display().to_string())
                .with("k", self.k.to_string())
                .with("temperature", self.temperature.to_string())
                .with("top_p", self.top_p.to_string())
                .with("top_k", self.top_k.to_string());
            deltarl_schemas::write_path(&out, &all, &meta)?;
        }
        Ok(())
    }

    /// Each `--bench` as (benchmark name, problems): a file of that name comes first; else a
    /// built-in dataset's held-out split, as many problems as `--limit` asks (the eval
    /// stage's first N), 200 without it. Two of one name are refused: the table and the
    /// `--out` rows tell benchmarks apart by name. `--out` is checked here too: not a
    /// folder, and none of the benchmarks (it would replace it).
    fn read_benchmarks(&self) -> Result<Vec<(String, Vec<deltarl_schemas::PromptRow>)>> {
        if let Some(out) = &self.out {
            let files: Vec<&Path> = self.benches.iter().map(PathBuf::as_path).collect();
            if let Some(why) = crate::data::unfit_output(out, &files) {
                anyhow::bail!("--out {}: {why}", out.display());
            }
        }
        let mut out: Vec<(String, Vec<_>)> = Vec::new();
        for path in &self.benches {
            let builtin = path
                .to_str()
                .filter(|_| !path.exists())
                .and_then(deltarl_data::Builtin::from_source);
            let (name, mut prompts) = match builtin {
                Some(b) => (
                    b.heldout_name(),
                    b.test_prompts(self.limit.unwrap_or(DEFAULT_HELDOUT)),
                ),
                None => (
                    crate::data::benchmark_name(path),
                    crate::data::read_benchmark(path)?,
                ),
            };
            anyhow::ensure!(
                out.iter().all(|(n, _)| *n != name),
                "--bench {}: a second benchmark named `{name}` (the rows of both would carry \
                 that name); give each benchmark once, under its own name",
                path.display()
            );
            if let Some(n) = self.limit {
                prompts.truncate(n);
            }
            out.push((name, prompts));
        }
        Ok(out)
    }
}

/// One line of the benchmark table.
fn print_row(m: &Summary) {
    println!(
        "{:<16} {:>8} {:>3}  {:<24} {:<24} {:<24} {:>8.1} {:>8.1}%",
        m.benchmark,
        m.problems,
        m.k,
        ci(m.avg),
        ci(m.pass),
        ci(m.maj),
        m.mean_len,
        100.0 * m.truncated
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct One {
        #[command(flatten)]
        args: Args,
    }

    fn read(extra: &[&str]) -> Result<Vec<(String, usize)>> {
        let argv = ["eval", "--model", "m"].iter().chain(extra).copied();
        let benches = One::try_parse_from(argv).unwrap().args.read_benchmarks()?;
        Ok(benches.into_iter().map(|(n, p)| (n, p.len())).collect())
    }

    #[test]
    fn every_benchmark_is_read_first_and_names_are_not_shared() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for (d, n) in [(&a, 3), (&b, 2)] {
            std::fs::create_dir(d).unwrap();
            let lines: String = (0..n)
                .map(|i| format!("{{\"problem\": \"{i}+1\", \"answer\": \"{}\"}}\n", i + 1))
                .collect();
            std::fs::write(d.join("sums.jsonl"), lines).unwrap();
        }
        let (a, b) = (a.join("sums.jsonl"), b.join("sums.jsonl"));
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        let got = read(&["--bench", a, "--bench", "tiny-arith", "--limit", "2"]).unwrap();
        assert_eq!(got[0], ("sums".to_string(), 2));
        assert_eq!(got[1].1, 2);
        let err = format!("{:#}", read(&["--bench", a, "--bench", b]).unwrap_err());
        assert!(
            err.contains(&format!("--bench {b}: a second benchmark named `sums`")),
            "{err}"
        );
        // A bad file anywhere in the list is refused by name before any is evaluated.
        let dir_path = dir.path().to_str().unwrap();
        let err = format!(
            "{:#}",
            read(&["--bench", a, "--bench", dir_path]).unwrap_err()
        );
        assert!(
            err.contains(&format!("cannot read prompts {dir_path}")),
            "{err}"
        );
        // `--out` naming a benchmark (which it would replace) or a folder (where it would
        // fail after the evaluation) is refused first.
        let err = format!("{:#}", read(&["--bench", a, "--out", a]).unwrap_err());
        assert!(
            err.contains(&format!("--out {a}: that is the input {a}")),
            "{err}"
        );
        let err = format!(
            "{:#}",
            read(&["--bench", a, "--out", dir_path]).unwrap_err()
        );
        assert!(err.contains("a folder; name a file in it"), "{err}");
        read(&["--bench", a, "--out", &format!("{dir_path}/new/x.parquet")]).unwrap();
    }
}
