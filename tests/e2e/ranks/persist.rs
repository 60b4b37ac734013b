//! `[features] persist` below full under two ranks: rank 0 gathers the rows and estimates
//! the coefficients where they are, and every file equals one process's.

use deltarl_schemas::layout::IN_STAGE_COEFFS;

use super::{both, config, same_bytes, stage_files, torchrun_cmd};
use crate::common::*;

#[test]
fn two_ranks_keeping_a_sketch_give_the_files_of_one_process() {
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
    let out = torchrun_cmd(&runs, &args("two")).output().unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let (one, two) = (runs.join("one"), runs.join("two"));
    // Rollouts, scores, the sketched features, the coefficients estimated in the features
    // stage and taken over, the evaluation: byte for byte.
    let a = stage_files(&one, 1);
    assert!(a.contains_key(IN_STAGE_COEFFS), "{:?}", a.keys());
    assert_eq!(a.len(), 6, "{:?}", a.keys());
    assert_eq!(differing(&a, &stage_files(&two, 1)), Vec::<String>::new());
    let w = "iter-0001/policy/model.safetensors";
    same_bytes(&two.join(w), &one.join(w));
}
