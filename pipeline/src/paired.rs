//! Paired comparison of two variants run on the same seeds: each seed shares the base, the
//! prompt draws and the held-out problems between the two, so the per-seed, per-problem
//! differences are what to average, and their spread over seeds *and* problems is the
//! uncertainty (a two-level bootstrap).

use deltarl_schemas::seed::Rng;

/// Per-problem scores of the variant and of the baseline on one seed, aligned by problem.
#[derive(Clone, Debug)]
pub struct Pair {
    pub variant: Vec<f64>,
    pub baseline: Vec<f64>,
}

/// The mean paired difference (variant − baseline) and its 95 % percentile interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Difference {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Resamples seeds with replacement and, within each drawn seed, problems with
/// replacement (2,000 draws, seeded), averaging the per-problem differences.
pub fn paired_bootstrap(pairs: &[Pair], seed: u64) -> Difference {
    let diffs: Vec<Vec<f64>> = pairs
        .iter()
        .map(|p| {
            p.variant
                .iter()
                .zip(&p.baseline)
                .map(|(a, b)| a - b)
                .collect()
        })
        .collect();
    let mean_of = |d: &[Vec<f64>]| {
        let per_seed: Vec<f64> = d
            .iter()
            .map(|x| x.iter().sum::<f64>() / x.len().max(1) as f64)
            .collect();
        per_seed.iter().sum::<f64>() / per_seed.len().max(1) as f64
    };
    let mean = mean_of(&diffs);
    if diffs.is_empty() || diffs.iter().any(Vec::is_empty) {
        return Difference {
            mean: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let mut rng = Rng::new(seed);
    let mut draws: Vec<f64> = (0..2000)
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
    draws.sort_by(f64::total_cmp);
    Difference {
        mean,
        lo: draws[49],
        hi: draws[1949],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_variants_differ_by_exactly_nothing() {
        let p = Pair {
            variant: vec![1.0, 0.0, 0.5],
            baseline: vec![1.0, 0.0, 0.5],
        };
        let d = paired_bootstrap(&[p.clone(), p], 1);
        assert_eq!(
            d,
            Difference {
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
                variant: (0..5).map(|p| 0.25 + f64::from(p + s) / 10.0).collect(),
                baseline: (0..5).map(|p| f64::from(p + s) / 10.0).collect(),
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
            variant: d.to_vec(),
            baseline: vec![0.0; d.len()],
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
