//! `deltarl compare` end to end: variants, seeds, the paired tables and both readouts.

use crate::common::*;

/// `deltarl compare` pairs each variant with the baseline seed by seed: the table has the
/// mean paired difference, its t-interval over seeds, the t-test's p-value and its Holm
/// adjustment over the arms, and the bootstrap over seeds and shared problems. A
/// labelled variant (an ablation) runs with its keys set; the shared base is graded once as
/// iteration 0.
#[test]
fn compare_reports_paired_differences_from_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let out = ok(deltarl(
        &runs,
        &[
            "compare",
            "--config",
            cfg.to_str().unwrap(),
            "--variants",
            "dapo,delta,k0:algorithm=delta;coeffs.refine_steps=0",
            "--seeds",
            "2",
            "--iters",
            "1",
            "--name",
            "cmp",
        ],
    ));
    let md = std::fs::read_to_string(runs.join("cmp/compare.md")).unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("variant − dapo"), "{printed}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| delta |") && l.contains('['))
        .unwrap_or_else(|| panic!("{md}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[2], "2", "{row}");
    // The mean paired difference is the mean of the per-seed differences.
    let per: Vec<f64> = cells[8].split(", ").map(|x| x.parse().unwrap()).collect();
    assert_eq!(per.len(), 2, "{row}");
    let mean: f64 = cells[3].parse().unwrap();
    // The table prints the mean to 4 decimals (±5e-5) and each seed's to 3 (±5e-4, so
    // their mean too): at most 5.5e-4 apart, under 1e-3.
    assert!((mean - (per[0] + per[1]) / 2.0).abs() < 1e-3, "{row}");
    // Two arms against dapo: Holm's p is at least the plain one, and at most 1.
    let (p, holm): (f64, f64) = (cells[5].parse().unwrap(), cells[6].parse().unwrap());
    assert!(
        (0.0..=1.0).contains(&p) && holm >= p && holm <= 1.0,
        "{row}"
    );
    assert!(md.contains("p (Holm, 2 arms)"), "{md}");
    assert!(md.lines().any(|l| l.starts_with("| k0 | 2 |")), "{md}");
    let k0 = std::fs::read_to_string(runs.join("cmp-k0-s2/run.toml")).unwrap();
    assert!(k0.contains("refine_steps = 0"), "{k0}");
    assert!(
        md.contains("Shared warm-started base (iteration 0)"),
        "{md}"
    );
    assert!(runs.join("cmp/base-eval.parquet").is_file());
    // The second readout: every final policy sampled as the rollout samples, 4 answers a
    // problem, with its own paired table.
    assert!(
        md.contains("sampled as the rollout samples (4 answers a problem at temperature 1"),
        "{md}"
    );
    assert_eq!(md.matches("p (Holm, 2 arms)").count(), 2, "{md}");
    let (rows, _) = deltarl_schemas::read_path::<deltarl_schemas::EvalRow>(
        &runs.join("cmp/sampled/cmp-delta-s2.parquet"),
    )
    .unwrap();
    let problems: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.problem_id.as_str()).collect();
    assert!(
        !problems.is_empty() && rows.len() == 4 * problems.len(),
        "{}",
        rows.len()
    );
    assert!(md.contains("| variant | 0 | 1 |"), "the curve table: {md}");
    // A follow-up comparison on the same base (`--base`): no warm start of its own, the same
    // base graded as iteration 0, and a run with the same variant and seed ends where the
    // first comparison's did.
    let base = runs.join("cmp-dapo-s1/base");
    // `dapo` at one seed, `first_seed`, on that base.
    let again_at = |first_seed: &str| {
        ok(deltarl(
            &runs,
            &[
                "compare",
                "--config",
                cfg.to_str().unwrap(),
                "--variants",
                "dapo",
                "--first-seed",
                first_seed,
                "--seeds",
                "1",
                "--iters",
                "1",
                "--name",
                "again",
                "--base",
                base.to_str().unwrap(),
            ],
        ))
    };
    let again = again_at("1");
    let (first, said) = (
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&again.stderr),
    );
    assert!(
        first.contains("warmstart") && !said.contains("warmstart"),
        "{said}"
    );
    let md2 = std::fs::read_to_string(runs.join("again/compare.md")).unwrap();
    let line = |md: &str, start: &str| {
        md.lines()
            .find(|l| l.starts_with(start))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{md}"))
    };
    let shared = "Shared warm-started base";
    assert_eq!(line(&md, shared), line(&md2, shared));
    let seed1 = |md: &str| {
        let row = line(md, "| dapo |");
        row.split('|')
            .nth(5)
            .unwrap()
            .split(", ")
            .next()
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(seed1(&md), seed1(&md2), "{md}\n{md2}");
    strata_reads_two_bases_as_blocks(&runs, &cfg, &md);
    // The same comparison continued in a part of its own (another seed, alone): the base's
    // readouts stay the ones drawn with the comparison's lowest seed, not redrawn with the
    // seed this part starts at.
    let base_readouts = || {
        ["base-eval.parquet", "base-sampled.parquet"]
            .map(|f| std::fs::read(runs.join("again").join(f)).unwrap())
    };
    let before = base_readouts();
    again_at("2");
    assert!(runs.join("again-dapo-s2").is_dir());
    assert!(before == base_readouts(), "the base was graded again");
    let err = deltarl(
        &runs,
        &[
            "compare",
            "--config",
            cfg.to_str().unwrap(),
            "--base",
            "nowhere",
        ],
    );
    let err = String::from_utf8_lossy(&err.stderr).into_owned();
    assert!(err.contains("--base nowhere: not a policy folder"), "{err}");
    assert!(
        !runs.join("compare").exists(),
        "a refused comparison writes nothing"
    );
    // Refusals name what is wrong: a baseline that is not compared, a variant that would
    // change what the runs share.
    for (variants, baseline, says) in [
        ("dapo,delta", "grpo", "not among --variants"),
        ("dapo,x:warmstart.steps=1", "dapo", "sets `warmstart.steps`"),
    ] {
        let args = [
            "compare",
            "--config",
            cfg.to_str().unwrap(),
            "--variants",
            variants,
            "--baseline",
            baseline,
        ];
        let err = String::from_utf8_lossy(&deltarl(&runs, &args).stderr).into_owned();
        assert!(err.contains(says), "{err}");
    }
}

/// The per-seed differences of an arm's row in one of compare.md's paired tables (the
/// `nth` table: 0 greedy, 1 sampled), to the 3 decimals printed.
fn per_seed(md: &str, arm: &str, nth: usize) -> Vec<f64> {
    let row = md
        .lines()
        .filter(|l| l.starts_with(&format!("| {arm} |")) && l.contains('['))
        .nth(nth)
        .unwrap_or_else(|| panic!("{md}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    cells[8].split(", ").map(|x| x.parse().unwrap()).collect()
}

/// `deltarl strata` over `cmp` and a second comparison from another warm-started base
/// (`--first-seed 5`): each arm's blocked mean is the mean of both bases' per-seed
/// differences (those of each compare.md), on N − B degrees of freedom; the margin is a
/// share of DAPO's gain over each base (read from base-sampled.parquet, which compare now
/// writes); the rule is applied to the control; comparisons with other arms are refused.
fn strata_reads_two_bases_as_blocks(runs: &std::path::Path, cfg: &std::path::Path, md: &str) {
    ok(deltarl(
        runs,
        &[
            "compare",
            "--config",
            cfg.to_str().unwrap(),
            "--variants",
            "dapo,delta,k0:algorithm=delta;coeffs.refine_steps=0",
            "--seeds",
            "2",
            "--first-seed",
            "5",
            "--iters",
            "1",
            "--name",
            "cmp5",
        ],
    ));
    let md5 = std::fs::read_to_string(runs.join("cmp5/compare.md")).unwrap();
    assert!(runs.join("cmp5/base-sampled.parquet").is_file());
    assert!(
        md5.contains("The same base sampled as the rollout samples"),
        "{md5}"
    );
    let out = ok(deltarl(
        runs,
        &[
            "strata",
            "--comparison",
            "cmp",
            "--comparison",
            "cmp5",
            "--control",
            "delta",
            "--method",
            "k0",
        ],
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("sampled readout (primary): 2 bases (cmp, cmp5)"),
        "{text}"
    );
    assert!(text.contains("greedy readout (secondary)"), "{text}");
    assert!(
        text.contains("Decision (the rule, on the sampled readout): "),
        "{text}"
    );
    // The sampled table comes first: delta's row there against compare's own per-seed
    // differences in both comparisons (their second paired table).
    for (arm, nth_strata) in [("delta", 0), ("k0", 0), ("delta", 1)] {
        let table = if nth_strata == 0 { 1 } else { 0 };
        let mut all = per_seed(md, arm, table);
        all.extend(per_seed(&md5, arm, table));
        assert_eq!(all.len(), 4, "{all:?}");
        let row = text
            .lines()
            .filter(|l| l.starts_with(&format!("| {arm} |")))
            .nth(nth_strata)
            .unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[2], "4", "{row}");
        // 4 seeds, 2 bases: 2 degrees of freedom.
        assert!(cells[4].ends_with("(2)"), "{row}");
        let mean: f64 = cells[3].parse().unwrap();
        // Printed to 4 decimals (±5e-5) against four differences printed to 3 (their mean
        // ±5e-4): under 1e-3 apart.
        let want = all.iter().sum::<f64>() / 4.0;
        assert!((mean - want).abs() < 1e-3, "{row} vs {all:?}");
        // The per-base columns are compare's own.
        assert_eq!(cells[8].split(" / ").count(), 2, "{row}");
    }
    // A comparison whose arms differ is refused, naming both.
    let err = deltarl(
        runs,
        &["strata", "--comparison", "cmp", "--comparison", "again"],
    );
    let err = String::from_utf8_lossy(&err.stderr).into_owned();
    assert!(
        err.contains("comparison again has arms [\"dapo\"]"),
        "{err}"
    );
    let err = deltarl(
        runs,
        &["strata", "--comparison", "cmp", "--control", "oracle"],
    );
    let err = String::from_utf8_lossy(&err.stderr).into_owned();
    assert!(err.contains("\"oracle\" is not an arm"), "{err}");
}
