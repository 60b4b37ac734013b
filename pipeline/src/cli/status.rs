use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use deltarl_schemas::Stage;

use crate::context::Ctx;
use crate::rundir::StageState;
use crate::runner::Runner;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run name.
    #[arg(long)]
    run: String,
    /// Show what would rerun under this configuration instead of the run's own (the run's
    /// recorded configuration is left as it is).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Re-read every file to check its hash, instead of trusting the hash cache's size and
    /// modification-time stamps; exits with an error when a recorded file changed.
    #[arg(long)]
    verify: bool,
}

fn cell(stage: Stage, state: &StageState) -> String {
    match state {
        StageState::Done(m) => format!("{stage} done {:.1}s", m.seconds),
        StageState::Stale(why) => format!("{stage} stale ({why})"),
        StageState::Missing => format!("{stage} missing"),
        StageState::External(dir) => format!("{stage}: none (base {})", dir.display()),
    }
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let mut ctx = match &self.config {
            Some(config) => Ctx::open(config, runs, &self.run)?,
            None => Ctx::open_existing(runs, &self.run)?,
        };
        if self.verify {
            ctx.run.verify_every_file();
        }
        let runner = Runner::new(&ctx);
        let mut damaged = Vec::new();
        let mut computes = Vec::new();
        let mut look = |it: u32, s: Stage| -> Result<String> {
            let state = runner.state(it, s)?;
            match &state {
                StageState::Stale(why) if why.is_damage() => {
                    damaged.push(format!("{s} of iteration {it}: {why}"));
                }
                StageState::Done(m) => {
                    if let Some(c) = m.compute {
                        let place = match s {
                            Stage::Warmstart => "the base".to_string(),
                            _ => format!("{s} of iteration {it}"),
                        };
                        computes.push((place, c));
                    }
                }
                _ => {}
            }
            Ok(cell(s, &state))
        };
        let mut text = format!(
            "run {}  base: {}\n",
            ctx.run.root.display(),
            look(0, Stage::Warmstart)?
        );
        for it in ctx.run.iterations() {
            let mut cells = Vec::new();
            for s in runner.stages_of(it) {
                cells.push(look(it, s)?);
            }
            // The epoch the iteration's prompts came from, as its rollout recorded it.
            let epoch = match runner.state(it, Stage::Rollout)? {
                StageState::Done(m) => m
                    .summary_of::<deltarl_schemas::RolloutSummary>()
                    .ok()
                    .and_then(|s| s.epoch_line()),
                _ => None,
            };
            let epoch = epoch.map_or(String::new(), |e| format!("  [{e}]"));
            text += &format!("iter-{it:04}  {}{epoch}\n", cells.join(" | "));
        }
        // Byte-identical reruns need the compute the stage was recorded with: say when the
        // recorded stages, or they and a rerun from here, differ in it.
        computes.push(("a rerun here".to_string(), crate::compute::now(1)));
        if let Some(groups) = crate::compute::mixed(computes) {
            text += &format!(
                "note: computed with different thread counts or processes (a stage rerun with \
                 another one gives floats equal to round-off, not byte for byte; set \
                 `model.threads` to match):\n{}\n",
                crate::compute::describe(&groups, 4)
            );
        }
        crate::cli::stdout::print_stdout(&text)?;
        if self.verify && !damaged.is_empty() {
            bail!(
                "{} stage(s) have recorded files that changed since they were written \
                 (`iterate` reruns them): {}",
                damaged.len(),
                damaged.join("; ")
            );
        }
        Ok(())
    }
}
