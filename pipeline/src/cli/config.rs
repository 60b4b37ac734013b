use std::path::PathBuf;

use crate::config::ranges;
use crate::config::Resolved;
use anyhow::{Context, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the resolved configuration with every default filled in (usable as a config).
    Show {
        /// Configuration file.
        #[arg(long, default_value = "configs/tiny-arith.toml")]
        config: PathBuf,
        /// Change one key (repeatable), as `iterate --set` does.
        #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Print the range of every numeric key (what the configuration check accepts), as a
    /// Markdown table.
    Ranges,
}

impl Args {
    pub fn run(self) -> Result<()> {
        match self.command {
            Command::Show { config, sets } => {
                let r = Resolved::load_with(&config, &sets)?;
                let text = toml::to_string_pretty(&r.shown()?)
                    .context("cannot serialise the configuration")?;
                crate::cli::stdout::print_stdout(&format!(
                    "# {} resolved (hash {}); every key set.\n{text}",
                    config.display(),
                    r.hash()
                ))
            }
            Command::Ranges => {
                let mut text = String::from("| key | accepted | why |\n|---|---|---|\n");
                for r in ranges::all() {
                    text += &format!("| `{}` | {} | {} |\n", r.key, r.bound.describe(), r.why);
                }
                crate::cli::stdout::print_stdout(&text)
            }
        }
    }
}
