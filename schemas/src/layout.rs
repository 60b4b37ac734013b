//! The stages of a run and the run-directory layout, shared by the pipeline that writes
//! runs and the report tool that reads them:
//!
//! ```text
//! runs/<run>/base/                     warm-started policy (stage 0), base/manifest.json
//! runs/<run>/iter-0001/<stage file>    one Parquet table per stage
//! runs/<run>/iter-0001/manifest/<stage>.json        written last: the stage is complete
//! runs/<run>/iter-0001/manifest/<stage>.stale.json  an upstream stage was rerun
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A stage of a run. `Warmstart` is stage 0 and runs once per run (it builds `base/`);
/// the others run once per iteration, in the order of [`Stage::iteration`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Supervised warm start of the built-in tiny model (`base/`).
    Warmstart,
    /// Sample G responses per prompt with the previous policy.
    Rollout,
    /// Verify answers, rewards, group advantages.
    Score,
    /// Per-token gradient proxies (teacher-forced pass of the previous policy).
    Features,
    /// DelTA (or uniform / top-entropy) token coefficients.
    Coeffs,
    /// The reweighted clipped policy-gradient step: the new policy.
    Update,
    /// Held-out accuracy of the new policy.
    Eval,
}

/// Which policy a stage runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyUse {
    /// The policy that samples this iteration: that of the previous one, or the base.
    Previous,
    /// The policy this iteration's update produced.
    This,
}

impl Stage {
    /// Every stage, in dependency order.
    pub const ALL: [Stage; 7] = [
        Stage::Warmstart,
        Stage::Rollout,
        Stage::Score,
        Stage::Features,
        Stage::Coeffs,
        Stage::Update,
        Stage::Eval,
    ];

    /// The stages of one iteration, in order: all but the warm start.
    pub fn iteration() -> &'static [Stage] {
        &Stage::ALL[1..]
    }

    /// The name used on the command line, in file metadata, manifests and seeds.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Warmstart => "warmstart",
            Stage::Rollout => "rollout",
            Stage::Score => "score",
            Stage::Features => "features",
            Stage::Coeffs => "coeffs",
            Stage::Update => "update",
            Stage::Eval => "eval",
        }
    }

    /// The stage's main output, relative to its folder ([`stage_dir`]).
    pub const fn output(self) -> &'static str {
        match self {
            Stage::Warmstart => "model.safetensors",
            Stage::Rollout => "rollouts.parquet",
            Stage::Score => "scores.parquet",
            Stage::Features => "features.parquet",
            Stage::Coeffs => "coeffs.parquet",
            Stage::Update => "update.parquet",
            Stage::Eval => "eval.parquet",
        }
    }

    /// The stages of the same iteration whose output files this stage reads.
    pub fn upstream(self) -> &'static [Stage] {
        match self {
            Stage::Warmstart | Stage::Rollout | Stage::Eval => &[],
            Stage::Score | Stage::Features => &[Stage::Rollout],
            Stage::Coeffs => &[Stage::Rollout, Stage::Score, Stage::Features],
            Stage::Update => &[Stage::Rollout, Stage::Score, Stage::Features, Stage::Coeffs],
        }
    }

    /// The policy the stage runs, if any.
    pub fn policy(self) -> Option<PolicyUse> {
        match self {
            Stage::Warmstart | Stage::Score | Stage::Coeffs => None,
            Stage::Rollout | Stage::Features | Stage::Update => Some(PolicyUse::Previous),
            Stage::Eval => Some(PolicyUse::This),
        }
    }

    /// The stages of the same iteration after this one.
    pub fn downstream(self) -> &'static [Stage] {
        match Stage::iteration().iter().position(|s| *s == self) {
            Some(i) => &Stage::iteration()[i + 1..],
            None => &[],
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// `iter-0007` for iteration 7.
pub fn iter_dir(run: &Path, iter: u32) -> PathBuf {
    run.join(format!("iter-{iter:04}"))
}

/// `base/`: the warm-started policy.
pub fn base_dir(run: &Path) -> PathBuf {
    run.join("base")
}

/// The folder a stage writes into: `base/` for the warm start, else the iteration's.
pub fn stage_dir(run: &Path, iter: u32, stage: Stage) -> PathBuf {
    match stage {
        Stage::Warmstart => base_dir(run),
        _ => iter_dir(run, iter),
    }
}

/// The coefficients the features stage estimated where the vectors were, when
/// features.parquet does not keep them all (`Persist`): the coeffs stage's table, which
/// that stage takes over. Relative to the iteration's folder.
pub const IN_STAGE_COEFFS: &str = "features-coeffs.parquet";

/// Where iteration `iter`'s features stage writes the coefficients it estimated
/// ([`IN_STAGE_COEFFS`]).
pub fn in_stage_coeffs_path(run: &Path, iter: u32) -> PathBuf {
    iter_dir(run, iter).join(IN_STAGE_COEFFS)
}

/// A stage's main output file.
pub fn output_path(run: &Path, iter: u32, stage: Stage) -> PathBuf {
    stage_dir(run, iter, stage).join(stage.output())
}

/// Where a stage's manifest lives.
pub fn manifest_path(run: &Path, iter: u32, stage: Stage) -> PathBuf {
    match stage {
        Stage::Warmstart => base_dir(run).join("manifest.json"),
        _ => iter_dir(run, iter)
            .join("manifest")
            .join(format!("{}.json", stage.name())),
    }
}

/// Where a stage's stale marker lives.
pub fn stale_path(run: &Path, iter: u32, stage: Stage) -> PathBuf {
    match stage {
        Stage::Warmstart => base_dir(run).join("manifest.stale.json"),
        _ => iter_dir(run, iter)
            .join("manifest")
            .join(format!("{}.stale.json", stage.name())),
    }
}

/// Iterations of a run that have a directory, ascending (none if the run does not exist).
pub fn iterations(run: &Path) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(run)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("iter-"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    out.sort_unstable();
    out
}

/// The longest run name (file systems allow 255 bytes a component; temporary names add a
/// suffix).
pub const MAX_RUN_NAME: usize = 200;

/// Checks a run name: one path component, no `..`, nothing hidden, not too long.
pub fn check_run_name(name: &str) -> std::result::Result<(), String> {
    if name.len() > MAX_RUN_NAME {
        return Err(format!(
            "run name {:?}... is {} bytes long; at most {MAX_RUN_NAME}",
            name.chars().take(24).collect::<String>(),
            name.len()
        ));
    }
    if name.is_empty()
        || name.contains('/')
        || name.contains('\\')
        || name.contains("..")
        || name.starts_with('.')
    {
        return Err(format!(
            "run name {name:?} must be a plain name (no path separators, no `..`, not hidden)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_names() {
        let run = Path::new("runs/r");
        assert_eq!(iter_dir(run, 7), Path::new("runs/r/iter-0007"));
        assert_eq!(
            manifest_path(run, 12, Stage::Score),
            Path::new("runs/r/iter-0012/manifest/score.json")
        );
        assert_eq!(
            manifest_path(run, 3, Stage::Warmstart),
            Path::new("runs/r/base/manifest.json")
        );
        assert_eq!(
            output_path(run, 2, Stage::Coeffs),
            Path::new("runs/r/iter-0002/coeffs.parquet")
        );
        assert!(check_run_name("a-b_1").is_ok());
        for bad in ["", "a/b", "..", "x..y", ".hidden", "a\\b"] {
            assert!(check_run_name(bad).is_err(), "{bad}");
        }
        let long = "r".repeat(MAX_RUN_NAME + 1);
        assert!(check_run_name(&long).is_err_and(|e| e.contains("201 bytes")));
        assert!(check_run_name(&long[1..]).is_ok());
    }

    #[test]
    fn stages_read_only_what_came_before() {
        for s in Stage::ALL {
            for u in s.upstream() {
                assert!(u < &s, "{s} reads {u}");
            }
            assert!(s.downstream().iter().all(|d| d > &s));
        }
        assert_eq!(Stage::Coeffs.downstream(), &[Stage::Update, Stage::Eval]);
        assert!(Stage::Warmstart.downstream().is_empty());
        // Names round-trip through serde as they appear in manifests.
        for s in Stage::ALL {
            let json = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", s.name()));
        }
    }

    #[test]
    fn iterations_are_sorted_and_filtered() {
        let dir = std::env::temp_dir().join(format!("deltarl-layout-{}", std::process::id()));
        for d in ["iter-0010", "iter-0002", "base", "iter-x"] {
            std::fs::create_dir_all(dir.join(d)).ok();
        }
        assert_eq!(iterations(&dir), vec![2, 10]);
        assert!(iterations(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}
