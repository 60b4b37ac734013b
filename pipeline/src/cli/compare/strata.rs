//! `deltarl strata`: the arms of several comparisons, each run from its own warm-started
//! base (`compare --first-seed`), paired by seed within each base and read together with the
//! bases as fixed blocks (`crate::strata`): each arm's difference from the baseline with
//! its 95 % t-interval, two-sided p and Holm's correction over the arms, and a TOST against
//! a margin fixed in advance as a share of the baseline's own gain over the base. With a
//! positive control named, it applies the pre-registered rule: the control differs from the
//! baseline (the assay is sensitive; the method's share of the control's effect is given),
//! is within the margin (inert), or neither (inconclusive).
//!
//! It reads only what `compare` wrote: the comparison folder's `configs/<arm>-s<seed>.toml`
//! (which runs exist), `compare.csv` (the final iteration), each run's final `eval.parquet`
//! (the greedy readout), `sampled/<run>.parquet` (the sampled readout) and the base's
//! `base-eval.parquet` / `base-sampled.parquet`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

mod stratum;
use crate::strata::{Blocked, Verdict};
use stratum::{ReadoutKind, Stratum};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A comparison (`compare --name`) under the runs folder, one per warm-started base;
    /// repeat it for each base.
    #[arg(long = "comparison", required = true, value_name = "NAME")]
    comparisons: Vec<String>,
    /// The arm every other arm is paired against.
    #[arg(long, default_value = "dapo")]
    baseline: String,
    /// The smallest effect of interest, as a share of the baseline's gain over the base
    /// (in the primary readout): the TOST margin.
    #[arg(long, default_value_t = 0.25)]
    margin_share: f64,
    /// The readout the rule is applied to (the other is printed as secondary).
    #[arg(long, value_enum, default_value_t = ReadoutKind::Sampled)]
    primary: ReadoutKind,
    /// The positive control (an arm whose effect exists by construction): applies the rule.
    #[arg(long)]
    control: Option<String>,
    /// With `--control`: the arm whose share of the control's effect is reported.
    #[arg(long)]
    method: Option<String>,
}

/// One arm's blocked estimate in one readout.
struct Row {
    arm: String,
    est: Blocked,
    per_base: Vec<Vec<f64>>,
}

impl Args {
    pub fn run(self, runs: &Path) -> Result<()> {
        print!("{}", self.report(runs)?);
        Ok(())
    }

    /// Both readouts' tables (the primary first) and, with a control, the rule's decision.
    fn report(&self, runs: &Path) -> Result<String> {
        anyhow::ensure!(
            self.margin_share > 0.0 && self.margin_share <= 1.0,
            "--margin-share {}: a share of the baseline's gain in (0, 1]",
            self.margin_share
        );
        // One base once: a comparison named twice would count its seeds twice.
        if let Some(c) = crate::cli::flags::repeated(&self.comparisons) {
            anyhow::bail!("--comparison {c} is given twice: each base is one stratum");
        }
        // The arms the rule reads are three different arms.
        let roles = [
            ("--baseline", Some(&self.baseline)),
            ("--control", self.control.as_ref()),
            ("--method", self.method.as_ref()),
        ];
        for (i, (flag, arm)) in roles.iter().enumerate() {
            for (other, same) in &roles[..i] {
                anyhow::ensure!(
                    arm.is_none() || arm != same,
                    "{flag} {:?} is also {other}: the rule pairs different arms",
                    arm.map_or("", |a| a.as_str())
                );
            }
        }
        let strata = self
            .comparisons
            .iter()
            .map(|c| Stratum::read(runs, c))
            .collect::<Result<Vec<_>>>()?;
        let arms = strata[0].arms();
        for s in &strata[1..] {
            anyhow::ensure!(
                s.arms() == arms,
                "comparison {} has arms {:?}, {} has {:?}: every base runs the same arms",
                s.name,
                s.arms(),
                strata[0].name,
                arms
            );
        }
        for named in [
            Some(&self.baseline),
            self.control.as_ref(),
            self.method.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            anyhow::ensure!(
                arms.contains(named),
                "{named:?} is not an arm of the comparisons ({})",
                arms.join(", ")
            );
        }
        anyhow::ensure!(
            self.method.is_none() || self.control.is_some(),
            "--method is the arm whose share of --control's effect is reported: name the control"
        );
        let mut out = String::new();
        for kind in [self.primary, self.primary.other()] {
            out += &self.readout(&strata, &arms, kind)?;
        }
        Ok(out)
    }

    fn readout(&self, strata: &[Stratum], arms: &[String], kind: ReadoutKind) -> Result<String> {
        let primary = kind == self.primary;
        let mut out = String::new();
        // The baseline's gain over the base: seed-weighted over the bases, as the estimate is.
        let gains: Vec<(f64, usize)> = strata
            .iter()
            .map(|s| s.gain(kind, &self.baseline))
            .collect();
        let n: usize = gains.iter().map(|g| g.1).sum();
        let gain = gains.iter().map(|(g, k)| g * *k as f64).sum::<f64>() / n.max(1) as f64;
        let margin = self.margin_share * gain;
        writeln!(
            out,
            "\n{} readout ({}): {} bases ({}); {} gained {:+.4} over the base ({}), so the \
             margin is {:.0} % of it: ±{:.4}",
            kind.name(),
            if primary { "primary" } else { "secondary" },
            strata.len(),
            strata
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            self.baseline,
            gain,
            gains
                .iter()
                .zip(strata)
                .map(|((g, _), s)| format!("{}: {:.4} → {:+.4}", s.name, s.base[kind.name()], g))
                .collect::<Vec<_>>()
                .join("; "),
            self.margin_share * 100.0,
            margin
        )?;
        let mut rows = Vec::new();
        for arm in arms.iter().filter(|a| **a != self.baseline) {
            let per_base = strata
                .iter()
                .map(|s| s.differences(kind, arm, &self.baseline))
                .collect::<Result<Vec<_>>>()?;
            let est = Blocked::new(&per_base).with_context(|| {
                format!("{arm}: too few seeds to measure the spread within bases (need 2 in one)")
            })?;
            rows.push(Row {
                arm: arm.clone(),
                est,
                per_base,
            });
        }
        let holm = crate::paired::holm(&rows.iter().map(|r| r.est.p()).collect::<Vec<_>>());
        writeln!(
            out,
            "\n| arm − {} | seeds | mean paired difference | 95 % CI (t, df) | p | p (Holm) | \
             TOST p (±{:.4}) | per seed, by base |\n|---|---|---|---|---|---|---|---|",
            self.baseline, margin
        )?;
        for (r, h) in rows.iter().zip(&holm) {
            let hw = r.est.half_width(0.95);
            let tost = if margin > 0.0 {
                format!("{:.3}", r.est.tost_p(margin))
            } else {
                "n/a (no gain)".into()
            };
            writeln!(
                out,
                "| {} | {} | {:+.4} | [{:+.4}, {:+.4}] ({}) | {:.3} | {:.3} | {} | {} |",
                r.arm,
                r.est.n,
                r.est.mean,
                r.est.mean - hw,
                r.est.mean + hw,
                r.est.df,
                r.est.p(),
                h,
                tost,
                r.per_base
                    .iter()
                    .map(|d| d
                        .iter()
                        .map(|x| format!("{x:+.3}"))
                        .collect::<Vec<_>>()
                        .join(", "))
                    .collect::<Vec<_>>()
                    .join(" / ")
            )?;
        }
        if let (true, Some(control)) = (primary, &self.control) {
            let find = |a: &str| rows.iter().position(|r| r.arm == a);
            let i = find(control).context("the control is the baseline")?;
            let method = self.method.as_deref().and_then(find).map(|j| &rows[j].est);
            let verdict = if margin > 0.0 {
                Some(Verdict::decide(&rows[i].est, holm[i], method, margin))
            } else {
                None
            };
            let text = match verdict {
                Some(Verdict::Sensitive { share }) => format!(
                    "sensitive: {control} differs from {}, {} it (Holm p {:.3}){}",
                    self.baseline,
                    // The rule is two-sided; which side decides what the difference means.
                    if rows[i].est.mean > 0.0 {
                        "above"
                    } else {
                        "below"
                    },
                    holm[i],
                    share.map_or(String::new(), |s| format!(
                        "; {} realises {:.0} % of {control}'s difference ({:+.4} of {:+.4})",
                        self.method.as_deref().unwrap_or_default(),
                        s * 100.0,
                        method.map_or(f64::NAN, |m| m.mean),
                        rows[i].est.mean
                    ))
                ),
                Some(Verdict::Inert) => format!(
                    "inert: {control} is within ±{margin:.4} of {} (TOST p {:.3})",
                    self.baseline,
                    rows[i].est.tost_p(margin)
                ),
                Some(Verdict::Inconclusive) => format!(
                    "inconclusive: {control} neither differs from {} (Holm p {:.3}) nor is \
                     within ±{margin:.4} of it (TOST p {:.3}); more seeds",
                    self.baseline,
                    holm[i],
                    rows[i].est.tost_p(margin)
                ),
                None => format!(
                    "no margin: {} did not gain over the base in this readout",
                    self.baseline
                ),
            };
            writeln!(
                out,
                "\nDecision (the rule, on the {} readout): {text}",
                kind.name()
            )?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
