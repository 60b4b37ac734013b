//! What every stage is, as a trait the compiler checks: its settings, its summary, its run
//! and its console line.

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use deltarl_schemas::{Stage, StageSummary};

use super::env::Env;
use super::ran::Ran;
use crate::config::Resolved;

/// One stage: its settings, what it records, how it runs and what it prints.
pub trait Contract {
    /// The stage.
    const STAGE: Stage;
    /// The part of the configuration the stage uses; its serialisation is the stage's hash.
    type Settings: Serialize + Clone;
    /// What its manifest records.
    type Summary: StageSummary;
    /// The stage's settings under this configuration, as it was resolved.
    fn settings(cfg: &Resolved) -> &Self::Settings;
    /// Files the stage reads besides the outputs of its upstream stages and its policy.
    fn extra_inputs(_: &Self::Settings, _: &Env) -> Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }
    /// Runs the stage; `None` on a process that shared the work but does not write.
    fn run(env: &Env, s: &Self::Settings) -> Result<Option<Ran<Self::Summary>>>;
    /// The stage's part of the console line.
    fn line(s: &Self::Summary) -> String;
}
