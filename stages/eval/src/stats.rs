//! A mean and its 95 % bootstrap interval, the one result type of the held-out evaluation
//! and of paired comparisons, and the seeded percentile bootstrap over problems.

use deltarl_schemas::seed::Rng;

/// A mean and its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Estimate {
    /// Nothing to estimate from (no problems, or no seeds).
    pub const NONE: Estimate = Estimate {
        mean: f64::NAN,
        lo: f64::NAN,
        hi: f64::NAN,
    };

    /// `mean` with the 2.5th and 97.5th percentiles of the bootstrap `draws`, nearest-rank:
    /// of n sorted draws, the ⌈0.025 n⌉-th and the ⌈0.975 n⌉-th (the 50th and 1,950th of
    /// 2,000).
    pub fn from_draws(mean: f64, mut draws: Vec<f64>) -> Estimate {
        if draws.is_empty() {
            return Estimate::NONE;
        }
        draws.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let r = (q * draws.len() as f64).ceil() as usize;
            draws[r.clamp(1, draws.len()) - 1]
        };
        Estimate {
            mean,
            lo: rank(0.025),
            hi: rank(0.975),
        }
    }
}

/// The mean of `xs` (NaN for none).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Draws of the bootstrap.
pub const DRAWS: usize = 2000;

/// The mean of per-problem `scores` with a seeded percentile bootstrap over problems.
pub fn bootstrap(scores: &[f64], seed: u64) -> Estimate {
    if scores.is_empty() {
        return Estimate::NONE;
    }
    let n = scores.len();
    let mut rng = Rng::new(seed);
    let draws = (0..DRAWS)
        .map(|_| {
            (0..n)
                .map(|_| scores[rng.below(n as u64) as usize])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    Estimate::from_draws(mean(scores), draws)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        // Draws 1..=2000: the 50th and the 1,950th.
        let e = Estimate::from_draws(0.0, (1..=2000).rev().map(f64::from).collect());
        assert_eq!((e.lo, e.hi), (50.0, 1950.0));
        // Draws 1..=1000: the 25th and the 975th.
        let e = Estimate::from_draws(0.0, (1..=1000).map(f64::from).collect());
        assert_eq!((e.lo, e.hi), (25.0, 975.0));
        // One draw is both ends.
        assert_eq!(
            Estimate::from_draws(1.0, vec![3.0]),
            Estimate {
                mean: 1.0,
                lo: 3.0,
                hi: 3.0
            }
        );
    }

    #[test]
    fn constant_scores_have_a_zero_width_interval() {
        let e = bootstrap(&[0.5; 40], 3);
        assert_eq!((e.mean, e.lo, e.hi), (0.5, 0.5, 0.5));
        assert!(bootstrap(&[], 3).mean.is_nan());
    }

    #[test]
    fn the_interval_matches_the_normal_approximation() {
        // 34 of 100 problems right: mean 0.34, standard error sqrt(0.34 * 0.66 / 100) =
        // 0.0474, so the 95 % interval is about 0.34 ± 0.093 = [0.247, 0.433]; 2,000 draws
        // put each percentile within ~0.01 of it.
        let xs: Vec<f64> = (0..100).map(|i| f64::from(u8::from(i % 3 == 0))).collect();
        let e = bootstrap(&xs, 7);
        assert_eq!(e.mean, 0.34);
        assert!((e.lo - 0.247).abs() < 0.02, "{e:?}");
        assert!((e.hi - 0.433).abs() < 0.02, "{e:?}");
        // Seeded: the same seed, the same interval.
        assert_eq!(bootstrap(&xs, 7), e);
    }
}
