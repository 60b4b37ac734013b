//! The range of every numeric key, in one table: its least and greatest value, what 0
//! means where 0 is outside the range, and why the bounds are where they are. The
//! configuration check walks this table; `deltarl config ranges` prints it; `config show`
//! fills in the keys it lists that serialisation skips at their default; and the sweep test
//! reads it, so a numeric key with no row here fails that test.
//!
//! Bounds come from what the method and the numbers allow, not from inputs seen: a float
//! must be a normal number or exactly 0 (a subnormal such as 1e-320 passes "> 0" yet
//! overflows to infinity when divided into, or rounds to 0 in f32), and every value must
//! keep the quantities computed from it finite in the f32 the trainer computes in
//! (greatest finite f32: 3.4e38).

mod generation;
mod learning;
mod run;

use super::options::Options;

/// A number as the configuration holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(u64),
    Float(f64),
}

/// Which end of a float range excludes its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    Neither,
    Below,
    Above,
}

/// A key's accepted values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// Whole numbers in `[least, greatest]`.
    Int { least: u64, greatest: u64 },
    /// Normal floats between `least` and `greatest` (ends as `open` says), and exactly 0
    /// as well when `zero_off` (0 then means "off", or "the default", as the key says).
    Float {
        least: f64,
        greatest: f64,
        open: Open,
        zero_off: bool,
    },
}

/// One numeric key.
pub struct Range {
    /// Dotted key, as in the TOML file and `--set`.
    pub key: &'static str,
    /// Its value in a configuration; `None` when it is unset and takes a default that
    /// depends on another key (`update.eps_high`), which `Resolved` checks once resolved.
    pub get: fn(&Options) -> Option<Number>,
    pub bound: Bound,
    /// Why the bounds are these.
    pub why: &'static str,
}

pub use deltarl_schemas::number::show;

impl Bound {
    /// Whether `value` is accepted.
    pub fn admits(&self, value: Number) -> bool {
        match (*self, value) {
            (Bound::Int { least, greatest }, Number::Int(v)) => (least..=greatest).contains(&v),
            (
                Bound::Float {
                    least,
                    greatest,
                    open,
                    zero_off,
                },
                Number::Float(v),
            ) => {
                if v == 0.0 && zero_off {
                    return true;
                }
                let above = match open {
                    Open::Below => v > least,
                    Open::Neither | Open::Above => v >= least,
                };
                let below = match open {
                    Open::Above => v < greatest,
                    Open::Neither | Open::Below => v <= greatest,
                };
                // A subnormal is refused even where the range reaches 0: it is what a
                // mistyped exponent gives, and it underflows to 0 in f32.
                (v == 0.0 || v.is_normal()) && above && below
            }
            // A whole number where a float is expected reads as that float.
            (b @ Bound::Float { .. }, Number::Int(v)) => b.admits(Number::Float(v as f64)),
            (Bound::Int { .. }, Number::Float(_)) => false,
        }
    }

    /// The accepted values in words: "1 to 1048576", "0 or [0.001, 100]".
    pub fn describe(&self) -> String {
        match *self {
            Bound::Int { least, greatest } => format!("{least} to {greatest}"),
            Bound::Float {
                least,
                greatest,
                open,
                zero_off,
            } => {
                let lo = match open {
                    Open::Below => "(",
                    Open::Neither | Open::Above => "[",
                };
                let hi = match open {
                    Open::Above => ")",
                    Open::Neither | Open::Below => "]",
                };
                let range = format!("{lo}{}, {}{hi}", show(least), show(greatest));
                if zero_off {
                    format!("0 or {range}")
                } else {
                    range
                }
            }
        }
    }
}

fn int(v: impl TryInto<u64>) -> Option<Number> {
    // usize, u32 and u16 always fit u64.
    Some(Number::Int(v.try_into().unwrap_or(u64::MAX)))
}

fn float(v: f64) -> Option<Number> {
    Some(Number::Float(v))
}

const fn ints(least: u64, greatest: u64) -> Bound {
    Bound::Int { least, greatest }
}

const fn floats(least: f64, greatest: f64) -> Bound {
    Bound::Float {
        least,
        greatest,
        open: Open::Neither,
        zero_off: false,
    }
}

/// `floats` where 0 is accepted and means off.
const fn off_or(least: f64, greatest: f64) -> Bound {
    Bound::Float {
        least,
        greatest,
        open: Open::Neither,
        zero_off: true,
    }
}

/// Sizes of one iteration's batch: past these an allocation fails, after the run is
/// recorded, instead of the key being named at load.
const SIZE: u64 = 1 << 20;
const TOKENS: u64 = 1 << 30;
const MAX_SEED: u64 = i64::MAX as u64;
/// Temperatures: below 1e-3 logits of f32 models (|logit| < 1e2) divided by T exceed
/// 1e5 and the draw is greedy to f32's precision anyway (write 0 for greedy); above 100
/// every token of a vocabulary under 1e5 is drawn within 1 % of uniformly.
const TEMPERATURE: Bound = off_or(1e-3, 100.0);
/// Nucleus mass: any p at or below the top token's probability keeps that token alone,
/// and the top token of a vocabulary under 1e6 has probability above 1e-6.
const TOP_P: Bound = floats(1e-6, 1.0);
/// Samples per prompt (the group size G) or per evaluated problem.
const SAMPLES: Bound = ints(1, 1 << 12);
/// Top-k: 0 = off; a vocabulary is smaller than the greatest.
const TOP_K: Bound = ints(0, 1 << 24);
/// New tokens a response may take.
const NEW_TOKENS: Bound = ints(1, SIZE);
/// Rows decoded together.
const BATCH_ROWS: Bound = ints(1, SIZE);
/// Problems of an evaluation (`eval.problems`, where 0 means all of them).
const PROBLEMS: u64 = 1 << 24;
/// Learning rates: AdamW moves each weight by about lr a step; below 1e-12 that is under
/// f32's resolution of any weight above 1e-5, above 1 the weights leave any trained scale.
const LR: Bound = floats(1e-12, 1.0);
/// DelTA's coefficient bounds: within [1e-3, 1e3] the normalised coefficients differ by at
/// most lam_max / lam_min = 1e6 (kept to 6 digits in f32), and the normalisation's sum over
/// at most 2^44 tokens (2^24 responses x 2^20 tokens) stays below 1.8e16, far from
/// overflow; at 1e308 that sum overflowed and every coefficient became 0.
const LAMBDA: Bound = floats(1e-3, 1e3);
/// Coefficients of a loss term (KL, entropy): each multiplies per-token terms of the
/// f32 loss; the field uses 1e-4..1e-1, and past 100 the term alone decides the update.
const LOSS_COEF: Bound = floats(0.0, 100.0);

/// Every numeric key, a slice a table, in the order of `config show`.
const TABLES: &[&[Range]] = &[
    run::SEED,
    run::CHECKPOINT,
    learning::COEFFS,
    run::DATA,
    generation::EVAL,
    learning::FEATURES,
    run::MODEL,
    generation::ROLLOUT,
    generation::SCORE,
    learning::UPDATE,
    run::WARMSTART,
];

/// Every numeric key, in the order of `config show`.
pub fn all() -> impl Iterator<Item = &'static Range> {
    TABLES.iter().flat_map(|t| t.iter())
}

/// A command-line float in `bound`, the message saying the accepted values.
fn arg_in(bound: Bound, text: &str) -> Result<f64, String> {
    let x: f64 = text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
    if bound.admits(Number::Float(x)) {
        Ok(x)
    } else {
        Err(format!("{}: must be {}", show(x), bound.describe()))
    }
}

/// A command-line count in `bound`, the message saying the accepted values.
fn int_arg_in(bound: Bound, text: &str) -> Result<u64, String> {
    let x: u64 = text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
    if bound.admits(Number::Int(x)) {
        Ok(x)
    } else {
        Err(format!("{x}: must be {}", bound.describe()))
    }
}

/// A count within `usize` (every bound here is far below it, on 32-bit targets too).
fn usize_arg_in(bound: Bound, text: &str) -> Result<usize, String> {
    let x = int_arg_in(bound, text)?;
    usize::try_from(x).map_err(|_| format!("{x}: too large for this machine"))
}

/// `--k` of `eval`: samples per problem, the range of `eval.samples`.
pub fn samples_arg(text: &str) -> Result<u32, String> {
    let x = int_arg_in(SAMPLES, text)?;
    // SAMPLES ends at 2^12.
    u32::try_from(x).map_err(|_| format!("{x}: must be {}", SAMPLES.describe()))
}

/// `--top-k` of `eval` and `generate`: the range of `rollout.top_k` (0 = off).
pub fn top_k_arg(text: &str) -> Result<usize, String> {
    usize_arg_in(TOP_K, text)
}

/// `--max-new-tokens` of `eval` and `generate`: the range of `rollout.max_new_tokens`.
pub fn new_tokens_arg(text: &str) -> Result<usize, String> {
    usize_arg_in(NEW_TOKENS, text)
}

/// `--max-batch-rows` of `eval`: the range of `rollout.max_batch_rows`.
pub fn batch_rows_arg(text: &str) -> Result<usize, String> {
    usize_arg_in(BATCH_ROWS, text)
}

/// `--limit` of `eval`: `eval.problems`' range without its 0 ("all"), which leaving the
/// flag out already says.
pub fn limit_arg(text: &str) -> Result<usize, String> {
    usize_arg_in(ints(1, PROBLEMS), text)
}

/// `--temperature` of `eval` and `generate`: the range of `rollout.temperature`.
pub fn temperature_arg(text: &str) -> Result<f64, String> {
    arg_in(TEMPERATURE, text)
}

/// `--top-p` of `eval` and `generate`: the range of `rollout.top_p`.
pub fn top_p_arg(text: &str) -> Result<f64, String> {
    arg_in(TOP_P, text)
}

/// The row of `key`.
pub fn range(key: &str) -> Option<&'static Range> {
    all().find(|r| r.key == key)
}

/// A value outside its key's range.
#[derive(Debug)]
pub struct OutOfRange {
    pub key: &'static str,
    message: String,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OutOfRange {}

/// Checks every numeric key of `o` against its row; the error names the key, its value
/// and the range.
pub fn check(o: &Options) -> Result<(), OutOfRange> {
    for r in all() {
        let Some(value) = (r.get)(o) else { continue };
        if !r.bound.admits(value) {
            let shown = match value {
                Number::Int(v) => v.to_string(),
                Number::Float(v) if v != 0.0 && !v.is_normal() && v.is_finite() => {
                    format!("{} (subnormal)", show(v))
                }
                Number::Float(v) => show(v),
            };
            return Err(OutOfRange {
                key: r.key,
                message: format!(
                    "config key `{}` = {shown}: must be {} ({})",
                    r.key,
                    r.bound.describe(),
                    r.why
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
