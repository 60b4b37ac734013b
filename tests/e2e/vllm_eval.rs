//! The evaluation through vLLM when the rollout samples with it: the server the rollout
//! keeps is reloaded with the new policy and probed before the held-out answers are drawn,
//! on the real vLLM CPU backend (the untied tiny model of `vllm_kept`; `concurrency = 1`,
//! so each request is computed alone and a rerun on a fresh server draws the same answers).

use crate::common::*;
use crate::vllm::servers_of;
use crate::vllm_kept::{stderr_of, untied};

/// Two iterations with an evaluation each start one server: the first rollout starts it,
/// and each evaluation and the second rollout reload it with the policy they sample, each
/// reload probed to f32 round-off. A forced rerun of an evaluation in a process of its own
/// starts a server of its own (its log `vllm-eval.log`) and writes the same file, byte for
/// byte.
#[test]
fn evaluations_draw_through_the_kept_server() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &untied(dir.path(), "concurrency = 1"),
        "eval.toml",
        "[eval]\nevery = 1\nproblems = 8\n",
    );
    let runs = dir.path().join("runs");
    let out = ok(iterate(&runs, &cfg, "v", &["--iters", "2"]));
    let err = stderr_of(&out);
    assert_eq!(err.matches("vLLM server started").count(), 1, "{err}");
    assert_eq!(err.matches("vLLM server reloaded").count(), 3, "{err}");
    let root = runs.join("v");
    for it in [1, 2] {
        let eval: EvalSummary = summary_of(&root, it);
        assert_eq!(eval.engine, Engine::Vllm, "{eval:?}");
        let Some(Acquired::Reloaded { probe_max_abs, .. }) = eval.engine_server else {
            panic!("iteration {it}: {eval:?}, not reloaded");
        };
        // The evaluation samples the policy iteration `it` wrote: the one that samples
        // iteration `it + 1`.
        let tol = logprob_tolerance(&root, it + 1);
        assert!(probe_max_abs <= tol, "{eval:?} (tolerance {tol:e})");
        let (rows, _) = deltarl_schemas::read_path::<deltarl_schemas::EvalRow>(
            &root.join(format!("iter-{it:04}/eval.parquet")),
        )
        .unwrap();
        assert_eq!(rows.len(), 8, "iteration {it}");
        assert!(rows.iter().any(|r| r.response_len > 0), "{rows:?}");
    }
    assert!(servers_of(&root).is_empty(), "{:?}", servers_of(&root));

    let file = root.join("iter-0001/eval.parquet");
    let before = std::fs::read(&file).unwrap();
    let out = ok(deltarl(
        &runs,
        &["stage", "eval", "--run", "v", "--iter", "1", "--force"],
    ));
    let err = stderr_of(&out);
    assert_eq!(err.matches("vLLM server started").count(), 1, "{err}");
    assert!(root.join("iter-0001/vllm-eval.log").exists());
    let eval: EvalSummary = summary_of(&root, 1);
    assert!(
        matches!(eval.engine_server, Some(Acquired::Started { .. })),
        "{eval:?}"
    );
    assert!(
        before == std::fs::read(&file).unwrap(),
        "eval.parquet differs when drawn by a fresh server"
    );
    assert!(servers_of(&root).is_empty(), "{:?}", servers_of(&root));
}
