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

/// The field's methods by name, each as the keys it sets over DAPO (the paper's baselines
/// and DelTA's nearest rivals; `docs/config.md` maps the keys to TRL's and verl's names).
/// GSPO's clip range is its paper's (3e-4, 4e-4), as TRL documents it; SAPO and GSPO take
/// TRL's aggregation for them (a mean over each response, then over responses). FIPO's
/// `delta` (10 in its runs) is `update.dual_clip`, 10 in the shipped configurations.
pub const METHODS: [(&str, &[&str]); 10] = [
    ("cispo", &["algorithm=dapo", "update.surrogate=cispo"]),
    (
        "sapo",
        &[
            "algorithm=dapo",
            "update.surrogate=sapo",
            "update.aggregation=seq-mean-token-mean",
        ],
    ),
    (
        "gspo",
        &[
            "algorithm=dapo",
            "update.ratio=sequence",
            "update.aggregation=seq-mean-token-mean",
            "update.eps_low=3e-4",
            "update.eps_high=4e-4",
        ],
    ),
    (
        "gspo-token",
        &[
            "algorithm=dapo",
            "update.ratio=sequence-token",
            "update.aggregation=seq-mean-token-mean",
            "update.eps_low=3e-4",
            "update.eps_high=4e-4",
        ],
    ),
    (
        "delta-gspo-token",
        &[
            "algorithm=delta",
            "update.ratio=sequence-token",
            "update.aggregation=seq-mean-token-mean",
            "update.eps_low=3e-4",
            "update.eps_high=4e-4",
        ],
    ),
    (
        "top-entropy",
        &["algorithm=dapo", "coeffs.estimator=top-entropy"],
    ),
    ("ktae", &["algorithm=dapo", "coeffs.estimator=ktae"]),
    ("fipo", &["algorithm=dapo", "update.fipo.decay_rate=32"]),
    (
        "oracle-prefix",
        &["algorithm=dapo", "coeffs.estimator=oracle-prefix"],
    ),
    (
        "oracle-filler",
        &["algorithm=dapo", "coeffs.estimator=oracle-filler"],
    ),
];

impl FromStr for Variant {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let Some((label, sets)) = text.split_once(':') else {
            let name = text.trim();
            if let Some((label, sets)) = METHODS.iter().find(|(m, _)| *m == name) {
                return Ok(Variant {
                    label: (*label).to_string(),
                    sets: sets.iter().map(|s| (*s).to_string()).collect(),
                });
            }
            return match <Algorithm as clap::ValueEnum>::from_str(name, true) {
                Ok(a) => Ok(Variant::algorithm(a)),
                Err(_) => bail!(
                    "variant {text:?}: not an algorithm (grpo, dapo, drgrpo, delta) or a method \
                     ({}); a labelled variant is LABEL:KEY=VALUE[;KEY=VALUE...]",
                    METHODS.map(|(m, _)| m).join(", ")
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

    /// Each named method resolves over the default configuration (its keys valid, its
    /// values in range).
    #[test]
    fn named_methods_resolve() {
        // tiny-steps: every method resolves on it (the oracles' labels included).
        let config =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/tiny-steps.toml");
        for (name, _) in METHODS {
            let v: Variant = name.parse().unwrap();
            assert_eq!(v.label, name);
            crate::config::Resolved::load_with(&config, &v.sets)
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
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
