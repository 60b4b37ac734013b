//! Which model a command that reads one (`generate`, `eval`) loads: a folder given as is,
//! or a policy of a run found under the runs directory (`--runs-dir`, `DELTARL_RUNS`), so
//! that these commands find a run wherever `iterate` put it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::rundir::RunDir;

#[derive(Debug, clap::Args)]
pub struct ModelArg {
    /// Hugging Face model folder.
    #[arg(long, required_unless_present = "run", conflicts_with = "run")]
    model: Option<PathBuf>,
    /// Instead of --model: a policy of this run (under the runs directory), the newest one
    /// on disk unless --iter says which.
    #[arg(long)]
    run: Option<String>,
    /// With --run: the policy iteration N's update wrote (0 = the warm-started base).
    #[arg(long, requires = "run")]
    iter: Option<u32>,
}

impl ModelArg {
    /// The model folder to load.
    pub fn folder(&self, runs: &Path) -> Result<PathBuf> {
        let Some(name) = &self.run else {
            return match &self.model {
                Some(m) => Ok(m.clone()),
                None => bail!("give --model or --run"),
            };
        };
        let run = RunDir::new(runs, name)?;
        if !run.root.is_dir() {
            bail!("no run {name} in {}", runs.display());
        }
        let policy = |n: u32| match n {
            0 => run.base(),
            n => run.policy_dir(n),
        };
        let folder = match self.iter {
            Some(n) => policy(n),
            // The newest policy written; the base when no update has finished.
            None => run
                .iterations()
                .into_iter()
                .rev()
                .map(policy)
                .find(|p| p.join("config.json").is_file())
                .unwrap_or_else(|| run.base()),
        };
        if !folder.join("config.json").is_file() {
            bail!(
                "{} holds no model (run {name}: its stage has not run, or was pruned)",
                folder.display()
            );
        }
        Ok(folder)
    }
}
