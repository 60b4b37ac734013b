use std::path::Path;

use anyhow::Result;

use crate::run::Ctx;
use crate::rundir::{StageState, STAGES};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run name.
    #[arg(long)]
    run: String,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        let ctx = Ctx::open_existing(runs, &self.run)?;
        let base = ctx.run.base().join("manifest.json");
        println!(
            "run {}  base: {}",
            ctx.run.root.display(),
            if base.exists() || ctx.cfg.opts.model.source != "tiny" {
                "done"
            } else {
                "missing"
            }
        );
        for it in ctx.run.iterations() {
            let mut cells = Vec::new();
            for s in STAGES {
                if s == "eval" && !ctx.stages_of(it).contains(&"eval") {
                    continue;
                }
                let cell = match ctx.state(it, s)? {
                    StageState::Done(m) => format!("{s} done {:.1}s", m.seconds),
                    StageState::Stale(why) => format!("{s} stale ({why})"),
                    StageState::Missing => format!("{s} missing"),
                };
                cells.push(cell);
            }
            println!("iter-{it:04}  {}", cells.join(" | "));
        }
        Ok(())
    }
}
