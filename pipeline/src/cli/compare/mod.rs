//! `deltarl compare`: each variant x seed as its own run from one shared warm-started base,
//! then the final held-out accuracy per variant with a 95 % confidence interval, and each
//! variant's paired difference from the baseline (same seeds: same base, prompt draws and
//! held-out problems) with a t-interval over seeds (its p-value Holm-corrected over the
//! arms) and a bootstrap over seeds and one shared draw of problems. A
//! variant is an algorithm or a labelled set of configuration keys (ablations, sweeps).

mod figure;
mod heldout;
mod outcome;
mod paired_table;
mod variant;

use figure::figure;

use outcome::Outcome;
use paired_table::paired_table;
use variant::Variant;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use deltarl_schemas::{read_path, EvalRow, Stage};
use heldout::{base_eval, sampled_eval, SAMPLED_ANSWERS};
use paired_table::Scores;

use crate::context::Ctx;
use crate::rundir::RunLock;
use crate::runner::{Runner, Until};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Base configuration; each run sets `seed` and its variant's keys over it.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Comma-separated variants: an algorithm (`dapo`), or a label and the keys it sets,
    /// `LABEL:KEY=VALUE[;KEY=VALUE...]` (`k0:algorithm=delta;coeffs.refine_steps=0`). The
    /// first variant's first-seed run warm-starts the base every other run starts from: keep it
    /// first when adding variants to a comparison, or its base is warm-started again.
    #[arg(long, default_value = "grpo,dapo,delta", value_delimiter = ',')]
    variants: Vec<Variant>,
    /// Seeds per variant: `--first-seed` and the N - 1 after it.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The first seed (tuning on seeds apart from the reported ones: `--first-seed 101`).
    /// Its run warm-starts the comparison's base, so another first seed is another base.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Iterations per run.
    #[arg(long, default_value_t = 20)]
    iters: u32,
    /// Name prefix of the runs and of the comparison folder.
    #[arg(long, default_value = "compare")]
    name: String,
    /// A key set for every run, over the base configuration and before each variant's own
    /// keys (`--set update.lr=3e-5`); repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// The variant (label) the others are paired against (default: dapo when compared,
    /// else the first).
    #[arg(long)]
    baseline: Option<String>,
}

/// The configuration of one run: the base file, the seed, the keys common to all runs, the
/// variant's keys and (after the first run) the shared warm-started base.
fn run_config(
    base_cfg: &Path,
    seed: u64,
    common: &[String],
    v: &Variant,
    shared_base: Option<&Path>,
) -> Result<String> {
    let mut t = toml::Table::new();
    t.insert("extends".into(), base_cfg.display().to_string().into());
    t.insert("seed".into(), toml::Value::Integer(i64::try_from(seed)?));
    for set in common {
        let key = set.split_once('=').map_or(set.as_str(), |(k, _)| k).trim();
        if key == "seed" || key == "extends" {
            anyhow::bail!("--set {set:?}: the comparison sets `{key}` itself (--seeds, --config)");
        }
        crate::config::overrides::apply(&mut t, set)?;
    }
    for set in &v.sets {
        crate::config::overrides::apply(&mut t, set)
            .with_context(|| format!("variant {:?}", v.label))?;
    }
    // Every run starts from the first run's warm-started base, so runs differ only in the
    // variant and the seed.
    if let Some(base) = shared_base {
        crate::config::overrides::apply(
            &mut t,
            &format!("model.source={:?}", base.display().to_string()),
        )?;
    }
    Ok(toml::to_string(&t)?)
}

fn accuracy(rows: &[EvalRow]) -> f64 {
    rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64
}

fn read_eval(path: &Path) -> Result<Vec<EvalRow>> {
    Ok(read_path::<EvalRow>(path)?.0)
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let labels: Vec<String> = self.variants.iter().map(|v| v.label.clone()).collect();
        if let Some(dup) = labels
            .iter()
            .find(|l| labels.iter().filter(|m| m == l).count() > 1)
        {
            anyhow::bail!("--variants: the label {dup:?} is used twice");
        }
        if let Some(b) = &self.baseline {
            if !labels.contains(b) {
                anyhow::bail!(
                    "--baseline {b} is not among --variants ({})",
                    labels.join(", ")
                );
            }
        }
        let folder = runs.join(&self.name);
        std::fs::create_dir_all(folder.join("configs"))?;
        let base_cfg = self
            .config
            .canonicalize()
            .with_context(|| format!("config {}", self.config.display()))?;
        let mut results: Vec<Outcome> = Vec::new();
        let mut scores = Scores::new();
        // The second readout: final policies sampled as the rollout samples.
        let mut sampled: Vec<Outcome> = Vec::new();
        let mut sampled_scores = Scores::new();
        let mut sampling = String::new();
        let mut shared_base: Option<PathBuf> = None;
        let variants = labels;
        let total = variants.len() as u64 * self.seeds;
        let mut k = 0;
        let mut base_rows = None;
        for variant in &self.variants {
            let v = &variant.label;
            for seed in self.first_seed..self.first_seed.saturating_add(self.seeds) {
                k += 1;
                let name = run_name(&self.name, v, seed);
                let cfg = folder.join("configs").join(format!("{v}-s{seed}.toml"));
                let text =
                    run_config(&base_cfg, seed, &self.sets, variant, shared_base.as_deref())?;
                deltarl_schemas::atomic_write_bytes(&cfg, text.as_bytes())?;
                let ctx = Ctx::open(&cfg, runs, &name)?;
                let lock = RunLock::acquire(&ctx.run)?;
                ctx.adopt_config(&lock, false)?;
                let runner = Runner::new(&ctx);
                eprintln!("== [{k}/{total}] {name}");
                runner.iterate(&lock, Until::Iteration(self.iters))?;
                if shared_base.is_none() && ctx.tiny() {
                    let base = ctx.run.base().canonicalize()?;
                    base_rows = base_eval(&ctx, &base, &folder)
                        .context("evaluating the shared base on the held-out problems")?;
                    shared_base = Some(base);
                }
                runner.run_stage(self.iters, Stage::Eval, false)?;
                let curve = (1..=self.iters)
                    .map(|it| {
                        let p = ctx.run.output(it, Stage::Eval);
                        p.exists()
                            .then(|| read_eval(&p).ok().map(|r| accuracy(&r)))
                            .flatten()
                    })
                    .collect();
                // The final evaluation, read once: its accuracy and per-problem scores.
                let final_rows = read_eval(&ctx.run.output(self.iters, Stage::Eval))?;
                let last = accuracy(&final_rows);
                scores.insert(
                    (v.clone(), seed),
                    deltarl_eval::problem_accuracy(&final_rows),
                );
                results.push(Outcome {
                    variant: v.clone(),
                    seed,
                    curve,
                    last,
                });
                if let Some(rows) = sampled_eval(&ctx, &folder, &name, self.iters)? {
                    let r = &ctx.cfg.opts.rollout;
                    sampling = format!(
                        "{SAMPLED_ANSWERS} answers a problem at temperature {}, top-p {}, top-k {}",
                        r.temperature, r.top_p, r.top_k
                    );
                    sampled_scores.insert((v.clone(), seed), deltarl_eval::problem_accuracy(&rows));
                    sampled.push(Outcome {
                        variant: v.clone(),
                        seed,
                        curve: Vec::new(),
                        last: accuracy(&rows),
                    });
                }
            }
        }
        let base_acc = base_rows.as_deref().map(accuracy);
        let mut table = means_table(&variants, &results);
        let mut csv = String::from("variant,seed,iter,eval_accuracy\n");
        let baseline = match self.baseline {
            Some(b) => b,
            None if variants.iter().any(|v| v == "dapo") => "dapo".to_string(),
            None => variants.first().cloned().unwrap_or_default(),
        };
        if variants.len() > 1 {
            table += &paired_table(&variants, &baseline, &results, &scores);
        }
        if !sampled.is_empty() {
            table += &format!(
                "\nThe final policies sampled as the rollout samples ({sampling}; the runs' \
                 own evaluation above is the config's `[eval]`):\n\n"
            );
            table += &means_table(&variants, &sampled);
            if variants.len() > 1 {
                table += &paired_table(&variants, &baseline, &sampled, &sampled_scores);
            }
        }
        for Outcome {
            variant: v,
            seed,
            curve,
            ..
        } in &results
        {
            for (i, a) in curve.iter().enumerate() {
                if let Some(a) = a {
                    csv += &format!("{v},{seed},{},{a:.4}\n", i + 1);
                }
            }
        }
        if let (Some(b), Some(rows)) = (base_acc, &base_rows) {
            table += &format!(
                "\nShared warm-started base (iteration 0), graded as the eval stage grades: \
                 held-out accuracy {b:.4} on {} answers.\n",
                rows.len()
            );
        }
        table += &curve_table(&variants, &results, base_acc, self.iters);
        deltarl_schemas::atomic_write_bytes(&folder.join("compare.md"), table.as_bytes())?;
        deltarl_schemas::atomic_write_bytes(&folder.join("compare.csv"), csv.as_bytes())?;
        let png = deltarl_plot::render_png(&figure(&variants, &results, base_acc))?;
        deltarl_schemas::atomic_write_bytes(&folder.join("compare.png"), &png)?;
        println!("{table}");
        eprintln!(
            "wrote {0}/compare.md, {0}/compare.csv and {0}/compare.png",
            folder.display()
        );
        // Per-iteration diagnostics of every run, side by side, when the report tool is built.
        let names: Vec<String> = results
            .iter()
            .map(|r| run_name(&self.name, &r.variant, r.seed))
            .collect();
        if let Some(bin) = super::report::report_binary() {
            super::report::forward(&bin, runs, &names, Some(&folder), true)?;
        } else {
            eprintln!(
                "per-iteration diagnostics of these runs: `make report-tool`, then \
                 `deltarl report --run {} --out {}`",
                names.join(" --run "),
                folder.display()
            );
        }
        Ok(())
    }
}

/// Each variant's final held-out accuracy over seeds: the mean, its 95 % t-interval and
/// every seed's.
fn means_table(variants: &[String], results: &[Outcome]) -> String {
    let mut table = String::from(
        "| variant | seeds | final held-out accuracy (mean) | 95 % CI | per seed |\n\
         |---|---|---|---|---|\n",
    );
    for v in variants {
        let finals: Vec<f64> = results
            .iter()
            .filter(|r| &r.variant == v)
            .map(|r| r.last)
            .collect();
        let (m, ci) = crate::paired::mean_ci(&finals);
        let per: Vec<String> = finals.iter().map(|x| format!("{x:.3}")).collect();
        table += &format!(
            "| {v} | {} | {m:.4} | ± {ci:.4} | {} |\n",
            finals.len(),
            per.join(", ")
        );
    }
    table
}

/// The run of one variant and seed of a comparison.
fn run_name(prefix: &str, variant: &str, seed: u64) -> String {
    format!("{prefix}-{variant}-s{seed}")
}

/// The curve as a table: mean held-out accuracy over seeds at iteration 0 (the base, when
/// graded) and at about ten iterations evenly spaced up to the last.
fn curve_table(variants: &[String], results: &[Outcome], base: Option<f64>, iters: u32) -> String {
    let step = iters.div_ceil(10).max(1);
    let mut cols: Vec<u32> = (1..=iters).filter(|i| i % step == 0).collect();
    if cols.last() != Some(&iters) {
        cols.push(iters);
    }
    let head: Vec<String> = cols.iter().map(u32::to_string).collect();
    let mut t = format!(
        "\nMean held-out accuracy over seeds by iteration:\n\n| variant | 0 | {} |\n|---|---|{}\n",
        head.join(" | "),
        "---|".repeat(cols.len())
    );
    for v in variants {
        let cell = |i: u32| {
            let xs: Vec<f64> = results
                .iter()
                .filter(|r| &r.variant == v)
                .filter_map(|r| r.curve.get(i as usize - 1).copied().flatten())
                .collect();
            if xs.is_empty() {
                return "–".to_string();
            }
            format!("{:.3}", xs.iter().sum::<f64>() / xs.len() as f64)
        };
        let zero = base.map_or("–".to_string(), |b| format!("{b:.3}"));
        let cells: Vec<String> = cols.iter().map(|&i| cell(i)).collect();
        t += &format!("| {v} | {zero} | {} |\n", cells.join(" | "));
    }
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::outcome::outcome;
    use super::*;

    #[test]
    fn a_run_config_is_the_base_the_seed_the_variant_and_the_shared_base() {
        let v: Variant = "k0:algorithm=delta;coeffs.refine_steps=0;update.lr=1e-5"
            .parse()
            .unwrap();
        let common = ["update.lr=3e-5".to_string(), "rollout.top_k=4".to_string()];
        let text = run_config(
            Path::new("/c/base.toml"),
            3,
            &common,
            &v,
            Some(Path::new("/r/base")),
        )
        .unwrap();
        let t: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(t["extends"].as_str(), Some("/c/base.toml"));
        assert_eq!(t["seed"].as_integer(), Some(3));
        assert_eq!(t["algorithm"].as_str(), Some("delta"));
        assert_eq!(t["coeffs"]["refine_steps"].as_integer(), Some(0));
        // The variant's keys come after the common ones.
        assert_eq!(t["update"]["lr"].as_float(), Some(1e-5));
        assert_eq!(t["rollout"]["top_k"].as_integer(), Some(4));
        assert_eq!(t["model"]["source"].as_str(), Some("/r/base"));
        // The first run warm-starts the base: no model.source.
        let text = run_config(Path::new("/c/base.toml"), 1, &[], &v, None).unwrap();
        assert!(!text.contains("[model]"), "{text}");
        let e = run_config(Path::new("/c/base.toml"), 1, &["seed=4".into()], &v, None);
        assert!(e.unwrap_err().to_string().contains("sets `seed` itself"));
    }

    #[test]
    fn the_curve_table_means_seeds_at_evenly_spaced_iterations() {
        let results: Vec<Outcome> = vec![
            outcome("dapo", 1, vec![Some(0.5), Some(0.6), Some(0.7)], 0.7),
            outcome("dapo", 2, vec![Some(0.7), None, Some(0.8)], 0.8),
        ];
        let t = curve_table(&["dapo".into()], &results, Some(0.45), 3);
        assert!(t.contains("| variant | 0 | 1 | 2 | 3 |"), "{t}");
        // Iteration 2 has one seed; iteration 3 is (0.7 + 0.8) / 2.
        assert!(
            t.contains("| dapo | 0.450 | 0.600 | 0.600 | 0.750 |"),
            "{t}"
        );
        // 25 iterations: every third, and the last.
        let t = curve_table(&["dapo".into()], &results, None, 25);
        assert!(
            t.contains("| variant | 0 | 3 | 6 | 9 | 12 | 15 | 18 | 21 | 24 | 25 |"),
            "{t}"
        );
    }
}
