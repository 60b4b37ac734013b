//! The tables of `compare.md` and `compare.csv`: each readout's means and paired
//! differences, and the held-out curve.

use deltarl_schemas::EvalRow;

use super::outcome::Outcome;
use super::paired_table::{half_width, paired_table, Scores};

/// The fraction of answers graded correct.
pub fn accuracy(rows: &[EvalRow]) -> f64 {
    rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64
}

/// Every run's held-out accuracy by iteration, as CSV.
pub fn curve_csv(results: &[Outcome]) -> String {
    let mut csv = String::from("variant,seed,iter,eval_accuracy\n");
    for r in results {
        for (i, a) in r.curve.iter().enumerate() {
            if let Some(a) = a {
                csv += &format!("{},{},{},{a:.4}\n", r.variant, r.seed, i + 1);
            }
        }
    }
    csv
}

/// One readout of every run's final policy: its accuracy and each problem's score.
#[derive(Default)]
pub struct Readout {
    pub outcomes: Vec<Outcome>,
    scores: Scores,
}

impl Readout {
    pub fn add(&mut self, variant: &str, seed: u64, curve: Vec<Option<f64>>, rows: &[EvalRow]) {
        self.scores.insert(
            (variant.to_string(), seed),
            deltarl_eval::problem_accuracy(rows),
        );
        self.outcomes.push(Outcome {
            variant: variant.to_string(),
            seed,
            curve,
            last: accuracy(rows),
        });
    }

    /// The means per variant, then (with several variants) the paired differences from
    /// `baseline`.
    pub fn tables(&self, variants: &[String], baseline: &str) -> String {
        let mut t = means_table(variants, &self.outcomes);
        if variants.len() > 1 {
            t += &paired_table(variants, baseline, &self.outcomes, &self.scores);
        }
        t
    }
}

/// Each variant's final held-out accuracy over seeds: the mean, its 95 % t-interval and
/// every seed's.
fn means_table(variants: &[String], results: &[Outcome]) -> String {
    let mut table = String::from(
        "| variant | seeds | final held-out accuracy (mean) | 95 % CI | per seed |\n\
         |---|---|---|---|---|\n",
    );
    for v in variants {
        let finals: Vec<f64> = results
            .iter()
            .filter(|r| &r.variant == v)
            .map(|r| r.last)
            .collect();
        let (m, ci) = crate::paired::mean_ci(&finals);
        let per: Vec<String> = finals.iter().map(|x| format!("{x:.3}")).collect();
        table += &format!(
            "| {v} | {} | {m:.4} | {} | {} |\n",
            finals.len(),
            half_width(ci),
            per.join(", ")
        );
    }
    table
}

/// The curve as a table: mean held-out accuracy over seeds at iteration 0 (the base, when
/// graded) and at about ten iterations evenly spaced up to the last.
pub fn curve_table(
    variants: &[String],
    results: &[Outcome],
    base: Option<f64>,
    iters: u32,
) -> String {
    let step = iters.div_ceil(10).max(1);
    let mut cols: Vec<u32> = (1..=iters).filter(|i| i % step == 0).collect();
    if cols.last() != Some(&iters) {
        cols.push(iters);
    }
    let head: Vec<String> = cols.iter().map(u32::to_string).collect();
    let mut t = format!(
        "\nMean held-out accuracy over seeds by iteration:\n\n| variant | 0 | {} |\n|---|---|{}\n",
        head.join(" | "),
        "---|".repeat(cols.len())
    );
    for v in variants {
        let cell = |i: u32| {
            let xs: Vec<f64> = results
                .iter()
                .filter(|r| &r.variant == v)
                .filter_map(|r| r.curve.get(i as usize - 1).copied().flatten())
                .collect();
            if xs.is_empty() {
                return "–".to_string();
            }
            format!("{:.3}", xs.iter().sum::<f64>() / xs.len() as f64)
        };
        let zero = base.map_or("–".to_string(), |b| format!("{b:.3}"));
        let cells: Vec<String> = cols.iter().map(|&i| cell(i)).collect();
        t += &format!("| {v} | {zero} | {} |\n", cells.join(" | "));
    }
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::outcome::outcome;
    use super::*;

    #[test]
    fn the_curve_table_means_seeds_at_evenly_spaced_iterations() {
        let results: Vec<Outcome> = vec![
            outcome("dapo", 1, vec![Some(0.5), Some(0.6), Some(0.7)], 0.7),
            outcome("dapo", 2, vec![Some(0.7), None, Some(0.8)], 0.8),
        ];
        let t = curve_table(&["dapo".into()], &results, Some(0.45), 3);
        assert!(t.contains("| variant | 0 | 1 | 2 | 3 |"), "{t}");
        // Iteration 2 has one seed; iteration 3 is (0.7 + 0.8) / 2.
        assert!(
            t.contains("| dapo | 0.450 | 0.600 | 0.600 | 0.750 |"),
            "{t}"
        );
        // 25 iterations: every third, and the last.
        let t = curve_table(&["dapo".into()], &results, None, 25);
        assert!(
            t.contains("| variant | 0 | 3 | 6 | 9 | 12 | 15 | 18 | 21 | 24 | 25 |"),
            "{t}"
        );
    }
}
