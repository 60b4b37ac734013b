//! The run-directory layout (DESIGN.md 2.2), shared by the pipeline that writes runs and
//! the report tool that reads them:
//!
//! ```text
//! runs/<run>/base/                     warm-started policy
//! runs/<run>/iter-0001/<stage file>    one Parquet table per stage
//! runs/<run>/iter-0001/manifest/<stage>.json        written last: the stage is complete
//! runs/<run>/iter-0001/manifest/<stage>.stale.json  an upstream stage was rerun
//! ```

use std::path::{Path, PathBuf};

/// The stages of one iteration, in order.
pub const STAGES: [&str; 6] = ["rollout", "score", "features", "coeffs", "update", "eval"];

/// Output file of each stage (relative to the iteration directory); empty for unknown names.
pub fn stage_output(stage: &str) -> &'static str {
    match stage {
        "rollout" => "rollouts.parquet",
        "score" => "scores.parquet",
        "features" => "features.parquet",
        "coeffs" => "coeffs.parquet",
        "update" => "update.parquet",
        "eval" => "eval.parquet",
        _ => "",
    }
}

/// `iter-0007` for iteration 7.
pub fn iter_dir(run: &Path, iter: u32) -> PathBuf {
    run.join(format!("iter-{iter:04}"))
}

/// Where a stage's manifest lives.
pub fn manifest_path(run: &Path, iter: u32, stage: &str) -> PathBuf {
    iter_dir(run, iter)
        .join("manifest")
        .join(format!("{stage}.json"))
}

/// Where a stage's stale marker lives.
pub fn stale_path(run: &Path, iter: u32, stage: &str) -> PathBuf {
    iter_dir(run, iter)
        .join("manifest")
        .join(format!("{stage}.stale.json"))
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

/// Checks a run name: one path component, no `..`, nothing hidden.
pub fn check_run_name(name: &str) -> std::result::Result<(), String> {
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
            manifest_path(run, 12, "score"),
            Path::new("runs/r/iter-0012/manifest/score.json")
        );
        assert!(STAGES.iter().all(|s| !stage_output(s).is_empty()));
        assert_eq!(stage_output("nope"), "");
        assert!(check_run_name("a-b_1").is_ok());
        for bad in ["", "a/b", "..", "x..y", ".hidden", "a\\b"] {
            assert!(check_run_name(bad).is_err(), "{bad}");
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
