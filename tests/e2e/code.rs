//! Code rewards end to end: the built-in `tiny-code` task through every stage with its
//! programs run in the sandbox, a user's APPS-style file of code prompts, and a sandbox
//! setting refused before anything is recorded. Needs bubblewrap (`make sandbox`).

use crate::common::{iterate, micro_config, ok, run_python, variant};

/// The micro model on `tiny-code`: two iterations, scores and eval say how every program
/// did, and polars reads it all.
#[test]
fn the_code_task_runs_every_stage_with_programs_in_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "code.toml",
        "[data]\nsource = \"tiny-code\"\ntrain_size = 700\n[rollout]\nmax_new_tokens = 32\n\
         [eval]\nevery = 1\n[warmstart]\nsteps = 300\n[score.code]\nworkers = 2\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "c", &["--iters", "2"]));
    let run = runs.join("c");
    run_python(
        r#"
import sys, polars as pl
run = sys.argv[1]
for it in (1, 2):
    s = pl.read_parquet(f"{run}/iter-000{it}/scores.parquet")
    assert s["reward_kind"].unique().to_list() == ["code"], s
    assert s["cases_total"].unique().to_list() == [5], s["cases_total"].unique()
    known = {"passed", "wrong_answer", "runtime_error", "time_limit", "memory_limit", "no_program", "sandbox_failure"}
    outcomes = set(s["outcome"].to_list())
    assert outcomes <= known and "sandbox_failure" not in outcomes, outcomes
    # The reward is the verdict: 1 exactly when every case passed.
    assert (s.filter(pl.col("correct"))["outcome"] == "passed").all()
    assert ((s["reward"] - s["overlong_penalty"] == 1.0) == s["correct"]).all()
    assert (s["cases_passed"] <= s["cases_total"]).all()
    # The warm start taught the answer's shape: most responses are programs that run.
    ran = s["outcome"].is_in(["passed", "wrong_answer"]).mean()
    assert ran >= 0.5, (ran, s["outcome"].value_counts())
    e = pl.read_parquet(f"{run}/iter-000{it}/eval.parquet")
    assert e["benchmark"].unique().to_list() == ["tiny-code-test"], e
    assert e["outcome"].null_count() == 0, e
    assert ((e["outcome"] == "passed") == e["correct"]).all()
"#,
        &[&run],
    );
}

/// A file of code prompts in APPS's layout (stdin/stdout cases) next to a math one, routed
/// by `data_source`; and a sandbox setting that cannot work refused by key, with no run
/// recorded.
#[test]
fn a_file_of_code_prompts_is_routed_and_graded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("mixed.jsonl");
    let io = |a: u32, b: u32| {
        serde_json::json!({"inputs": [format!("{a} {b}\n")], "outputs": [format!("{}\n", a + b)]})
            .to_string()
    };
    let mut lines: Vec<String> = (0..6)
        .map(|i| {
            serde_json::json!({"id": format!("add-{i}"), "question": format!("{i}+1"), "data_source": "apps",
                "input_output": io(i, 1)})
            .to_string()
        })
        .collect();
    lines
        .push(r#"{"id": "m", "problem": "1+2*3=?", "answer": "7", "data_source": "arith"}"#.into());
    std::fs::write(&data, lines.join("\n")).unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "file.toml",
        &format!(
            "[data]\nsource = {:?}\nrewards = {{ apps = \"code\" }}\n[rollout]\nprompts_per_iter = 7\n\
             [eval]\nevery = 0\n",
            data.display().to_string()
        ),
    );
    let runs = dir.path().join("runs");
    let out = iterate(
        &runs,
        &cfg,
        "bad",
        &["--set", "score.code.python=\"/opt/none/python3\""],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/opt/none/python3"),
        "{err}"
    );
    assert!(
        !runs.join("bad/run.toml").exists(),
        "a refused run was recorded"
    );
    ok(iterate(&runs, &cfg, "f", &[]));
    run_python(
        r#"
import sys, polars as pl
s = pl.read_parquet(sys.argv[1] + "/iter-0001/scores.parquet")
code = s.filter(pl.col("reward_kind") == "code")
math = s.filter(pl.col("reward_kind") == "math")
assert code.height == 24 and math.height == 4, s["reward_kind"].value_counts()
assert code["cases_total"].unique().to_list() == [1], code
assert code["outcome"].null_count() == 0 and math["outcome"].null_count() == 4
r = pl.read_parquet(sys.argv[1] + "/iter-0001/rollouts.parquet")
assert r.filter(pl.col("prompt_id") == "add-0")["gold"][0].startswith('{"stdio"'), r["gold"][0]
"#,
        &[&runs.join("f")],
    );
}
