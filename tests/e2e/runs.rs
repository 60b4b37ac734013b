//! Iterations whose files open and join in polars, log their metrics, and rerun byte
//! for byte; the eval command.

use crate::common::*;

#[test]
fn two_iterations_open_and_join_in_polars() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let out = ok(iterate(&runs, &cfg, "m", &["--iters", "2"]));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("coeffs") && log.contains("cos(mu+, mu-)"),
        "{log}"
    );
    let root = runs.join("m");
    // Every stage's numbers reach metrics.jsonl and TensorBoard (read back with Python's
    // tensorboard package) as `<stage>/<key>` at step = iteration.
    run_python(
        r#"
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
ea = EventAccumulator(run + "/tb")
ea.Reload()
tags = set(ea.Tags()["scalars"])
for t in ["warmstart/final_loss", "score/accuracy", "coeffs/cos_before", "update/loss",
          "update/mismatch/max_abs", "eval/accuracy"]:
    assert t in tags, (t, sorted(tags))
assert [e.step for e in ea.Scalars("update/loss")] == [1, 2]
assert [e.step for e in ea.Scalars("eval/accuracy")] == [2]
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
seen = {(l["iter"], l["stage"]) for l in lines}
assert {(0, "warmstart"), (1, "update"), (2, "eval")} <= seen, seen
m = [l for l in lines if (l["iter"], l["stage"]) == (1, "score")][0]["metrics"]
assert 0.0 <= m["score/accuracy"] <= 1.0, m
"#,
        &[&root],
    );
    // The ratio's old log-probs are the trainer's (features pass); in f32 on CPU the
    // sampler's agree with them to 1e-5 on every trained token.
    for it in ["iter-0001", "iter-0002"] {
        let m = deltarl_schemas::Manifest::read(&root.join(it).join("manifest/update.json"))
            .unwrap()
            .unwrap();
        let mm = &m.summary["mismatch"];
        assert!(mm["tokens"].as_u64().unwrap() > 0, "{mm}");
        assert!(mm["max_abs"].as_f64().unwrap() <= 1e-5, "{mm}");
        let meta = deltarl_schemas::read_meta(&root.join(it).join("update.parquet")).unwrap();
        assert!(meta.extra["join"].contains("\"old_logprobs\":\"recompute\""));
    }
    for it in ["iter-0001", "iter-0002"] {
        for f in ["rollouts", "scores", "features", "coeffs", "update"] {
            assert!(
                root.join(it).join(format!("{f}.parquet")).exists(),
                "{it}/{f}"
            );
        }
        assert!(root.join(it).join("policy/model.safetensors").exists());
        assert!(root
            .join(it)
            .join("optimizer/optimizer.safetensors")
            .exists());
        // The Hugging Face folder holds the model only (engines load every safetensors).
        assert!(!root.join(it).join("policy/optimizer.safetensors").exists());
    }
    assert!(root.join("iter-0002/eval.parquet").exists());
    check_iteration_joins(&root, 32);
    let script = r#"
import sys, polars as pl
d = sys.argv[1] + "/iter-0001/"
key = ["prompt_id", "sample_idx"]
df = pl.read_parquet(d + "scores.parquet").join(pl.read_parquet(d + "coeffs.parquet"), on=key)
c = df.filter(pl.col("kept"))["coeff"].explode()
assert abs(c.mean() - 1.0) < 1e-4, c.mean()
u = pl.read_parquet(d + "update.parquet")
assert u.height == 1 and u["tokens"][0] > 0
"#;
    run_python(script, &[&root]);
    let status = ok(deltarl(&runs, &["status", "--run", "m"]));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("iter-0002") && !text.contains("missing"),
        "{text}"
    );

    // `deltarl report` (forwarded to deltarl-report): its polars aggregates agree with the
    // numbers each stage put in its manifest and with Python polars on the same files.
    let out = ok(deltarl(&runs, &["report", "--run", "m"]));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("reward_mean") && printed.contains("eval_accuracy"));
    let csv = std::fs::read_to_string(root.join("report.csv")).unwrap();
    let png = std::fs::read(root.join("report.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    for (row, it) in lines[1..].iter().zip(1..) {
        let cells: Vec<&str> = row.split(',').collect();
        let cell = |c: &str| -> Option<f64> {
            let i = header.iter().position(|h| *h == c).unwrap();
            cells[i].parse().ok()
        };
        let manifest = |stage: &str| -> serde_json::Value {
            let p = root.join(format!("iter-{it:04}/manifest/{stage}.json"));
            serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
        };
        let close = |a: Option<f64>, b: &serde_json::Value| {
            let b = b.as_f64().unwrap();
            assert!(a.is_some_and(|a| (a - b).abs() < 1e-6), "{a:?} vs {b}");
        };
        close(cell("iter"), &serde_json::json!(it));
        close(cell("accuracy"), &manifest("score")["summary"]["accuracy"]);
        close(
            cell("reward_mean"),
            &manifest("score")["summary"]["reward_mean"],
        );
        close(
            cell("cos_before"),
            &manifest("coeffs")["summary"]["cos_before"],
        );
        close(
            cell("clip_frac"),
            &manifest("update")["summary"]["clip_frac"],
        );
        if it == 2 {
            close(
                cell("eval_accuracy"),
                &manifest("eval")["summary"]["accuracy"],
            );
        } else {
            assert_eq!(cell("eval_accuracy"), None, "no eval in iteration 1");
        }
    }
    let script = r#"
import sys, polars as pl
root, csv = sys.argv[1], sys.argv[2]
rep = pl.read_csv(csv)
for it in (1, 2):
    d = f"{root}/iter-{it:04}/"
    row = rep.filter(pl.col("iter") == it)
    ent = pl.read_parquet(d + "features.parquet")["entropy"].explode().mean()
    length = pl.read_parquet(d + "scores.parquet")["response_len"].mean()
    assert abs(row["entropy"][0] - ent) < 1e-6, (row["entropy"][0], ent)
    assert abs(row["response_len"][0] - length) < 1e-9
"#;
    run_python(script, &[&root, &root.join("report.csv")]);
}

#[test]
fn eval_prints_the_benchmark_table() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "e", &["--iters", "0"]));
    let bench = arithmetic(dir.path(), "mini.jsonl", 6, &["easy", "hard"]);
    let out_file = dir.path().join("eval.parquet");
    let base = runs.join("e/base");
    let out = ok(deltarl(
        &runs,
        &[
            "eval",
            "--model",
            base.to_str().unwrap(),
            "--bench",
            bench.to_str().unwrap(),
            "--k",
            "3",
            "--temperature",
            "1.0",
            "--max-new-tokens",
            "24",
            "--template",
            "Q: {question}\nA: ",
            "--out",
            out_file.to_str().unwrap(),
        ],
    ));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("pass@k") && table.contains("mini") && table.contains(" 6 "),
        "{table}"
    );
    // The benchmark mixes two sources: a line for each, 3 problems apiece.
    assert!(
        table.contains("\n  easy") && table.contains("\n  hard"),
        "{table}"
    );
    let (rows, _) = deltarl_schemas::read_path::<deltarl_schemas::EvalRow>(&out_file).unwrap();
    assert_eq!(rows.len(), 18);
    assert_eq!(
        rows.iter()
            .filter(|r| r.data_source.as_deref() == Some("easy"))
            .count(),
        9
    );
}

/// A JSONL file of `n` problems of the built-in task's shape (`i+2*3=?`), their
/// `data_source` cycling through `sources`.
fn arithmetic(dir: &std::path::Path, name: &str, n: usize, sources: &[&str]) -> std::path::PathBuf {
    let path = dir.join(name);
    let lines: Vec<String> = (0..n)
        .map(|i| {
            serde_json::json!({
                "id": format!("{name}-{i}"),
                "problem": format!("{i}+2*3=?"),
                "answer": (i + 6).to_string(),
                "data_source": sources[i % sources.len()],
            })
            .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// `[eval] benchmarks` on a file dataset: both benchmarks evaluated in the loop, answers
/// and training scores carry their `data_source`, and metrics.jsonl has avg@k / pass@k per
/// benchmark and accuracy per source. Sampled at temperature 1 and top-p 0.7 (the authors'
/// validation): eval.parquet records both, and a rerun draws the same answers. Run for one
/// epoch (`--epochs 1`), which `status` shows.
#[test]
fn benchmarks_are_evaluated_in_the_loop_with_sources() {
    let dir = tempfile::tempdir().unwrap();
    let micro = micro_config(dir.path());
    let train = arithmetic(dir.path(), "train.jsonl", 16, &["easy", "hard"]);
    let b1 = arithmetic(dir.path(), "mini.jsonl", 6, &["s1", "s2"]);
    let b2 = arithmetic(dir.path(), "other.jsonl", 4, &["s3"]);
    let cfg = variant(
        &micro,
        "bench.toml",
        &format!(
            "[data]\nsource = {:?}\n[eval]\nevery = 1\nsamples = 2\ntemperature = 1.0\n\
             top_p = 0.7\nbenchmarks = [{:?}, {:?}]\n",
            train.display().to_string(),
            b1.display().to_string(),
            b2.display().to_string()
        ),
    );
    let runs = dir.path().join("runs");
    // 16 training prompts, 8 a batch: an epoch is two iterations.
    ok(iterate(&runs, &cfg, "b", &["--epochs", "1"]));
    let run = runs.join("b");
    assert!(run.join("iter-0002/eval.parquet").is_file());
    assert!(!run.join("iter-0003").exists());
    let status = ok(deltarl(&runs, &["status", "--run", "b"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("[epoch 1 (batch 1 of 2)]"), "{status}");
    assert!(status.contains("[epoch 1 (batch 2 of 2)]"), "{status}");
    run_python(
        r#"
import sys, json, polars as pl
run = sys.argv[1]
e = pl.read_parquet(run + "/iter-0001/eval.parquet")
assert sorted(e["benchmark"].unique().to_list()) == ["mini", "other"], e
assert e.height == (6 + 4) * 2, e.height
assert e["data_source"].null_count() == 0
assert sorted(e["data_source"].unique().to_list()) == ["s1", "s2", "s3"]
s = pl.read_parquet(run + "/iter-0001/scores.parquet")
assert sorted(s["data_source"].unique().to_list()) == ["easy", "hard"], s
r = pl.read_parquet(run + "/iter-0001/rollouts.parquet")
assert r["data_source"].null_count() == 0
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
ev = [l["metrics"] for l in lines if l["stage"] == "eval" and l["iter"] == 1][-1]
for k in ["eval/benchmarks/mini/avg@k", "eval/benchmarks/mini/pass@k",
          "eval/benchmarks/other/avg@k", "eval/benchmarks/mini/by_source/s1/accuracy"]:
    assert k in ev, (k, ev)
assert ev["eval/benchmarks/mini/k"] == 2
acc = e.filter(pl.col("benchmark") == "mini")["correct"].mean()
assert abs(ev["eval/benchmarks/mini/avg@k"] - acc) < 1e-9, (ev, acc)
sc = [l["metrics"] for l in lines if l["stage"] == "score"][-1]
assert "score/by_source/easy/accuracy" in sc and "score/by_source/hard/accuracy" in sc, sc
"#,
        &[&run],
    );
    let file = run.join("iter-0001/eval.parquet");
    let meta = deltarl_schemas::read_meta(&file).unwrap();
    let drawn: serde_json::Value = serde_json::from_str(&meta.extra["sampling"]).unwrap();
    assert_eq!(
        drawn,
        serde_json::json!({"samples": 2, "temperature": 1.0, "top_p": 0.7, "top_k": 0})
    );
    let first = std::fs::read(&file).unwrap();
    ok(deltarl(
        &runs,
        &["stage", "eval", "--run", "b", "--iter", "1", "--force"],
    ));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        first,
        "a rerun draws the same answers"
    );
}

#[test]
fn reruns_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    ok(deltarl(&runs, &["iterate", "--config", c, "--run", "a"]));
    ok(deltarl(&runs, &["iterate", "--config", c, "--run", "b"]));
    let a = parquet_files(&runs.join("a"));
    let diff = differing(&a, &parquet_files(&runs.join("b")));
    assert!(diff.is_empty(), "two runs of one config differ in {diff:?}");
    // Forcing each stage reproduces its output bit for bit.
    for stage in ["rollout", "score", "features", "coeffs", "update"] {
        ok(deltarl(
            &runs,
            &["stage", stage, "--run", "a", "--iter", "1", "--force"],
        ));
        let out = ok(deltarl(&runs, &["status", "--run", "a"]));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if stage != "update" {
            assert!(text.contains("stale"), "after forcing {stage}: {text}");
        }
        for s in ["rollout", "score", "features", "coeffs", "update"] {
            ok(deltarl(&runs, &["stage", s, "--run", "a", "--iter", "1"]));
        }
        let diff = differing(&parquet_files(&runs.join("a")), &a);
        assert!(diff.is_empty(), "forcing {stage} changed {diff:?}");
    }
}

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

/// The second built-in task end to end: its own vocabulary in the base's tokenizer and
/// config, its phrases in the rollouts, its held-out benchmark in eval.parquet.
#[test]
fn the_steps_task_runs_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "steps.toml",
        "[data]\nsource = \"tiny-steps\"\n[rollout]\nmax_new_tokens = 40\n[eval]\nevery = 1\n\
         [warmstart]\nsteps = 150\n[model.tiny]\nmax_position_embeddings = 96\n",
    );
    let runs = dir.path().join("runs");
    // The micro model's 64 positions cannot hold a worded solution: refused by key.
    let out = iterate(
        &runs,
        &cfg,
        "short",
        &["--set", "model.tiny.max_position_embeddings=64"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("model.tiny.max_position_embeddings` = 64"),
        "{err}"
    );
    ok(iterate(&runs, &cfg, "s", &[]));
    let run = runs.join("s");
    let vocab = deltarl_data::Task::Steps.vocab_size();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("base/config.json")).unwrap()).unwrap();
    assert_eq!(config["vocab_size"].as_u64(), Some(vocab as u64));
    run_python(
        r#"
import sys, polars as pl
run = sys.argv[1]
e = pl.read_parquet(run + "/iter-0001/eval.parquet")
assert e["benchmark"].unique().to_list() == ["tiny-steps-test"], e
s = pl.read_parquet(run + "/iter-0001/scores.parquet")
assert s["data_source"].unique().to_list() == ["tiny-steps"], s
r = pl.read_parquet(run + "/iter-0001/rollouts.parquet")
# The warm start taught the phrases (the micro model only partly: half its responses open
# with the first one here, which an untrained model does with probability ~1e-10).
opens = r["response_text"].str.starts_with("first ").mean()
assert opens >= 0.25, (opens, r["response_text"].head(5).to_list())
"#,
        &[&run],
    );
    // The oracle on the same base, without dynamic sampling so that every response is
    // kept: 0 on each character of a phrase, 1 elsewhere.
    let base = format!("model.source={:?}", run.join("base").display().to_string());
    let sets = [
        "--set",
        "coeffs.estimator=\"oracle-tokens\"",
        "--set",
        "score.dynamic_sampling=false",
        "--set",
        &base,
    ];
    ok(iterate(&runs, &cfg, "oracle", &sets));
    run_python(
        r#"
import sys, polars as pl
it = sys.argv[1] + "/iter-0001/"
r = pl.read_parquet(it + "rollouts.parquet")
c = pl.read_parquet(it + "coeffs.parquet")
j = r.join(c, on=["prompt_id", "sample_idx"])
assert j.height == r.height > 0
opened = j.filter(pl.col("response_text").str.starts_with("first "))
assert opened.height > 0
for coeff in opened["coeff"]:
    assert coeff[:6].to_list() == [0.0] * 5 + [1.0], coeff
values = set(v for coeff in j["coeff"] for v in coeff)
assert values == {0.0, 1.0}, values
"#,
        &[&runs.join("oracle")],
    );
}
