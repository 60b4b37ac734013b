//! The table of each variant's paired difference from the baseline in `compare.md`.

use std::collections::BTreeMap;

use super::outcome::Outcome;

/// Per (variant, seed): each held-out problem's score.
pub type Scores = BTreeMap<(String, u64), BTreeMap<String, f64>>;

/// The paired-difference table: each variant against `baseline` on the seeds both ran.
/// Primary: the t-interval over seeds, its two-sided p-value and the Holm-adjusted p over
/// the arms of this table; secondary: the crossed bootstrap (seeds and one shared draw of
/// the problems every seed of the pair evaluated).
pub fn paired_table(
    variants: &[String],
    baseline: &str,
    results: &[Outcome],
    scores: &Scores,
) -> String {
    struct Arm {
        name: String,
        per_seed: Vec<f64>,
        pairs: Vec<crate::paired::Pair>,
    }
    let mut arms = Vec::new();
    for v in variants.iter().filter(|v| v.as_str() != baseline) {
        let mut per_seed = Vec::new();
        let mut graded = Vec::new();
        for r in results.iter().filter(|r| &r.variant == v) {
            let base = results
                .iter()
                .find(|b| b.variant == baseline && b.seed == r.seed);
            let (Some(b), Some(sv), Some(sb)) = (
                base,
                scores.get(&(v.clone(), r.seed)),
                scores.get(&(baseline.to_string(), r.seed)),
            ) else {
                continue;
            };
            per_seed.push(r.last - b.last);
            graded.push((sv, sb));
        }
        // Problems every seed of both variants evaluated, in id order.
        let common: Vec<&String> = graded.first().map_or_else(Vec::new, |(sv, _)| {
            sv.keys()
                .filter(|k| {
                    graded
                        .iter()
                        .all(|(a, b)| a.contains_key(*k) && b.contains_key(*k))
                })
                .collect()
        });
        let pairs = graded
            .iter()
            .map(|(sv, sb)| crate::paired::Pair {
                problems: common.iter().map(|k| (sv[*k], sb[*k])).collect(),
            })
            .collect();
        arms.push(Arm {
            name: v.clone(),
            per_seed,
            pairs,
        });
    }
    let ps: Vec<f64> = arms
        .iter()
        .map(|a| crate::paired::t_test_p(&a.per_seed))
        .collect();
    let adjusted = crate::paired::holm(&ps);
    // Holm's family is the arms that have a p-value (two seeds or more).
    let holm = match ps.iter().filter(|p| !p.is_nan()).count() {
        0 => "p (Holm)".to_string(),
        1 => "p (Holm, 1 arm)".to_string(),
        m => format!("p (Holm, {m} arms)"),
    };
    let mut t = format!(
        "
| variant − {baseline} | seeds | mean paired difference | 95 % CI (t over seeds) | p (paired t) | {holm} | 95 % CI (bootstrap, seeds x shared problems) | per seed |
|---|---|---|---|---|---|---|---|
"
    );
    for ((a, p), adj) in arms.iter().zip(&ps).zip(&adjusted) {
        let (m, ci) = crate::paired::mean_ci(&a.per_seed);
        let boot = crate::paired::paired_bootstrap(&a.pairs, 0);
        let per: Vec<String> = a.per_seed.iter().map(|x| format!("{x:+.3}")).collect();
        t += &format!(
            "| {} | {} | {m:+.4} | {} | {} | {} | [{:+.4}, {:+.4}] | {} |\n",
            a.name,
            a.per_seed.len(),
            half_width(ci),
            shown(*p, 3),
            shown(*adj, 3),
            boot.lo,
            boot.hi,
            per.join(", ")
        );
    }
    t
}

/// A statistic a table prints, or `n/a` where it is undefined (one seed has no spread).
pub fn shown(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        "n/a".to_string()
    } else {
        format!("{x:.decimals$}")
    }
}

/// A confidence interval's half-width as the tables print it, `± 0.0123`, or `n/a`.
pub fn half_width(ci: f64) -> String {
    if ci.is_nan() {
        "n/a".to_string()
    } else {
        format!("± {ci:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_statistics_read_n_a() {
        assert_eq!(shown(f64::NAN, 3), "n/a");
        assert_eq!(shown(0.01234, 3), "0.012");
        assert_eq!(half_width(f64::NAN), "n/a");
        assert_eq!(half_width(0.01234), "± 0.0123");
    }

    #[test]
    fn a_table_of_one_seed_says_no_arm_has_a_p_value() {
        use super::super::outcome::outcome;
        let results = vec![
            outcome("dapo", 1, vec![Some(0.5)], 0.5),
            outcome("delta", 1, vec![Some(0.5)], 0.75),
        ];
        let problems = |xs: &[f64]| -> BTreeMap<String, f64> {
            xs.iter()
                .enumerate()
                .map(|(i, x)| (format!("p{i}"), *x))
                .collect()
        };
        let mut scores = Scores::new();
        scores.insert(("dapo".into(), 1), problems(&[1.0, 0.0]));
        scores.insert(("delta".into(), 1), problems(&[1.0, 1.0]));
        let t = paired_table(&["dapo".into(), "delta".into()], "dapo", &results, &scores);
        assert!(t.contains("| p (paired t) | p (Holm) |"), "{t}");
        // One seed: +0.25 with no interval, no p; the bootstrap has one seed's problems.
        assert!(
            t.contains("| delta | 1 | +0.2500 | n/a | n/a | n/a | ["),
            "{t}"
        );
        assert!(!t.contains("NaN"), "{t}");
    }
}
