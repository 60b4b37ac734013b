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
pub mod strata;
mod tables;
mod variant;

use figure::figure;

use variant::Variant;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use deltarl_schemas::{read_path, EvalRow, Stage};
use heldout::{base_eval, base_sampled, sampled_eval, SAMPLED_ANSWERS};
use outcome::run_name;
use tables::{accuracy, curve_csv, curve_table, Readout};

use crate::context::Ctx;
use crate::rundir::RunLock;
use crate::runner::{Runner, Until};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Base configuration; each run sets `seed` and its variant's keys over it.
    #[arg(long, default_value = "configs/tiny-arith.toml")]
    config: PathBuf,
    /// Comma-separated variants: an algorithm (`dapo`), a method of the field (`cispo`,
    /// `sapo`, `gspo`, `gspo-token`, `delta-gspo-token`, `top-entropy`, `ktae`, `fipo`, `oracle-prefix`,
    /// `oracle-filler`), or
    /// a label and the keys it sets,
    /// `LABEL:KEY=VALUE[;KEY=VALUE...]` (`k0:algorithm=delta;coeffs.refine_steps=0`). The
    /// first variant's first-seed run warm-starts the base every other run starts from (unless
    /// `--base` names one): keep it first when adding variants to a comparison, or its base is
    /// warm-started again.
    #[arg(long, default_value = "grpo,dapo,delta", value_delimiter = ',')]
    variants: Vec<Variant>,
    /// Seeds per variant: `--first-seed` and the N - 1 after it.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=4096))]
    seeds: u64,
    /// The first seed (tuning on seeds apart from the reported ones: `--first-seed 101`).
    /// Its run warm-starts the comparison's base, so another first seed is another base.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Iterations per run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Name prefix of the runs and of the comparison folder (a plain name, as a run's).
    #[arg(long, default_value = "compare", value_parser = plain_name)]
    name: String,
    /// A key set for every run, over the base configuration and before each variant's own
    /// keys (`--set update.lr=3e-5`); repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// The variant (label) the others are paired against (default: dapo when compared,
    /// else the first).
    #[arg(long)]
    baseline: Option<String>,
    /// Start every run from this policy folder instead of warm-starting a base: an earlier
    /// comparison's (`runs/<name>-<variant>-s<seed>/base`), so a follow-up comparison pairs
    /// with it on the same base without paying for its warm start again. Set after `--set`.
    #[arg(long, value_name = "FOLDER")]
    base: Option<PathBuf>,
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

fn read_eval(path: &Path) -> Result<Vec<EvalRow>> {
    Ok(read_path::<EvalRow>(path)?.0)
}

/// `--name`: the comparison's folder is `runs/<name>`, so it is refused as a run name would be.
fn plain_name(name: &str) -> std::result::Result<String, String> {
    deltarl_schemas::layout::check_run_name(name).map(|()| name.to_string())
}

impl Args {
    /// The variants' labels, each used once, and the baseline among them.
    fn labels(&self) -> Result<(Vec<String>, String)> {
        let labels: Vec<String> = self.variants.iter().map(|v| v.label.clone()).collect();
        if let Some(dup) = crate::cli::flags::repeated(&labels) {
            anyhow::bail!("--variants: the label {dup:?} is used twice");
        }
        let baseline = match &self.baseline {
            Some(b) if !labels.contains(b) => anyhow::bail!(
                "--baseline {b} is not among --variants ({})",
                labels.join(", ")
            ),
            Some(b) => b.clone(),
            None if labels.iter().any(|v| v == "dapo") => "dapo".to_string(),
            None => labels.first().cloned().unwrap_or_default(),
        };
        Ok((labels, baseline))
    }

    pub fn run(self, runs: &Path) -> Result<()> {
        let (variants, baseline) = self.labels()?;
        let base_cfg = self
            .config
            .canonicalize()
            .with_context(|| format!("config {}", self.config.display()))?;
        let mut shared_base = match &self.base {
            Some(b) if !b.join("config.json").is_file() => anyhow::bail!(
                "--base {}: not a policy folder (no config.json in it)",
                b.display()
            ),
            Some(b) => Some(b.canonicalize()?),
            None => None,
        };
        // Checked before anything is written.
        let folder = runs.join(&self.name);
        std::fs::create_dir_all(folder.join("configs"))?;
        // The runs' own final evaluation (the config's `[eval]`), and the second readout:
        // the final policies sampled as the rollout samples.
        let (mut graded, mut sampled) = (Readout::default(), Readout::default());
        let mut sampling = String::new();
        let total = variants.len() as u64 * self.seeds;
        let mut k = 0;
        let mut base_rows = None;
        let mut base_sampled_rows = None;
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
                if k == 1 {
                    // The base every run starts from: `--base`, or this first run's warm start.
                    if shared_base.is_none() && ctx.tiny() {
                        shared_base = Some(ctx.run.base().canonicalize()?);
                    }
                    if let Some(b) = &shared_base {
                        base_rows = base_eval(&ctx, b, &folder)
                            .context("evaluating the shared base on the held-out problems")?;
                        base_sampled_rows = base_sampled(&ctx, b, &folder).context(
                            "sampling the shared base on the held-out problems as the rollout samples",
                        )?;
                    }
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
                graded.add(v, seed, curve, &final_rows);
                if let Some(rows) = sampled_eval(&ctx, &folder, &name, self.iters)? {
                    let r = &ctx.cfg.opts.rollout;
                    sampling = format!(
                        "{SAMPLED_ANSWERS} answers a problem at temperature {}, top-p {}, top-k {}",
                        r.temperature, r.top_p, r.top_k
                    );
                    sampled.add(v, seed, Vec::new(), &rows);
                }
            }
        }
        let base_acc = base_rows.as_deref().map(accuracy);
        let mut table = graded.tables(&variants, &baseline);
        if !sampled.outcomes.is_empty() {
            table += &format!(
                "\nThe final policies sampled as the rollout samples ({sampling}; the runs' \
                 own evaluation above is the config's `[eval]`):\n\n"
            );
            table += &sampled.tables(&variants, &baseline);
        }
        if let (Some(b), Some(rows)) = (base_acc, &base_rows) {
            table += &format!(
                "\nShared warm-started base (iteration 0), graded as the eval stage grades: \
                 held-out accuracy {b:.4} on {} answers.\n",
                rows.len()
            );
        }
        if let Some(rows) = &base_sampled_rows {
            table += &format!(
                "The same base sampled as the rollout samples ({sampling}): held-out accuracy \
                 {:.4} on {} answers.\n",
                accuracy(rows),
                rows.len()
            );
        }
        let results = &graded.outcomes;
        table += &curve_table(&variants, results, base_acc, self.iters);
        if let Some(note) = compute_note(runs, &self.name, results, self.iters) {
            eprintln!("warning: {note}");
            table += &format!("\nNote: {note}\n");
        }
        deltarl_schemas::atomic_write_bytes(&folder.join("compare.md"), table.as_bytes())?;
        deltarl_schemas::atomic_write_bytes(
            &folder.join("compare.csv"),
            curve_csv(results).as_bytes(),
        )?;
        let png = deltarl_plot::render_png(&figure(&variants, results, base_acc))?;
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

/// When the compared runs' updates were computed with different thread counts or
/// processes (a run resumed from an earlier `compare`, or one made under torchrun): their
/// differences then include round-off the comparison's pairing does not hold fixed.
fn compute_note(
    runs: &Path,
    prefix: &str,
    results: &[outcome::Outcome],
    iters: u32,
) -> Option<String> {
    let recorded = results.iter().flat_map(|r| {
        let name = run_name(prefix, &r.variant, r.seed);
        let root = runs.join(&name);
        (1..=iters).filter_map(move |it| {
            let path = root.join(format!("iter-{it:04}/manifest/update.json"));
            let m = deltarl_schemas::Manifest::read(&path).ok().flatten()?;
            Some((format!("{name} iteration {it}"), m.compute?))
        })
    });
    let groups = crate::compute::mixed(recorded)?;
    Some(format!(
        "the runs' updates were computed with different thread counts or processes, so \
         equal settings need not give equal bits:\n{}",
        crate::compute::describe(&groups, 3)
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
}
