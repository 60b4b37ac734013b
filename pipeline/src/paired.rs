//! Paired comparison of two variants run on the same seeds: each seed shares the base, the
//! prompt draws and the held-out problems between the two, so the per-seed, per-problem
//! differences are what to average, and their spread over seeds *and* problems is the
//! uncertainty (a two-level bootstrap); and the Student-t interval of a mean over seeds.

use deltarl_schemas::seed::Rng;

use deltarl_eval::stats::{mean, Estimate, DRAWS};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// One seed's per-problem scores: (variant, baseline) for each problem both evaluated.
#[derive(Clone, Debug)]
pub struct Pair {
    pub problems: Vec<(f64, f64)>,
}

/// The mean paired difference (variant − baseline) and its 95 % percentile interval:
/// resamples seeds with replacement and, within each drawn seed, problems with replacement
/// (2,000 draws, seeded), averaging the per-problem differences.
pub fn paired_bootstrap(pairs: &[Pair], seed: u64) -> Estimate {
    let diffs: Vec<Vec<f64>> = pairs
        .iter()
        .map(|p| p.problems.iter().map(|(a, b)| a - b).collect())
        .collect();
    if diffs.is_empty() || diffs.iter().any(Vec::is_empty) {
        return Estimate::NONE;
    }
    let mean_of = |d: &[Vec<f64>]| mean(&d.iter().map(|x| mean(x)).collect::<Vec<f64>>());
    let mut rng = Rng::new(seed);
    let draws = (0..DRAWS)
        .map(|_| {
            let seeds: Vec<Vec<f64>> = (0..diffs.len())
                .map(|_| {
                    let d = &diffs[rng.below(diffs.len() as u64) as usize];
                    (0..d.len())
                        .map(|_| d[rng.below(d.len() as u64) as usize])
                        .collect()
                })
                .collect();
            mean_of(&seeds)
        })
        .collect();
    Estimate::from_draws(mean_of(&diffs), draws)
}

/// The two-sided 95 % Student-t quantile with `df` degrees of freedom.
fn t975(df: usize) -> f64 {
    StudentsT::new(0.0, 1.0, df as f64).map_or(f64::NAN, |t| t.inverse_cdf(0.975))
}

/// Mean and half-width of the 95 % CI of the mean.
pub fn mean_ci(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
    if n < 2 {
        return (mean, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t975(n - 1) * (var / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_ci_by_hand() {
        // 0.5, 0.6, 0.7: mean 0.6, sd 0.1, half-width t(2) * 0.1 / sqrt(3).
        let (m, ci) = mean_ci(&[0.5, 0.6, 0.7]);
        assert!((m - 0.6).abs() < 1e-12);
        // t(2) = 4.302653 (tables print 4.303).
        assert!((ci - 4.302653 * 0.1 / 3f64.sqrt()).abs() < 1e-6);
        assert!(mean_ci(&[0.4]).1.is_nan());
    }

    #[test]
    fn identical_variants_differ_by_exactly_nothing() {
        let p = Pair {
            problems: vec![(1.0, 1.0), (0.0, 0.0), (0.5, 0.5)],
        };
        let d = paired_bootstrap(&[p.clone(), p], 1);
        assert_eq!(
            d,
            Estimate {
                mean: 0.0,
                lo: 0.0,
                hi: 0.0
            }
        );
    }

    #[test]
    fn a_constant_shift_is_recovered_with_a_zero_width_interval() {
        // Every problem of every seed is 0.25 better: mean 0.25, no spread at all.
        let pairs: Vec<Pair> = (0..4)
            .map(|s| Pair {
                problems: (0..5)
                    .map(|p| (0.25 + f64::from(p + s) / 10.0, f64::from(p + s) / 10.0))
                    .collect(),
            })
            .collect();
        let d = paired_bootstrap(&pairs, 7);
        for x in [d.mean, d.lo, d.hi] {
            assert!((x - 0.25).abs() < 1e-12, "{d:?}");
        }
    }

    #[test]
    fn the_interval_covers_the_mean_and_shrinks_with_more_seeds() {
        // Differences of +1 / 0 / -1 by hand: mean (1 + 0 + 0 + 1) / 4 / ... per seed.
        let pair = |d: &[f64]| Pair {
            problems: d.iter().map(|&x| (x, 0.0)).collect(),
        };
        let few = vec![pair(&[1.0, 0.0]), pair(&[0.0, -1.0])];
        let d = paired_bootstrap(&few, 3);
        // Per seed 0.5 and -0.5: the mean is 0.
        assert_eq!(d.mean, 0.0);
        assert!(d.lo < 0.0 && d.hi > 0.0, "{d:?}");
        let many: Vec<Pair> = (0..40)
            .map(|i| {
                if i % 2 == 0 {
                    few[0].clone()
                } else {
                    few[1].clone()
                }
            })
            .collect();
        let e = paired_bootstrap(&many, 3);
        assert!(e.hi - e.lo < d.hi - d.lo, "{e:?} vs {d:?}");
    }
}
