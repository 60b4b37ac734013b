use std::path::Path;

use anyhow::Result;
use deltarl_schemas::Stage;

use crate::context::Ctx;
use crate::runner::Runner;
use crate::rundir::StageState;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run name.
    #[arg(long)]
    run: String,
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
        let ctx = Ctx::open_existing(runs, &self.run)?;
        let runner = Runner::new(&ctx);
        println!(
            "run {}  base: {}",
            ctx.run.root.display(),
            cell(Stage::Warmstart, &runner.state(0, Stage::Warmstart)?)
        );
        for it in ctx.run.iterations() {
            let mut cells = Vec::new();
            for s in runner.stages_of(it) {
                cells.push(cell(s, &runner.state(it, s)?));
            }
            println!("iter-{it:04}  {}", cells.join(" | "));
        }
        Ok(())
    }
}
