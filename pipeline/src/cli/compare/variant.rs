//! One arm of `deltarl compare`: a label (run names, tables, figure) and the configuration
//! keys it sets over the comparison's base configuration.

use std::str::FromStr;

use anyhow::{bail, Result};

use crate::config::Algorithm;

/// Top-level keys (or sections) a variant may not set: every arm starts from one
/// warm-started base, draws the same prompts and is graded on the same held-out problems,
/// so the pairing by seed stays exact.
const SHARED: [&str; 6] = ["extends", "seed", "model", "warmstart", "data", "eval"];

/// `dapo` (an algorithm: label `dapo`, sets `algorithm = "dapo"`) or
/// `LABEL:KEY=VALUE[;KEY=VALUE...]` (each `KEY=VALUE` as `--set` takes it).
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub label: String,
    pub sets: Vec<String>,
}

impl Variant {
    /// A variant that only picks an algorithm.
    pub fn algorithm(a: Algorithm) -> Self {
        Variant {
            label: a.name().to_string(),
            sets: vec![format!("algorithm={}", a.name())],
        }
    }
}

impl FromStr for Variant {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let Some((label, sets)) = text.split_once(':') else {
            return match <Algorithm as clap::ValueEnum>::from_str(text.trim(), true) {
                Ok(a) => Ok(Variant::algorithm(a)),
                Err(_) => bail!(
                    "variant {text:?}: not an algorithm (grpo, dapo, drgrpo, delta); a labelled \
                     variant is LABEL:KEY=VALUE[;KEY=VALUE...]"
                ),
            };
        };
        let label = label.trim();
        let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if label.is_empty() || !label.chars().all(name_ok) {
            bail!("variant {text:?}: the label {label:?} must be letters, digits, '-', '_' or '.' (it names runs)");
        }
        let sets: Vec<String> = sets
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        for set in &sets {
            let Some((key, _)) = set.split_once('=') else {
                bail!("variant {label:?}: {set:?} is not KEY=VALUE");
            };
            let top = key.trim().split('.').next().unwrap_or_default();
            if SHARED.contains(&top) {
                bail!(
                    "variant {label:?} sets `{}`: the variants of one comparison share `{}` \
                     (base, prompts, held-out problems); compare such settings with separate \
                     --config files",
                    key.trim(),
                    SHARED.join("`, `")
                );
            }
        }
        Ok(Variant {
            label: label.to_string(),
            sets,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn algorithms_and_labelled_variants_parse() {
        let v: Variant = "dapo".parse().unwrap();
        assert_eq!(v, Variant::algorithm(Algorithm::Dapo));
        let v: Variant = "k0:algorithm=delta; coeffs.refine_steps=0".parse().unwrap();
        assert_eq!(v.label, "k0");
        assert_eq!(v.sets, ["algorithm=delta", "coeffs.refine_steps=0"]);
    }

    #[test]
    fn bad_variants_are_named() {
        let e = "ppo".parse::<Variant>().unwrap_err().to_string();
        assert!(
            e.contains("\"ppo\"") && e.contains("LABEL:KEY=VALUE"),
            "{e}"
        );
        let e = "a b:update.lr=1"
            .parse::<Variant>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("label \"a b\""), "{e}");
        let e = "x:update.lr".parse::<Variant>().unwrap_err().to_string();
        assert!(e.contains("\"update.lr\" is not KEY=VALUE"), "{e}");
        let e = "x:warmstart.steps=3"
            .parse::<Variant>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("sets `warmstart.steps`"), "{e}");
        let e = "x:seed=3".parse::<Variant>().unwrap_err().to_string();
        assert!(e.contains("sets `seed`"), "{e}");
    }
}
