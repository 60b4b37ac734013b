//! Paired comparison of two variants run on the same seeds: each seed shares the base, the
//! prompt draws and the held-out problems between the two, so the per-seed, per-problem
//! differences are what to average. The primary interval is the Student-t interval of the
//! per-seed mean differences (what the field reports), with its two-sided p-value and
//! Holm's correction across the arms of one comparison; the secondary one is a bootstrap
//! that respects the crossed design (seeds and one shared draw of problems).

use deltarl_schemas::seed::Rng;

use deltarl_eval::stats::{Estimate, DRAWS};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// One seed's per-problem scores: (variant, baseline) for each problem both evaluated.
#[derive(Clone, Debug)]
pub struct Pair {
    pub problems: Vec<(f64, f64)>,
}

/// The mean paired difference (variant − baseline) and its 95 % percentile interval, for a
/// crossed design: every seed is graded on the same problems, so a replicate draws the
/// seeds with replacement *and one* draw of problems with replacement that applies to
/// every drawn seed (2,000 draws, seeded). Only problems every seed evaluated count. A
/// problem that is hard for both variants under every seed thus moves all seeds together,
/// as it does in the data; drawing problems per seed would treat the seeds' shared problem
/// set as independent samples and narrow the interval.
pub fn paired_bootstrap(pairs: &[Pair], seed: u64) -> Estimate {
    let Some(d) = crossed(pairs) else {
        return Estimate::NONE;
    };
    let (n_seeds, n_problems) = (d.len(), d[0].len());
    let mean_of = |seeds: &[usize], problems: &[usize]| {
        let total: f64 = seeds
            .iter()
            .map(|&s| problems.iter().map(|&p| d[s][p]).sum::<f64>())
            .sum();
        total / (seeds.len() * problems.len()) as f64
    };
    let all_seeds: Vec<usize> = (0..n_seeds).collect();
    let all_problems: Vec<usize> = (0..n_problems).collect();
    let mut rng = Rng::new(seed);
    let draws = (0..DRAWS)
        .map(|_| {
            let seeds: Vec<usize> = (0..n_seeds)
                .map(|_| rng.below(n_seeds as u64) as usize)
                .collect();
            let problems: Vec<usize> = (0..n_problems)
                .map(|_| rng.below(n_problems as u64) as usize)
                .collect();
            mean_of(&seeds, &problems)
        })
        .collect();
    Estimate::from_draws(mean_of(&all_seeds, &all_problems), draws)
}

/// The differences as a seeds x problems matrix. Callers build every pair from the same
/// problem ids in the same order (compare's table: the problems every seed evaluated);
/// pairs of different lengths are refused.
fn crossed(pairs: &[Pair]) -> Option<Vec<Vec<f64>>> {
    let n = pairs.iter().map(|p| p.problems.len()).min()?;
    if n == 0 || pairs.iter().any(|p| p.problems.len() != n) {
        return None;
    }
    Some(
        pairs
            .iter()
            .map(|p| p.problems.iter().map(|(a, b)| a - b).collect())
            .collect(),
    )
}

/// The two-sided p-value of the paired t-test that the mean of `xs` (per-seed differences)
/// is 0: t = mean / (sd / sqrt(n)) with n − 1 degrees of freedom. NaN with fewer than two
/// values; 0 or 1 when every difference is the same (0 when that value is not 0).
pub fn t_test_p(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return f64::NAN;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    if var == 0.0 {
        return if mean == 0.0 { 1.0 } else { 0.0 };
    }
    let t = mean / (var / n as f64).sqrt();
    StudentsT::new(0.0, 1.0, (n - 1) as f64).map_or(f64::NAN, |d| 2.0 * d.sf(t.abs()))
}

/// Holm's step-down adjustment of the p-values of one family of tests (the arms of one
/// comparison against the same baseline): sorted ascending, the i-th (from 0) is multiplied
/// by (m − i), made non-decreasing, and capped at 1; returned in the input's order. A NaN
/// stays NaN and does not count in m.
pub fn holm(ps: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..ps.len()).filter(|&i| !ps[i].is_nan()).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    let m = order.len();
    let mut out = vec![f64::NAN; ps.len()];
    let mut running = 0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max((ps[i] * (m - rank) as f64).min(1.0));
        out[i] = running;
    }
    out
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
        // f64 means of three numbers: ~1e-16; the t quantile 4.302653 is given to 7 digits (±5e-7
        //  relative), so the interval to 1e-6.
        assert!((m - 0.6).abs() < 1e-12);
        // t(2) = 4.302653 (tables print 4.303).
        assert!((ci - 4.302653 * 0.1 / 3f64.sqrt()).abs() < 1e-6);
        assert!(mean_ci(&[0.4]).1.is_nan());
    }

    #[test]
    fn t_test_p_by_hand() {
        // 1, 2, 3: mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.4641, 2 df: p = 2 (1 - F(t)) =
        // 1 - t / sqrt(t^2 + 2) (the t(2) distribution's closed form) = 0.074180.
        let t = 2.0 * 3f64.sqrt();
        let want = 1.0 - t / (t * t + 2.0).sqrt();
        // The same closed form in f64 both ways (1e-9 covers the series' truncation); the printed
        //  0.074180 is rounded to 6 decimals (±5e-7).
        assert!((t_test_p(&[1.0, 2.0, 3.0]) - want).abs() < 1e-9);
        assert!((want - 0.074180).abs() < 1e-6);
        // Symmetric in the sign; degenerate cases.
        assert!((t_test_p(&[-1.0, -2.0, -3.0]) - want).abs() < 1e-9);
        assert_eq!(t_test_p(&[0.5, 0.5]), 0.0);
        assert_eq!(t_test_p(&[0.0, 0.0, 0.0]), 1.0);
        assert!(t_test_p(&[0.3]).is_nan());
    }

    #[test]
    fn holm_by_hand() {
        // Sorted 0.01, 0.03, 0.04 with m = 3: 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06.
        let adj = holm(&[0.04, 0.01, 0.03]);
        for (got, want) in adj.iter().zip([0.06, 0.03, 0.06]) {
            // Holm's products of a few f64 p-values: ~1e-16; 1e-12 is slack.
            assert!((got - want).abs() < 1e-12, "{adj:?}");
        }
        assert_eq!(adj.len(), 3);
        // Capped at 1; a NaN is left out of the family.
        let adj = holm(&[0.6, f64::NAN, 0.2]);
        assert!(
            (adj[0] - 0.6).abs() < 1e-12 && (adj[2] - 0.4).abs() < 1e-12,
            "{adj:?}"
        );
        assert!(adj[1].is_nan());
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
    }

    #[test]
    fn one_problem_draw_moves_every_seed() {
        // Four seeds with the same two problems: differences 1 and 0 on each. A shared draw
        // of problems gives means 0, 0.5, 1 with chances 1/4, 1/2, 1/4 whatever the seeds
        // drawn: the percentile interval is [0, 1]. Per-seed draws would average four
        // independent draws, 0 only with chance (1/4)^4 = 0.4 % (below 2.5 %).
        let p = Pair {
            problems: vec![(1.0, 0.0), (0.0, 0.0)],
        };
        let d = paired_bootstrap(&vec![p; 4], 5);
        assert_eq!((d.mean, d.lo, d.hi), (0.5, 0.0, 1.0), "{d:?}");
    }

    #[test]
    fn seeds_with_other_problem_counts_are_refused() {
        let a = Pair {
            problems: vec![(1.0, 0.0), (0.0, 0.0)],
        };
        let b = Pair {
            problems: vec![(1.0, 0.0)],
        };
        assert!(paired_bootstrap(&[a, b], 1).mean.is_nan());
        assert!(paired_bootstrap(&[], 1).mean.is_nan());
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
            // Means of exact quarters in f64: exact up to 1e-16; 1e-12 is slack.
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
