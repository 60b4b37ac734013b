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
    // sampler's agree with them to round-off on every trained token.
    for it_n in 1..=2 {
        let it = format!("iter-{it_n:04}");
        let mm = summary_of::<UpdateSummary>(&root, it_n).mismatch;
        assert!(mm.tokens > 0, "{mm:?}");
        let tol = logprob_tolerance(&root, it_n);
        assert!(mm.max_abs <= tol, "{mm:?} (tolerance {tol:e})");
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
# Normalised in f64 to mean 1 per scope, each coefficient then rounded once to f32 (at most
# 2^-24 = 6e-8 of itself): the mean over every kept token is 1 within 6e-8 (polars averages
# in f64); 1e-6 leaves a margin of 16.
assert abs(c.mean() - 1.0) < 1e-6, c.mean()
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
        let close = |a: Option<f64>, b: f64| {
            // The report aggregates the same f64s (polars sums in f64: at most n·2^-53
            // relative over n ≤ 32 rows, ~4e-15) and its CSV prints them shortest
            // round-trip, so 1e-9 leaves a margin of 1e5.
            assert!(a.is_some_and(|a| (a - b).abs() < 1e-9), "{a:?} vs {b}");
        };
        close(cell("iter"), f64::from(it));
        let score: ScoreSummary = summary_of(&root, it);
        close(cell("accuracy"), score.accuracy);
        close(cell("reward_mean"), score.reward_mean);
        let coeffs: CoeffsSummary = summary_of(&root, it);
        close(cell("cos_before"), coeffs.cos_before);
        let update: UpdateSummary = summary_of(&root, it);
        close(cell("clip_frac"), update.clip_frac.unwrap());
        if it == 2 {
            let eval: EvalSummary = summary_of(&root, it);
            close(cell("eval_accuracy"), eval.accuracy);
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
    # Both sides average the same f32 entropies, but on some CPUs (seen on an AVX-512/AMX
    # Xeon) the report's mean comes back as an f32: 3.1619231700897217 against the f64
    # mean 3.161923077. Summed in f32 pairwise over n < 2,000 tokens the error is at most
    # log2(n) * 2^-24 < 11 * 6e-8 = 6.6e-7 of the mean, plus 2^-24 for the final rounding;
    # 1e-6 relative holds either way (the f64 path is ~1e-13).
    assert abs(row["entropy"][0] - ent) <= 1e-6 * abs(ent), (row["entropy"][0], ent)
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
    // Five slots for 32 samples of prompts of several lengths: rows finish at their end
    // tokens at different steps and their slots go to waiting samples, so the schedule
    // itself is what the reruns reproduce.
    let cfg = variant(
        &micro_config(dir.path()),
        "slots.toml",
        "[rollout]\nmax_batch_rows = 5\n",
    );
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

/// `model.layout = "shared-prompt"` through whole iterations: the same rollouts as the
/// padded layout, features whose log-probs equal the padded ones within the policy's f32
/// bound (`deltarl_model::roundoff`), an update, and forced reruns of the features and the
/// update that write the same bytes.
#[test]
fn the_shared_prompt_layout_matches_the_padded_one_and_reruns_identically() {
    let dir = tempfile::tempdir().unwrap();
    let base = micro_config(dir.path());
    let padded = variant(
        &base,
        "padded.toml",
        "[update]\nactivation_checkpointing = false\n",
    );
    let shared = variant(
        &padded,
        "shared.toml",
        "[model]\nlayout = \"shared-prompt\"\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &padded, "p", &["--iters", "1"]));
    ok(iterate(&runs, &shared, "s", &["--iters", "1"]));
    let (p, s) = (runs.join("p/iter-0001"), runs.join("s/iter-0001"));
    let bytes = |d: &std::path::Path, f: &str| std::fs::read(d.join(f)).unwrap();
    assert_eq!(bytes(&p, "rollouts.parquet"), bytes(&s, "rollouts.parquet"));
    let features = |d: &std::path::Path| {
        deltarl_schemas::read_path::<deltarl_schemas::FeatureRow>(&d.join("features.parquet"))
            .unwrap()
            .0
    };
    let (fp, fs) = (features(&p), features(&s));
    assert_eq!(fp.len(), fs.len());
    assert_eq!(fp.len(), 32);
    let tol = logprob_tolerance(&runs.join("p"), 1);
    let mut compared = 0;
    for (a, b) in fp.iter().zip(&fs) {
        assert_eq!((&a.prompt_id, a.sample_idx), (&b.prompt_id, b.sample_idx));
        assert_eq!(a.logprob.len(), b.logprob.len());
        for (x, y) in a.logprob.iter().zip(&b.logprob) {
            assert!(
                f64::from((x - y).abs()) <= tol,
                "{x} vs {y} (bound {tol:e})"
            );
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared} log-probs compared");
    // The layout is recorded in the run's configuration and in the settings of the two
    // stages it changes, and nowhere in the padded run's (whose hashes stay as they were).
    for (run, shared) in [("s", true), ("p", false)] {
        let text = |f: &str| std::fs::read_to_string(runs.join(run).join(f)).unwrap();
        assert_eq!(
            text("run.toml").contains("layout = \"shared-prompt\""),
            shared
        );
        for stage in ["features", "update"] {
            let m = text(&format!("iter-0001/manifest/{stage}.json"));
            assert_eq!(m.contains("\"layout\": \"shared-prompt\""), shared, "{m}");
        }
    }
    let before = parquet_files(&runs.join("s"));
    for stage in ["features", "coeffs", "update"] {
        ok(deltarl(
            &runs,
            &["stage", stage, "--run", "s", "--iter", "1", "--force"],
        ));
    }
    let diff = differing(&parquet_files(&runs.join("s")), &before);
    assert!(diff.is_empty(), "forced reruns changed {diff:?}");
}
