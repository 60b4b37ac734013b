//! One module per stage, each with the same shape:
//!
//! * `settings(&Resolved) -> Settings`: the part of the configuration the stage uses, and
//!   nothing else — the stage crate's own `Settings` (the rollout's are the `[data]` and
//!   `[rollout]` tables, see `rollout.rs`). Its serialisation is the stage's hash
//!   ([`hash`]), so a setting the stage reads is a setting that reruns it: none can be
//!   forgotten from a hand-kept list.
//! * `run(&Env, &Settings)`: read the inputs, run the stage crate's pure core, write through
//!   its Parquet shell (temporary name, renamed when complete).
//! * `summary(&serde_json::Value)`: the stage's part of the console line.
//!
//! This file only dispatches on [`Stage`], exhaustively; what every stage runs with is in
//! `env.rs` (its environment), `ran.rs` (its result) and `temp_folder.rs`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;

use deltarl_schemas::Stage;

use crate::config::Resolved;

mod env;
mod ran;
mod temp_folder;

pub mod coeffs;
pub mod eval;
pub mod features;
pub mod rollout;
pub mod score;
pub mod update;
pub mod warmstart;

pub use env::{load_policy, policy_before, Env};
pub use ran::{num, Ran};
pub use temp_folder::TempFolder;

fn hash_of<T: Serialize>(stage: Stage, settings: &T) -> Result<String> {
    let json = serde_json::to_string(settings)
        .with_context(|| format!("cannot serialise the settings of stage {stage}"))?;
    Ok(deltarl_schemas::sha256_hex(
        format!("{}:{json}", stage.name()).as_bytes(),
    ))
}

/// A stage's settings under this configuration, as JSON (recorded in its manifest, so a
/// later configuration can be compared key by key).
pub fn settings_json(stage: Stage, cfg: &Resolved) -> Result<serde_json::Value> {
    let value = match stage {
        Stage::Warmstart => serde_json::to_value(warmstart::settings(cfg)),
        Stage::Rollout => serde_json::to_value(rollout::settings(cfg)),
        Stage::Score => serde_json::to_value(score::settings(cfg)),
        Stage::Features => serde_json::to_value(features::settings(cfg)),
        Stage::Coeffs => serde_json::to_value(coeffs::settings(cfg)?),
        Stage::Update => serde_json::to_value(update::settings(cfg)),
        Stage::Eval => serde_json::to_value(eval::settings(cfg)),
    };
    value.with_context(|| format!("cannot serialise the settings of stage {stage}"))
}

/// The hash of a stage's settings under this configuration.
pub fn hash(stage: Stage, cfg: &Resolved) -> Result<String> {
    match stage {
        Stage::Warmstart => hash_of(stage, &warmstart::settings(cfg)),
        Stage::Rollout => hash_of(stage, &rollout::settings(cfg)),
        Stage::Score => hash_of(stage, &score::settings(cfg)),
        Stage::Features => hash_of(stage, &features::settings(cfg)),
        Stage::Coeffs => hash_of(stage, &coeffs::settings(cfg)?),
        Stage::Update => hash_of(stage, &update::settings(cfg)),
        Stage::Eval => hash_of(stage, &eval::settings(cfg)),
    }
}

/// Whether all processes share the stage (rank 0 alone runs the others while the rest
/// wait): the rollout (with vLLM each rank serves its share of the prompts from a server of
/// its own), the features pass and the update.
pub fn shared(stage: Stage) -> bool {
    match stage {
        Stage::Rollout | Stage::Features | Stage::Update => true,
        Stage::Warmstart | Stage::Score | Stage::Coeffs | Stage::Eval => false,
    }
}

/// Runs a stage with its settings from this configuration.
pub fn run(stage: Stage, cfg: &Resolved, env: &Env) -> Result<Ran> {
    match stage {
        Stage::Warmstart => warmstart::run(env, &warmstart::settings(cfg)),
        Stage::Rollout => rollout::run(env, &rollout::settings(cfg)),
        Stage::Score => score::run(env, &score::settings(cfg)),
        Stage::Features => features::run(env, &features::settings(cfg)),
        Stage::Coeffs => coeffs::run(env, &coeffs::settings(cfg)?),
        Stage::Update => update::run(env, &update::settings(cfg)),
        Stage::Eval => eval::run(env, &eval::settings(cfg)),
    }
}

/// Input files a stage reads besides the outputs of its upstream stages and its policy.
pub fn extra_inputs(stage: Stage, cfg: &Resolved, env: &Env) -> Result<Vec<PathBuf>> {
    Ok(match stage {
        Stage::Rollout => rollout::settings(cfg).data_file().into_iter().collect(),
        Stage::Update => update::optimizer_state(env)?.into_iter().collect(),
        Stage::Eval => eval::settings(cfg).files(),
        Stage::Warmstart | Stage::Score | Stage::Features | Stage::Coeffs => Vec::new(),
    })
}

/// The stage's part of the console line, from its manifest summary.
pub fn summary(stage: Stage, s: &serde_json::Value) -> String {
    match stage {
        Stage::Warmstart => warmstart::summary(s),
        Stage::Rollout => rollout::summary(s),
        Stage::Score => score::summary(s),
        Stage::Features => features::summary(s),
        Stage::Coeffs => coeffs::summary(s),
        Stage::Update => update::summary(s),
        Stage::Eval => eval::summary(s),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    fn config(edit: impl FnOnce(&mut crate::config::Options)) -> Resolved {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/tiny-arith.toml");
        let mut opts = crate::config::Options::load(&path).unwrap();
        edit(&mut opts);
        Resolved::new(opts, &path).unwrap()
    }

    /// The stages whose hash differs between the default config and an edited one.
    fn changed(edit: impl FnOnce(&mut crate::config::Options)) -> Vec<Stage> {
        let (a, b) = (config(|_| {}), config(edit));
        Stage::ALL
            .into_iter()
            .filter(|&s| hash(s, &a).unwrap() != hash(s, &b).unwrap())
            .collect()
    }

    #[test]
    fn a_temporary_folder_is_removed_on_error_paths_and_renamed_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = {
            let t = TempFolder::new(dir.path(), "policy").unwrap();
            std::fs::write(t.path().join("x"), b"1").unwrap();
            t.path().to_path_buf()
            // Dropped without a commit, as when a save fails half-way.
        };
        assert!(!path.exists());
        let dest = dir.path().join("policy");
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("old"), b"0").unwrap();
        let t = TempFolder::new(dir.path(), "policy").unwrap();
        std::fs::write(t.path().join("x"), b"1").unwrap();
        t.commit(&dest).unwrap();
        assert!(dest.join("x").exists() && !dest.join("old").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_setting_reruns_exactly_the_stages_that_read_it() {
        use Stage::*;
        assert_eq!(changed(|_| {}), vec![]);
        assert_eq!(changed(|o| o.warmstart.steps += 1), vec![Warmstart]);
        assert_eq!(
            changed(|o| o.model.tiny.intermediate_size += 8),
            vec![Warmstart]
        );
        assert_eq!(changed(|o| o.update.entropy_coef = 0.01), vec![Update]);
        assert_eq!(changed(|o| o.coeffs.lam_max = 1.3), vec![Coeffs]);
        assert_eq!(changed(|o| o.score.overlong_factor = 0.5), vec![Score]);
        assert_eq!(changed(|o| o.features.chunk_rows += 1), vec![Features]);
        assert_eq!(changed(|o| o.eval.problems += 1), vec![Eval]);
        // `every` decides when eval runs, not what it computes.
        assert_eq!(changed(|o| o.eval.every += 1), vec![]);
        assert_eq!(changed(|o| o.rollout.top_k = 5), vec![Rollout]);
        // The other built-in task: another base model (vocabulary, solutions), other
        // prompts' source, another held-out benchmark.
        assert_eq!(
            changed(|o| o.data.source = "tiny-steps".into()),
            vec![Warmstart, Rollout, Eval]
        );
        // The rollout temperature is also the one log-probs are measured at.
        assert_eq!(
            changed(|o| o.rollout.temperature = 0.7),
            vec![Rollout, Features, Update]
        );
        // The maximum length bounds sampling and sets the overlong penalty.
        let max_len = changed(|o| o.rollout.max_new_tokens += 1);
        assert!(
            max_len.contains(&Rollout) && max_len.contains(&Score),
            "{max_len:?}"
        );
        // The seed reaches every stage that draws random numbers or samples.
        let seed = changed(|o| o.seed += 1);
        for s in [Warmstart, Rollout, Features, Update, Eval] {
            assert!(seed.contains(&s), "{s} ignores the seed: {seed:?}");
        }
        assert!(
            !seed.contains(&Score) && !seed.contains(&Coeffs),
            "{seed:?}"
        );
    }
}
