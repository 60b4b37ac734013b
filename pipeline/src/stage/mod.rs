//! One module per stage, each implementing the stage's [`Contract`]:
//!
//! * `Settings`: the part of the configuration the stage uses, and nothing else — the stage
//!   crate's own (the rollout's are the `[data]` and `[rollout]` tables, see `rollout.rs`).
//!   Their serialisation is the stage's hash, so a setting the stage reads is a setting that
//!   reruns it: none can be forgotten from a hand-kept list.
//! * `Summary`: what its manifest records, a struct of `deltarl_schemas::summary`: the
//!   console line and the report read it back as that type; `metrics.jsonl` and
//!   TensorBoard tag each of its numbers with its field's path.
//! * `run`: read the inputs, run the stage crate's pure core, write through its Parquet
//!   shell (temporary name, renamed when complete).
//! * `line`: the stage's part of the console line.
//!
//! The list of contracts below is the one place a stage is tied to its module; the
//! dispatch on [`Stage`] is generated from it and is exhaustive. What every stage runs with
//! is in `env.rs` (its environment), `ran.rs` (its result) and `temp_folder.rs`.

use std::path::PathBuf;

use anyhow::{Context, Result};

use deltarl_schemas::{Manifest, Stage, StageSummary};

use crate::config::Resolved;

mod contract;
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

pub use contract::Contract;
pub use env::{load_policy, policy_before, Env};
pub use ran::Ran;
pub use temp_folder::TempFolder;

/// A stage's settings under one configuration, resolved once: the typed settings it runs
/// with, their JSON (recorded in its manifest, so a later configuration can be compared key
/// by key) and their hash.
pub struct Prepared {
    pub json: serde_json::Value,
    pub hash: String,
    typed: Typed,
}

impl Prepared {
    fn new<C: Contract>(cfg: &Resolved, wrap: fn(C::Settings) -> Typed) -> Result<Self> {
        let stage = C::STAGE;
        let settings = C::settings(cfg).clone();
        let failed = || format!("cannot serialise the settings of stage {stage}");
        // The hash is of the settings in their declared field order, as it always was.
        let text = serde_json::to_string(&settings).with_context(failed)?;
        let hash = deltarl_schemas::sha256_hex(format!("{}:{text}", stage.name()).as_bytes());
        let json = serde_json::to_value(&settings).with_context(failed)?;
        Ok(Prepared {
            json,
            hash,
            typed: wrap(settings),
        })
    }
}

/// A stage's typed result, its summary turned into the manifest's JSON.
fn recorded<S: StageSummary>(ran: Option<Ran<S>>) -> Result<Option<Ran<serde_json::Value>>> {
    let Some(r) = ran else {
        return Ok(None);
    };
    Ok(Some(Ran {
        rows: r.rows,
        summary: serde_json::to_value(&r.summary)
            .with_context(|| format!("cannot serialise the summary of stage {}", S::STAGE))?,
        outputs: r.outputs,
        measured: r.measured,
    }))
}

/// Every stage's contract, each named once: the typed settings, [`prepare`], the dispatch
/// of [`Prepared`] and [`line`] are generated from this list.
macro_rules! contracts {
    ($($stage:ident => $contract:ty),* $(,)?) => {
        /// A stage's settings, typed.
        enum Typed {
            $($stage(<$contract as Contract>::Settings)),*
        }

        /// A stage's settings under this configuration.
        pub fn prepare(stage: Stage, cfg: &Resolved) -> Result<Prepared> {
            match stage {
                $(Stage::$stage => Prepared::new::<$contract>(cfg, Typed::$stage)),*
            }
        }

        impl Prepared {
            /// Files the stage reads besides its upstream stages' outputs and its policy.
            pub fn extra_inputs(&self, env: &Env) -> Result<Vec<PathBuf>> {
                match &self.typed {
                    $(Typed::$stage(s) => <$contract>::extra_inputs(s, env)),*
                }
            }

            /// Runs the stage with these settings.
            pub fn run(&self, env: &Env) -> Result<Option<Ran<serde_json::Value>>> {
                match &self.typed {
                    $(Typed::$stage(s) => recorded(<$contract>::run(env, s)?)),*
                }
            }
        }

        /// The stage's part of the console line, from its manifest's summary.
        pub fn line(m: &Manifest) -> Result<String> {
            Ok(match m.stage {
                $(Stage::$stage => <$contract>::line(&m.summary_of()?)),*
            })
        }

        /// (stage, the contract's stage, its summary's stage), for the test that they agree.
        #[cfg(test)]
        fn contract_stages() -> Vec<(Stage, Stage, Stage)> {
            vec![$((
                Stage::$stage,
                <$contract>::STAGE,
                <<$contract as Contract>::Summary as StageSummary>::STAGE,
            )),*]
        }
    };
}

contracts! {
    Warmstart => warmstart::Warmstart,
    Rollout => rollout::Rollout,
    Score => score::Score,
    Features => features::Features,
    Coeffs => coeffs::Coeffs,
    Update => update::Update,
    Eval => eval::Eval,
}

/// Whether all processes share the stage (rank 0 alone runs the others while the rest
/// wait): the rollout (with vLLM each rank serves its share of the prompts from a server of
/// its own), the features pass, the update and the evaluation (each rank its share of
/// each benchmark's sessions, as the rollout shares its own).
pub fn shared(stage: Stage) -> bool {
    match stage {
        Stage::Rollout | Stage::Features | Stage::Update | Stage::Eval => true,
        Stage::Warmstart | Stage::Score | Stage::Coeffs => false,
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
            .filter(|&s| prepare(s, &a).unwrap().hash != prepare(s, &b).unwrap().hash)
            .collect()
    }

    #[test]
    fn each_contract_is_its_stage_and_records_its_stage_summary() {
        let all = contract_stages();
        assert_eq!(all.len(), Stage::ALL.len());
        for (stage, contract, summary) in all {
            assert_eq!((contract, summary), (stage, stage));
        }
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
        // Sharding (ZeRO-1, ZeRO-2) is how the update computes its step, not what it is;
        // the update's settings carry it.
        let sharded = |o: &mut crate::config::Options| {
            o.update.shard_optimizer = true;
            o.update.shard_gradients = true;
        };
        assert_eq!(changed(sharded), vec![]);
        assert_eq!(
            config(sharded).stages.update.sharding,
            deltarl_optim::Sharding::Gradients
        );
        assert_eq!(changed(|o| o.rollout.top_k = 5), vec![Rollout]);
        // The other built-in task: another base model (vocabulary, solutions), other
        // prompts' source, another held-out benchmark.
        assert_eq!(
            changed(|o| o.data.source = deltarl_data::Source::parse("tiny-steps")),
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
