//! The score stage's settings: everything it reads from the configuration. Their
//! serialisation is the stage's hash, so the field order and the fields skipped at their
//! defaults are part of every recorded run's identity.

use deltarl_code::{CodeOptions, PassReward};
use deltarl_verify::{ExtractOptions, Fallback, Policy};
use serde::{Deserialize, Serialize};

/// How group advantages are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdvantageKind {
    /// (R - mean) / (std + 1e-6), unbiased std.
    Grpo,
    /// R - mean (Dr.GRPO).
    Drgrpo,
}

/// The score stage's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub advantage: AdvantageKind,
    /// DAPO overlong penalty: (max response length, buffer, factor), None = off.
    pub overlong: Option<(usize, usize, f64)>,
    /// Drop groups whose rewards are all equal.
    pub dynamic_sampling: bool,
    /// How answers are extracted from math responses, and the single fallbacks added.
    #[serde(skip_serializing_if = "Policy::is_boxed")]
    pub extract: Policy,
    pub extract_fallbacks: Vec<Fallback>,
    /// Code rewards (only in the hash when set: math runs keep theirs).
    #[serde(skip_serializing_if = "CodeOptions::is_default")]
    pub code: CodeOptions,
}

impl Settings {
    /// Whether advantages are divided by the group's unbiased std (+1e-6): GRPO, not
    /// Dr.GRPO.
    pub fn std_normalize(&self) -> bool {
        self.advantage == AdvantageKind::Grpo
    }

    /// The verifier's extraction: the policy with the fallbacks added.
    pub fn extract_options(&self) -> ExtractOptions {
        self.extract_fallbacks
            .iter()
            .fold(self.extract.options(), |o, &f| o.with(f))
    }

    /// What scores.parquet records as its `settings`, in the layout the files have always
    /// had.
    pub(crate) fn recorded(&self) -> Recorded {
        Recorded {
            std_normalize: self.std_normalize(),
            overlong: self.overlong,
            dynamic_sampling: self.dynamic_sampling,
            pass_reward: self.code.reward,
        }
    }
}

/// The serialised form of [`Settings::recorded`] (a layout, not a second set of settings).
#[derive(Serialize)]
pub(crate) struct Recorded {
    std_normalize: bool,
    overlong: Option<(usize, usize, f64)>,
    dynamic_sampling: bool,
    #[serde(skip_serializing_if = "is_all")]
    pass_reward: PassReward,
}

fn is_all(p: &PassReward) -> bool {
    *p == PassReward::All
}
