//! Configuration in two layers (as ruff does): TOML *options* ([`options`]), every field
//! documented and unknown keys rejected, resolved and validated once here into
//! [`Resolved`], with each stage's settings (the part of the configuration it uses, in the
//! stage crate's own type: [`stages`]), and that part alone makes up the stage's hash.
//!
//! A file may start with `extends = "other.toml"` (relative to itself) and then state only
//! what differs; tables are merged key by key. Keys whose default depends on the algorithm
//! (`aggregation`, `eps_high`, `advantage`, `estimator`, `overlong_penalty`) take it from
//! `algorithm` unless set.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use deltarl_coeffs::{DeltaSettings, Estimator};
use deltarl_update::Aggregation;

mod by_algorithm;
mod eval;
mod fipo;
mod ktae;
mod limits;
mod locate;
mod options;
pub mod overrides;
pub mod ranges;
mod stages;
mod update;
pub use by_algorithm::ByAlgorithm;
pub use eval::EvalOptions;
pub use limits::template_arg;
pub use options::*;
pub use stages::{FeaturesSettings, Stages};

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Reads a TOML file, following `extends`; `chain` holds the files that extend it, so a
/// file that extends itself (directly or through others) is named as a cycle.
fn read_table(path: &Path, chain: &mut Vec<PathBuf>) -> Result<toml::Table> {
    let here = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if chain.contains(&here) {
        let names: Vec<String> = chain
            .iter()
            .chain(std::iter::once(&here))
            .map(|p| p.display().to_string())
            .collect();
        bail!("`extends` cycle: {}", names.join(" -> "));
    }
    if chain.len() > 8 {
        bail!("{}: `extends` chain deeper than 8", path.display());
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: malformed TOML", path.display()))?;
    if let Some(parent) = table.remove("extends") {
        let Some(rel) = parent.as_str() else {
            bail!("{}: `extends` must be a string", path.display());
        };
        let ppath = path.parent().unwrap_or(Path::new(".")).join(rel);
        chain.push(here);
        let mut base = read_table(&ppath, chain)
            .with_context(|| format!("{}: `extends` = {rel:?}", path.display()))?;
        chain.pop();
        merge(&mut base, table);
        table = base;
    }
    Ok(table)
}

/// Where a key's value came from, for errors: the `--set` that gave it, else the file.
struct Origin<'a> {
    path: &'a Path,
    sets: &'a [String],
}

impl Origin<'_> {
    /// The last `--set` of `key` or of a key under it: `--set optim.lr=1` makes a section
    /// `optim` that no file has, and serde names the unknown section, not the key.
    fn of(&self, key: &str) -> String {
        let under = |k: &str| k == key || k.strip_prefix(key).is_some_and(|r| r.starts_with('.'));
        self.sets
            .iter()
            .rev()
            .find(|s| s.split_once('=').is_some_and(|(k, _)| under(k.trim())))
            .map_or_else(|| self.path.display().to_string(), |s| format!("--set {s}"))
    }
}

/// Refuses NaN and infinite floats anywhere in the configuration, naming the key: no
/// setting of ours means anything when it is not finite, and a NaN slips through every
/// range check written as a comparison.
fn check_finite(table: &toml::Table, prefix: &str, origin: &Origin<'_>) -> Result<()> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Float(x) if !x.is_finite() => {
                bail!(
                    "{}: config key `{key}` = {x}: must be finite",
                    origin.of(&key)
                )
            }
            toml::Value::Table(t) => check_finite(t, &key, origin)?,
            _ => {}
        }
    }
    Ok(())
}

impl Options {
    /// Loads and checks a configuration file (unknown keys are errors naming the key).
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, &[])
    }

    /// Loads a configuration file with `--set section.key=value` changes applied first,
    /// so they are checked exactly like the file.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<Self> {
        let path = &locate::locate(path, locate::home().as_deref());
        let mut table = read_table(path, &mut Vec::new())?;
        for set in sets {
            overrides::apply(&mut table, set)?;
        }
        let origin = Origin { path, sets };
        check_finite(&table, "", &origin)?;
        // serde_path_to_error keeps the key a type error is about (`rollout.top_k`), which
        // the merged table's own errors no longer carry.
        let options: Options = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = e.path().to_string();
                let message = e.into_inner().message().to_string();
                if key == "." {
                    anyhow::anyhow!("{}: {message}", path.display())
                } else {
                    anyhow::anyhow!("{}: config key `{key}`: {message}", origin.of(&key))
                }
            })?;
        ranges::check(&options).map_err(|e| anyhow::anyhow!("{}: {e}", origin.of(e.key)))?;
        Ok(options)
    }
}

/// Sets `path` in `table` to `value` unless it is there, creating tables on the way.
fn insert_missing(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    match path {
        [] => {}
        [last] => {
            table.entry(*last).or_insert(value);
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(*first)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let Some(t) = entry.as_table_mut() {
                insert_missing(t, rest, value);
            }
        }
    }
}

/// The resolved, validated configuration every stage reads from.
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub opts: Options,
    pub advantage: AdvantageKind,
    pub overlong_penalty: bool,
    /// The coefficient estimator, its parameters validated once, here (hashed as the
    /// estimator alone, as the run hash always took it).
    #[serde(rename = "estimator", serialize_with = "estimator_only")]
    pub coeffs: deltarl_coeffs::Settings,
    pub aggregation: Aggregation,
    pub eps_high: f64,
    pub config_path: PathBuf,
    /// Each stage's settings, built from the above once (each stage's hash is theirs; the
    /// run hash is the above).
    #[serde(skip)]
    pub stages: Stages,
}

/// The validated coefficient settings as the run hash takes them: the estimator alone.
fn estimator_only<S: serde::Serializer>(
    coeffs: &deltarl_coeffs::Settings,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    coeffs.estimator.serialize(s)
}

impl Resolved {
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, &[])
    }

    /// [`Resolved::load`] with `--set` changes.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<Self> {
        Self::new(Options::load_with(path, sets)?, path)
    }

    /// Fills algorithm-dependent defaults and validates every value once.
    pub fn new(o: Options, path: &Path) -> Result<Self> {
        let a = o.algorithm;
        let advantage = o.score.advantage.resolve(match a {
            Algorithm::Drgrpo => AdvantageKind::Drgrpo,
            _ => AdvantageKind::Grpo,
        });
        let overlong_penalty = o
            .score
            .overlong_penalty
            .resolve(matches!(a, Algorithm::Dapo | Algorithm::Delta));
        let aggregation = o.update.aggregation.resolve(match a {
            Algorithm::Grpo => Aggregation::SeqMeanTokenMean,
            Algorithm::Drgrpo => Aggregation::SeqMeanTokenSumNorm,
            Algorithm::Dapo | Algorithm::Delta => Aggregation::TokenMean,
        });
        let eps_high = o.update.eps_high.resolve(match a {
            Algorithm::Dapo | Algorithm::Delta => 0.28,
            _ => o.update.eps_low,
        });
        let kind = o.coeffs.estimator.resolve(match a {
            Algorithm::Delta => EstimatorKind::Delta,
            _ => EstimatorKind::Uniform,
        });
        // The built-in task an oracle reads its labels from: `data.source`, if it has them.
        let oracle_task = |name: &str, has: fn(deltarl_data::Task) -> bool, needs: &str| {
            o.data.source.task().filter(|t| has(*t)).ok_or_else(|| {
                anyhow::anyhow!(
                    "config key `coeffs.estimator` = {name:?} needs a built-in task {needs} \
                         as `data.source`, not \"{}\"",
                    o.data.source
                )
            })
        };
        let estimator = match kind {
            EstimatorKind::Uniform => Estimator::Uniform,
            EstimatorKind::TopEntropy => Estimator::TopEntropy {
                keep: o.coeffs.top_entropy_keep,
            },
            EstimatorKind::Delta => Estimator::Delta(DeltaSettings {
                refine_steps: o.coeffs.refine_steps,
                lam_min: o.coeffs.lam_min,
                lam_max: o.coeffs.lam_max,
                scope: o.coeffs.scope,
            }),
            EstimatorKind::OracleTokens => Estimator::OracleTokens {
                task: oracle_task(
                    "oracle-tokens",
                    deltarl_data::Task::has_connectives,
                    "whose tokens' roles are known (tiny-steps, tiny-steps-varied, tiny-steps-filler[-80])",
                )?,
                value: o.coeffs.oracle_value,
            },
            EstimatorKind::OraclePrefix => Estimator::OraclePrefix {
                task: oracle_task(
                    "oracle-prefix",
                    deltarl_data::Task::has_steps,
                    "of worked arithmetic, whose first errors can be found (tiny-arith, \
                     tiny-steps, tiny-steps-varied)",
                )?,
                value: o.coeffs.oracle_value,
            },
            EstimatorKind::OracleFiller => Estimator::OracleFiller {
                task: oracle_task(
                    "oracle-filler",
                    deltarl_data::Task::has_filler,
                    "with filler (tiny-steps-filler[-80], or tiny-steps at dose 0)",
                )?,
                value: o.coeffs.oracle_value,
            },
            EstimatorKind::Ktae => Estimator::Ktae(o.coeffs.ktae.settings()),
        };
        // The rules that name keys first, then the estimator's own check.
        limits::check(&o)?;
        let coeffs = deltarl_coeffs::Settings::new(estimator)
            .map_err(|e| anyhow::anyhow!("config [coeffs]: {e}"))?;
        let stages = Stages::new(
            &o,
            &stages::ByAlgorithmValues {
                advantage,
                overlong_penalty,
                aggregation,
                eps_high,
                coeffs: &coeffs,
            },
        );
        Ok(Resolved {
            advantage,
            overlong_penalty,
            coeffs,
            aggregation,
            eps_high,
            opts: o,
            config_path: path.to_path_buf(),
            stages,
        })
    }

    /// The configuration as `config show` prints it: the keys whose default comes from
    /// `algorithm` written out as resolved, and the keys serialisation skips at their
    /// default (so that runs made before they existed keep their hashes) written out too,
    /// so every key is shown.
    pub fn shown(&self) -> Result<toml::Value> {
        let mut o = self.opts.clone();
        o.score.advantage = ByAlgorithm::set(self.advantage);
        o.score.overlong_penalty = ByAlgorithm::set(self.overlong_penalty);
        o.update.aggregation = ByAlgorithm::set(self.aggregation);
        o.update.eps_high = ByAlgorithm::set(self.eps_high);
        o.coeffs.estimator = ByAlgorithm::set(match self.coeffs.estimator {
            Estimator::Uniform => EstimatorKind::Uniform,
            Estimator::TopEntropy { .. } => EstimatorKind::TopEntropy,
            Estimator::Delta(_) => EstimatorKind::Delta,
            Estimator::OracleTokens { .. } => EstimatorKind::OracleTokens,
            Estimator::OraclePrefix { .. } => EstimatorKind::OraclePrefix,
            Estimator::OracleFiller { .. } => EstimatorKind::OracleFiller,
            Estimator::Ktae(_) => EstimatorKind::Ktae,
        });
        let mut v = toml::Value::try_from(&o).context("cannot serialise the configuration")?;
        let tables = [
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
            (
                "score",
                "code",
                toml::Value::try_from(CodeOptions::default())?,
            ),
            (
                "coeffs",
                "ktae",
                toml::Value::try_from(KtaeOptions::default())?,
            ),
            (
                "update",
                "fipo",
                toml::Value::try_from(FipoOptions::default())?,
            ),
            (
                "update",
                "surrogate",
                toml::Value::try_from(SurrogateKind::default())?,
            ),
            (
                "update",
                "ratio",
                toml::Value::try_from(deltarl_update::RatioLevel::default())?,
            ),
            (
                "",
                "checkpoint",
                toml::Value::try_from(CheckpointOptions::default())?,
            ),
        ];
        for (section, key, value) in tables {
            let at = if section.is_empty() {
                Some(&mut v)
            } else {
                v.get_mut(section)
            };
            if let Some(t) = at.and_then(toml::Value::as_table_mut) {
                t.entry(key).or_insert(value);
            }
        }
        // Every numeric key from its range's reading of the options.
        for r in ranges::all() {
            let Some(n) = (r.get)(&o) else { continue };
            let value = match n {
                ranges::Number::Int(i) => toml::Value::Integer(i64::try_from(i)?),
                ranges::Number::Float(x) => toml::Value::Float(x),
            };
            let path: Vec<&str> = r.key.split('.').collect();
            if let Some(t) = v.as_table_mut() {
                insert_missing(t, &path, value);
            }
        }
        Ok(v)
    }

    /// Canonical JSON of everything that affects results (not the file path).
    pub fn canonical_json(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("config_path");
        }
        v.to_string()
    }

    pub fn hash(&self) -> String {
        deltarl_schemas::sha256_hex(self.canonical_json().as_bytes())
    }
}

/// The shipped configs folder, which the config tests load.
#[cfg(test)]
fn shipped_configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs")
}

#[cfg(test)]
mod load_refusals;
#[cfg(test)]
mod ranges_sweep;
#[cfg(test)]
mod tests;
