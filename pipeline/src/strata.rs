//! A paired difference over several warm-start bases (strata): each base's seeds are paired
//! within that base, and the bases enter as fixed blocks. What one base cannot say — whether
//! a difference holds on another base — is what several bases are run for; what they must
//! not do is add the bases' own spread to the seeds' (a strong base and a weak one differ by
//! far more than any two arms), so the spread is measured inside each base only.
//!
//! The model: d_{b,s} = μ + β_b + ε_{b,s} (arm − baseline for seed s of base b), ε
//! independent with one variance σ². Then
//! 1. the estimate is the seed-weighted mean of the bases' means, Σ_b (n_b / N) d̄_b, which
//!    is the mean of all N differences;
//! 2. σ² is estimated from the within-base deviations only,
//!    s² = Σ_b Σ_s (d_{b,s} − d̄_b)² / (N − B), on N − B degrees of freedom;
//! 3. the estimate's standard error is s · sqrt(Σ_b (n_b/N)² / n_b) = s / sqrt(N);
//! 4. intervals and tests are Student-t on N − B degrees of freedom.
//!
//! With one base this is the paired t-test of `paired.rs` exactly.
//!
//! Equivalence (TOST, two one-sided tests): "no effect larger than δ" is claimed when both
//! H₀⁻: μ ≤ −δ and H₀⁺: μ ≥ +δ are rejected at 5 %, i.e. p = max(p⁻, p⁺) < 0.05, which is
//! the 90 % t-interval lying inside (−δ, +δ).

use statrs::distribution::{ContinuousCDF, StudentsT};

/// The blocked estimate of one arm's paired difference from the baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blocked {
    /// Seeds in all (N).
    pub n: usize,
    /// Bases (B).
    pub strata: usize,
    /// Σ_b (n_b / N) d̄_b.
    pub mean: f64,
    /// s / sqrt(N), s² the pooled within-base variance.
    pub se: f64,
    /// N − B.
    pub df: usize,
}

impl Blocked {
    /// The estimate from each base's per-seed differences. None when a base has no seed or
    /// no base has two (no degrees of freedom left for the spread).
    pub fn new(strata: &[Vec<f64>]) -> Option<Self> {
        if strata.is_empty() || strata.iter().any(Vec::is_empty) {
            return None;
        }
        let n: usize = strata.iter().map(Vec::len).sum();
        let df = n.checked_sub(strata.len()).filter(|&df| df > 0)?;
        // 1. The seed-weighted mean of the bases' means: the mean of every difference.
        let mean = strata.iter().flatten().sum::<f64>() / n as f64;
        // 2. The pooled within-base variance.
        let within: f64 = strata
            .iter()
            .map(|d| {
                let m = d.iter().sum::<f64>() / d.len() as f64;
                d.iter().map(|x| (x - m).powi(2)).sum::<f64>()
            })
            .sum();
        let var = within / df as f64;
        // 3. Its standard error.
        let se = (var / n as f64).sqrt();
        Some(Blocked {
            n,
            strata: strata.len(),
            mean,
            se,
            df,
        })
    }

    fn t(&self) -> Option<StudentsT> {
        StudentsT::new(0.0, 1.0, self.df as f64).ok()
    }

    /// Half the width of the two-sided `level` t-interval (0.95: the 95 % interval).
    pub fn half_width(&self, level: f64) -> f64 {
        self.t()
            .map_or(f64::NAN, |t| t.inverse_cdf(0.5 + level / 2.0) * self.se)
    }

    /// The two-sided p-value of μ = 0. With no spread at all: 0 when the mean is not 0,
    /// else 1.
    pub fn p(&self) -> f64 {
        if self.se == 0.0 {
            return if self.mean == 0.0 { 1.0 } else { 0.0 };
        }
        self.t()
            .map_or(f64::NAN, |t| 2.0 * t.sf((self.mean / self.se).abs()))
    }

    /// The TOST p-value of |μ| ≥ `margin` (small: the difference is within ±margin).
    /// With no spread at all: 0 when |mean| < margin, else 1.
    pub fn tost_p(&self, margin: f64) -> f64 {
        if margin.is_nan() || margin <= 0.0 {
            return f64::NAN;
        }
        if self.se == 0.0 {
            return if self.mean.abs() < margin { 0.0 } else { 1.0 };
        }
        let Some(t) = self.t() else {
            return f64::NAN;
        };
        // H₀⁻: μ ≤ −δ, rejected when the mean sits far above −δ; H₀⁺: μ ≥ δ, far below δ.
        let below = t.sf((self.mean + margin) / self.se);
        let above = t.cdf((self.mean - margin) / self.se);
        below.max(above)
    }
}

/// What the pre-registered rule concludes about the positive control (an arm whose effect
/// exists by construction) against the baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// The control differs from the baseline (Holm-adjusted p < 0.05): the assay can show
    /// an effect; `share` is the method's difference over the control's (None without a
    /// method).
    Sensitive { share: Option<f64> },
    /// The control is within ±margin of the baseline (TOST p < 0.05): what it removes is
    /// inert on this task.
    Inert,
    /// Neither: more seeds.
    Inconclusive,
}

impl Verdict {
    /// The rule: `control` with its Holm-adjusted p, `method` (the arm whose share of the
    /// control's effect is reported), the margin.
    pub fn decide(control: &Blocked, holm_p: f64, method: Option<&Blocked>, margin: f64) -> Self {
        if holm_p < 0.05 {
            Verdict::Sensitive {
                share: method.map(|m| m.mean / control.mean),
            }
        } else if control.tost_p(margin) < 0.05 {
            Verdict::Inert
        } else {
            Verdict::Inconclusive
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_base_is_the_paired_t_test() {
        let d = vec![vec![0.01, 0.02, 0.03, -0.01, 0.0]];
        let b = Blocked::new(&d).unwrap();
        assert_eq!((b.n, b.strata, b.df), (5, 1, 4));
        let (m, h) = crate::paired::mean_ci(&d[0]);
        // The same sums in the same order: equal up to the last bits of a 5-term sum and
        // one t quantile (1e-15 relative); 1e-12 is slack.
        assert!((b.mean - m).abs() < 1e-12);
        assert!((b.half_width(0.95) - h).abs() < 1e-12);
        assert!((b.p() - crate::paired::t_test_p(&d[0])).abs() < 1e-12);
    }

    #[test]
    fn blocked_by_hand() {
        // Base 1: 1, 3 (mean 2); base 2: 10, 12, 14 (mean 12). N = 5, B = 2, df = 3.
        // Mean: (1 + 3 + 10 + 12 + 14) / 5 = 8. Within: (1 + 1) + (4 + 0 + 4) = 10, s² = 10/3.
        // se = sqrt(10/3 / 5) = sqrt(2/3) = 0.816497. The bases' gap (10) adds nothing.
        let b = Blocked::new(&[vec![1.0, 3.0], vec![10.0, 12.0, 14.0]]).unwrap();
        assert_eq!((b.n, b.strata, b.df), (5, 2, 3));
        // Sums of small integers are exact in f64; the square root to 1 ulp.
        assert_eq!(b.mean, 8.0);
        assert!((b.se - (2.0f64 / 3.0).sqrt()).abs() < 1e-15);
        // t(3) at 0.975 = 3.182446 (tables: 3.182), given here to 7 digits (±5e-7).
        assert!((b.half_width(0.95) - 3.182446 * b.se).abs() < 1e-6);
        // t = 8 / 0.816497 = 9.79796 on 3 df: the closed form of t(3)'s tail, 2 sf(t) =
        // 1 − (2/π)(atan(t/√3) + √3 t / (3 + t²)).
        let t = 8.0 / b.se;
        let x = t / 3f64.sqrt();
        let want = 1.0 - 2.0 / std::f64::consts::PI * (x.atan() + 3f64.sqrt() * t / (3.0 + t * t));
        // statrs' incomplete beta against the closed form: agreement to 1e-12 absolute
        // (p ≈ 2e-3; the beta's continued fraction stops at 1e-15 relative).
        assert!((b.p() - want).abs() < 1e-12, "{} vs {want}", b.p());
        // Spread taken over the bases (ignoring the blocks) would be the variance of all
        // five, 130 / 4 = 32.5, far above the within-base 3.33.
        assert!(b.se < (32.5f64 / 5.0).sqrt() / 2.0);
    }

    #[test]
    fn no_seeds_or_no_spread_left_is_refused() {
        assert!(Blocked::new(&[]).is_none());
        assert!(Blocked::new(&[vec![0.1, 0.2], vec![]]).is_none());
        // One seed a base: no within-base spread to estimate.
        assert!(Blocked::new(&[vec![0.1], vec![0.2]]).is_none());
    }

    #[test]
    fn tost_by_hand() {
        // One base, differences -1, 0, 1: mean 0, s = 1, se = 1/sqrt 3, df 2.
        let b = Blocked::new(&[vec![-1.0, 0.0, 1.0]]).unwrap();
        let se = 1.0 / 3f64.sqrt();
        assert!((b.se - se).abs() < 1e-15);
        // Margin δ: both one-sided p's are sf_t2(δ / se) by symmetry, and t(2)'s tail is
        // sf(t) = (1 − t / sqrt(t² + 2)) / 2.
        let sf2 = |t: f64| (1.0 - t / (t * t + 2.0).sqrt()) / 2.0;
        for delta in [0.5, 2.0, 5.0] {
            let want = sf2(delta / se);
            // statrs against the closed form: 1e-12 absolute (see blocked_by_hand).
            assert!((b.tost_p(delta) - want).abs() < 1e-12, "{delta}");
        }
        // Equivalent at δ = 5 (p = 0.0094 < 0.05), not at δ = 0.5 (p = 0.23): the 90 %
        // interval is 0 ± t(2)_{0.95} se = ± 2.919986 / sqrt 3 = ± 1.686.
        assert!(b.tost_p(5.0) < 0.05 && b.tost_p(0.5) > 0.05);
        assert!(b.tost_p(1.70) < 0.05 && b.tost_p(1.67) > 0.05);
        // A mean far from zero is never equivalent; the margin must be positive.
        let far = Blocked::new(&[vec![9.0, 10.0, 11.0]]).unwrap();
        assert!(far.tost_p(5.0) > 0.95);
        assert!(b.tost_p(0.0).is_nan() && b.tost_p(f64::NAN).is_nan());
        // No spread: decided by the mean alone.
        let flat = Blocked::new(&[vec![0.2, 0.2]]).unwrap();
        assert_eq!(
            (flat.tost_p(0.3), flat.tost_p(0.1), flat.p()),
            (0.0, 1.0, 0.0)
        );
    }

    #[test]
    fn the_rule_reads_the_control_first() {
        let control = Blocked::new(&[vec![0.04, 0.05, 0.06], vec![0.03, 0.05, 0.07]]).unwrap();
        let method = Blocked::new(&[vec![0.01, 0.02, 0.03], vec![0.0, 0.02, 0.04]]).unwrap();
        // A control clearly above the baseline: sensitive, the method's share 0.02 / 0.05.
        match Verdict::decide(&control, control.p(), Some(&method), 0.01) {
            Verdict::Sensitive { share: Some(s) } => {
                // Means of a few decimals: 1e-15 relative; 1e-12 is slack.
                assert!((s - 0.4).abs() < 1e-12, "{s}");
            }
            v => panic!("{v:?}"),
        }
        // A control at zero, tightly: inert at a margin of 0.05; inconclusive at 0.001.
        let null = Blocked::new(&[vec![-0.001, 0.0, 0.001], vec![0.001, 0.0, -0.001]]).unwrap();
        assert_eq!(Verdict::decide(&null, null.p(), None, 0.05), Verdict::Inert);
        assert_eq!(
            Verdict::decide(&null, null.p(), None, 0.0001),
            Verdict::Inconclusive
        );
    }
}
