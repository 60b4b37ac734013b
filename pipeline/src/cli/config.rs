use std::path::PathBuf;

use anyhow::{Context, Result};
use deltarl_coeffs::Estimator;

use crate::config::{ByAlgorithm, CheckpointOptions, Engine, EstimatorKind, Resolved, VllmOptions};

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
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Command::Show { config, sets } = self.command;
        let r = Resolved::load_with(&config, &sets)?;
        // The keys whose default comes from `algorithm`, written out as resolved.
        let mut o = r.opts.clone();
        o.score.advantage = ByAlgorithm::set(r.advantage);
        o.score.overlong_penalty = ByAlgorithm::set(r.overlong_penalty);
        o.update.aggregation = ByAlgorithm::set(r.aggregation);
        o.update.eps_high = ByAlgorithm::set(r.eps_high);
        o.coeffs.estimator = ByAlgorithm::set(match r.estimator {
            Estimator::Uniform => EstimatorKind::Uniform,
            Estimator::TopEntropy { .. } => EstimatorKind::TopEntropy,
            Estimator::Delta(_) => EstimatorKind::Delta,
            Estimator::OracleTokens { .. } => EstimatorKind::OracleTokens,
        });
        // Keys whose serialisation is skipped at their default (so that runs made before
        // they existed keep their hashes) are written out here too: every key is shown.
        let mut v = toml::Value::try_from(&o).context("cannot serialise the configuration")?;
        let defaults = [
            (
                "rollout",
                "engine",
                toml::Value::try_from(Engine::default())?,
            ),
            (
                "rollout",
                "vllm",
                toml::Value::try_from(VllmOptions::default())?,
            ),
            ("coeffs", "oracle_value", toml::Value::Float(0.0)),
        ];
        for (section, key, value) in defaults {
            if let Some(t) = v.get_mut(section).and_then(toml::Value::as_table_mut) {
                t.entry(key).or_insert(value);
            }
        }
        if let Some(t) = v.as_table_mut() {
            t.entry("checkpoint")
                .or_insert(toml::Value::try_from(CheckpointOptions::default())?);
        }
        let text = toml::to_string_pretty(&v).context("cannot serialise the configuration")?;
        crate::cli::stdout::print_stdout(&format!(
            "# {} resolved (hash {}); every key set.\n{text}",
            config.display(),
            r.hash()
        ))
    }
}
