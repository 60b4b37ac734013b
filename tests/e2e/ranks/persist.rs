//! `[features] persist` below full under two and four ranks: each rank holds its own rows'
//! vectors, the ranks estimate the coefficients together (each pass's per-response results
//! exchanged), and every file equals one process's.

use deltarl_schemas::layout::IN_STAGE_COEFFS;

use super::{both, config, same_bytes, stage_files, torchrun_n};
use crate::common::*;

#[test]
fn ranks_keeping_a_sketch_give_the_files_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    // The micro model's vectors have 32 dimensions; the sketch keeps 8.
    let sets = [
        "--set",
        "features.persist=\"projected\"",
        "--set",
        "features.persist_dim=8",
    ];
    let args = |run: &'static str| {
        let mut a = vec!["iterate", "--config", c, "--run", run, "--iters", "1"];
        a.extend_from_slice(&sets);
        a
    };
    ok(deltarl(&runs, &args("one")));
    let one = runs.join("one");
    let a = stage_files(&one, 1);
    assert!(a.contains_key(IN_STAGE_COEFFS), "{:?}", a.keys());
    assert_eq!(a.len(), 6, "{:?}", a.keys());
    for (n, run) in [(2, "two"), (4, "four")] {
        let out = torchrun_n(&runs, n, &args(run)).output().unwrap();
        assert!(out.status.success(), "{}", both(&out));
        let many = runs.join(run);
        // Rollouts, scores, the sketched features, the coefficients estimated in the
        // features stage and taken over, the evaluation: byte for byte.
        assert_eq!(
            differing(&a, &stage_files(&many, 1)),
            Vec::<String>::new(),
            "{n}"
        );
        let w = "iter-0001/policy/model.safetensors";
        same_bytes(&many.join(w), &one.join(w));
    }
}
