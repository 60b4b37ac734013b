//! What `strata` reads of one comparison (one warm-started base): the base's accuracy and
//! each run's final accuracy, in both readouts, from the files `compare` wrote.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use deltarl_schemas::{read_path, EvalRow, Stage};

use crate::cli::compare::outcome::{run_name, runs_of};
use crate::cli::compare::tables::accuracy;

/// Which held-out readout of the final policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ReadoutKind {
    /// The final policies sampled as the rollout samples (`compare`'s second table).
    Sampled,
    /// The runs' own eval stage (greedy in the shipped configs).
    Greedy,
}

impl ReadoutKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            ReadoutKind::Sampled => "sampled",
            ReadoutKind::Greedy => "greedy",
        }
    }

    pub(super) fn other(self) -> Self {
        match self {
            ReadoutKind::Sampled => ReadoutKind::Greedy,
            ReadoutKind::Greedy => ReadoutKind::Sampled,
        }
    }

    pub(super) fn base_file(self) -> &'static str {
        match self {
            ReadoutKind::Sampled => "base-sampled.parquet",
            ReadoutKind::Greedy => "base-eval.parquet",
        }
    }
}

/// One base's comparison: its base accuracy and each (arm, seed)'s final accuracy, per
/// readout.
pub(super) struct Stratum {
    pub(super) name: String,
    pub(super) base: BTreeMap<&'static str, f64>,
    finals: BTreeMap<(&'static str, String, u64), f64>,
}

fn read_accuracy(path: &Path) -> Result<f64> {
    let rows = read_path::<EvalRow>(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .0;
    anyhow::ensure!(!rows.is_empty(), "{}: no graded answers", path.display());
    Ok(accuracy(&rows))
}

/// Each run's final iteration, from the comparison's `compare.csv` (variant,seed,iter,...).
fn final_iters(folder: &Path) -> Result<BTreeMap<(String, u64), u32>> {
    let path = folder.join("compare.csv");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut out: BTreeMap<(String, u64), u32> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let parsed = match f.as_slice() {
            [v, s, it, _] => s
                .parse::<u64>()
                .ok()
                .zip(it.parse::<u32>().ok())
                .map(|x| (v, x)),
            _ => None,
        };
        let Some((v, (seed, iter))) = parsed else {
            anyhow::bail!(
                "{} line {}: not variant,seed,iter,accuracy: {line:?}",
                path.display(),
                i + 1
            );
        };
        let e = out.entry((v.to_string(), seed)).or_default();
        *e = (*e).max(iter);
    }
    Ok(out)
}

impl Stratum {
    pub(super) fn read(runs: &Path, name: &str) -> Result<Self> {
        let folder = runs.join(name);
        anyhow::ensure!(
            folder.is_dir(),
            "--comparison {name}: no comparison folder {} (`compare --name {name}` writes it)",
            folder.display()
        );
        let iters = final_iters(&folder)?;
        let mut base = BTreeMap::new();
        for kind in [ReadoutKind::Sampled, ReadoutKind::Greedy] {
            let path = folder.join(kind.base_file());
            let acc = read_accuracy(&path).with_context(|| {
                format!(
                    "the base's {} readout of comparison {name} (`compare` writes it; rerun \
                     the comparison's command to add it)",
                    kind.name()
                )
            })?;
            base.insert(kind.name(), acc);
        }
        let mut finals = BTreeMap::new();
        for (arm, seed) in runs_of(&folder)? {
            let run = run_name(name, &arm, seed);
            let iter = *iters.get(&(arm.clone(), seed)).with_context(|| {
                format!(
                    "{}: no evaluation of {run}",
                    folder.join("compare.csv").display()
                )
            })?;
            let dir = crate::rundir::RunDir::new(runs, &run)?;
            let greedy = read_accuracy(&dir.output(iter, Stage::Eval))?;
            let sampled = read_accuracy(&folder.join("sampled").join(format!("{run}.parquet")))?;
            finals.insert(("greedy", arm.clone(), seed), greedy);
            finals.insert(("sampled", arm, seed), sampled);
        }
        Ok(Stratum {
            name: name.to_string(),
            base,
            finals,
        })
    }

    /// The arms, in name order, each once.
    pub(super) fn arms(&self) -> Vec<String> {
        let arms: std::collections::BTreeSet<&String> =
            self.finals.keys().map(|(_, arm, _)| arm).collect();
        arms.into_iter().cloned().collect()
    }

    /// Per seed, `arm` − `baseline` in `kind`'s readout; an error when a seed of one is
    /// missing from the other.
    pub(super) fn differences(
        &self,
        kind: ReadoutKind,
        arm: &str,
        baseline: &str,
    ) -> Result<Vec<f64>> {
        let seeds = |a: &str| -> Vec<u64> {
            self.finals
                .keys()
                .filter(|(k, x, _)| *k == kind.name() && x == a)
                .map(|(_, _, s)| *s)
                .collect()
        };
        let (sa, sb) = (seeds(arm), seeds(baseline));
        anyhow::ensure!(
            sa == sb,
            "comparison {}: {arm} ran seeds {sa:?}, {baseline} {sb:?}; arms are paired by seed",
            self.name
        );
        Ok(sa
            .iter()
            .map(|&s| {
                self.finals[&(kind.name(), arm.to_string(), s)]
                    - self.finals[&(kind.name(), baseline.to_string(), s)]
            })
            .collect())
    }

    /// The baseline's mean gain over the base in `kind`'s readout, and its seeds.
    pub(super) fn gain(&self, kind: ReadoutKind, baseline: &str) -> (f64, usize) {
        let accs: Vec<f64> = self
            .finals
            .iter()
            .filter(|((k, a, _), _)| *k == kind.name() && a == baseline)
            .map(|(_, v)| *v)
            .collect();
        let n = accs.len();
        (
            accs.iter().sum::<f64>() / n.max(1) as f64 - self.base[kind.name()],
            n,
        )
    }
}
