//! What every benchmark is given, and the medians they report.

/// What every benchmark is given: repetitions (the median is reported) and threads.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub reps: usize,
    pub threads: usize,
}

/// The median of `v` (the upper one of an even count); `v` is never empty here.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median over `reps` runs of `f`'s wall time in seconds.
pub fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..reps)
            .map(|_| {
                let t = std::time::Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}
