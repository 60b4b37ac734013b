//! `[features] persist`: a features file that keeps a sketch of the vectors or none of
//! them, the coefficients estimated in the features stage where the vectors are. What must
//! hold: those coefficients are the coeffs stage's from a full file, bit for bit, and so is
//! every file after them; only features.parquet changes.

use std::path::Path;

use deltarl_schemas::layout::IN_STAGE_COEFFS;
use deltarl_schemas::{
    read_meta, read_path, vector_layout, CoeffRow, CoeffsSummary, FeaturesSummary, Precision,
    PERSIST_KEY,
};

use crate::common::{deltarl, differing, iterate, micro_config, ok, parquet_files, summary_of};

/// The coefficient rows and summary of iteration 1 of `run`.
fn coeffs(runs: &Path, run: &str) -> (Vec<CoeffRow>, CoeffsSummary) {
    let root = runs.join(run);
    let rows = read_path::<CoeffRow>(&root.join("iter-0001/coeffs.parquet"))
        .unwrap()
        .0;
    (rows, summary_of::<CoeffsSummary>(&root, 1))
}

/// Every file of iteration 1 but the features stage's, the stage hashes in their metadata
/// left out of the comparison by comparing what differs by name.
fn differing_besides_features(runs: &Path, a: &str, b: &str) -> Vec<String> {
    let files = |run: &str| {
        let mut f = parquet_files(&runs.join(run));
        f.retain(|k, _| !k.contains("features"));
        f
    };
    differing(&files(a), &files(b))
}

/// Runs iteration 1 of `cfg` at each persist setting and checks what must hold.
fn check_settings(runs: &Path, cfg: &Path, extra: &[&str], sketch_dim: usize) {
    let dim_set = format!("features.persist_dim={sketch_dim}");
    let arms: [(&str, Vec<&str>); 3] = [
        ("full", vec![]),
        ("none", vec!["--set", "features.persist=\"none\""]),
        (
            "projected",
            vec!["--set", "features.persist=\"projected\"", "--set", &dim_set],
        ),
    ];
    for (run, sets) in &arms {
        let mut args = vec!["--iters", "1"];
        args.extend_from_slice(extra);
        args.extend_from_slice(sets);
        ok(iterate(runs, cfg, run, &args));
    }
    let full = coeffs(runs, "full");
    assert!(!full.0.is_empty());
    for (run, _) in &arms[1..] {
        // The coefficients and the diagnostics, bit for bit.
        assert_eq!(coeffs(runs, run), full, "{run}");
        // The update, the new policy and its evaluation: the same bytes (stage hashes in
        // file metadata included, so compared as files).
        let d = differing_besides_features(runs, "full", run);
        assert!(d.is_empty(), "{run}: {d:?}");
    }
    let at = |run: &str, f: &str| runs.join(run).join("iter-0001").join(f);
    // What each features file keeps, and says it keeps.
    let persist = |run: &str| {
        read_meta(&at(run, "features.parquet"))
            .unwrap()
            .extra
            .get(PERSIST_KEY)
            .cloned()
    };
    assert_eq!(persist("full"), None);
    assert_eq!(persist("none").as_deref(), Some("none"));
    assert_eq!(persist("projected").as_deref(), Some("projected"));
    let dim = |run: &str| {
        vector_layout(&at(run, "features.parquet"), "features")
            .unwrap()
            .unwrap()
            .dim
    };
    assert_eq!(dim("none"), 0);
    assert_eq!(dim("projected"), sketch_dim);
    assert!(dim("full") > sketch_dim);
    assert!(!at("full", IN_STAGE_COEFFS).exists());
    assert!(at("none", IN_STAGE_COEFFS).exists());
    // The sketch's agreement with full width, measured on the responses that carry
    // gradient.
    let s = summary_of::<FeaturesSummary>(&runs.join("projected"), 1);
    let a = s
        .sketch
        .expect("a sketch agreement under persist = projected");
    assert_eq!(a.dim as usize, sketch_dim);
    assert!(a.tokens > 0 && a.tokens <= s.tokens, "{a:?}");
    assert!((-1.0..=1.0).contains(&a.spearman), "{a:?}");
    assert!(a.max_abs_diff.is_finite(), "{a:?}");
    assert!(summary_of::<FeaturesSummary>(&runs.join("none"), 1)
        .sketch
        .is_none());
}

#[test]
fn in_stage_coefficients_are_the_file_estimates_and_only_features_change() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = micro_config(dir.path());
    check_settings(&runs, &cfg, &[], 8);

    // The bench measures the same agreement on a run's full-width files, a sketch at a
    // time: a row per dimension, each correlation a correlation.
    let out = ok(deltarl(
        &runs,
        &[
            "bench", "sketch", "--run", "full", "--iter", "1", "--dims", "4,8", "--reps", "1",
        ],
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 6 && (w[0] == "4" || w[0] == "8"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for w in &rows {
        let rho: f64 = w[1].parse().unwrap();
        assert!((-1.0..=1.0).contains(&rho), "{text}");
    }
    // The file of a run that keeps no vectors is refused by name.
    let out = deltarl(&runs, &["bench", "sketch", "--run", "none", "--iter", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("features.parquet") && err.contains("keeps no vectors"),
        "{err}"
    );

    // The coeffs stage rerun alone takes the features stage's coefficients over again.
    let before = coeffs(&runs, "none");
    ok(deltarl(
        &runs,
        &["stage", "coeffs", "--run", "none", "--iter", "1", "--force"],
    ));
    assert_eq!(coeffs(&runs, "none"), before);

    // Back to every vector: the features stage's coefficients are removed once its new
    // file is in place, and the coeffs stage estimates from the file, to the same values.
    ok(deltarl(
        &runs,
        &[
            "stage",
            "features",
            "--run",
            "none",
            "--iter",
            "1",
            "--force",
            "--set",
            "features.persist=\"full\"",
        ],
    ));
    let root = runs.join("none/iter-0001");
    assert!(!root.join(IN_STAGE_COEFFS).exists());
    assert!(vector_layout(&root.join("features.parquet"), "features")
        .unwrap()
        .is_some_and(|l| l.dim > 0));
    ok(deltarl(
        &runs,
        &[
            "stage",
            "coeffs",
            "--run",
            "none",
            "--iter",
            "1",
            "--set",
            "features.persist=\"full\"",
        ],
    ));
    assert_eq!(coeffs(&runs, "none"), before);
}

#[test]
fn in_stage_coefficients_of_a_bf16_model_are_the_file_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    // The warm-started tiny model at bf16 (its vectors stored at bf16): hidden 32, a
    // sketch of 4.
    let bf16 = ["--set", "model.dtype=\"bf16\""];
    let runs = dir.path().join("runs");
    check_settings(&runs, &cfg, &bf16, 4);
    let layout = |run: &str| {
        vector_layout(
            &runs.join(run).join("iter-0001/features.parquet"),
            "features",
        )
        .unwrap()
        .unwrap()
    };
    assert_eq!(layout("full").precision, Precision::Bf16);
    assert_eq!(layout("projected").precision, Precision::Bf16);
}

/// A sketch as wide as the vectors keeps nothing less: refused by key and value before the
/// run is recorded (the micro model's vectors have 32 dimensions; narrower sketches run in
/// the tests above).
#[test]
fn a_sketch_as_wide_as_the_vectors_is_refused_before_anything_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let out = iterate(
        &runs,
        &cfg,
        "wide",
        &[
            "--set",
            "features.persist=\"projected\"",
            "--set",
            "features.persist_dim=32",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`features.persist_dim` = 32") && err.contains("have 32 dimensions"),
        "{err}"
    );
    assert!(!runs.join("wide/run.toml").exists(), "{err}");
}
