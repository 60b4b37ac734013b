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
    let mut t = format!(
        "
| variant − {baseline} | seeds | mean paired difference | 95 % CI (t over seeds) | p (paired t) | p (Holm, {} arms) | 95 % CI (bootstrap, seeds x shared problems) | per seed |
|---|---|---|---|---|---|---|---|
",
        ps.iter().filter(|p| !p.is_nan()).count()
    );
    for ((a, p), adj) in arms.iter().zip(&ps).zip(&adjusted) {
        let (m, ci) = crate::paired::mean_ci(&a.per_seed);
        let boot = crate::paired::paired_bootstrap(&a.pairs, 0);
        let per: Vec<String> = a.per_seed.iter().map(|x| format!("{x:+.3}")).collect();
        t += &format!(
            "| {} | {} | {m:+.4} | ± {ci:.4} | {p:.3} | {adj:.3} | [{:+.4}, {:+.4}] | {} |\n",
            a.name,
            a.per_seed.len(),
            boot.lo,
            boot.hi,
            per.join(", ")
        );
    }
    t
}
