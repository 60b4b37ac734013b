//! End-to-end tests of the `deltarl` binary on a micro configuration: iterations, polars
//! readability and joins, byte-identical reruns, crash safety and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The binary of this package, which cargo builds before these tests.
fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deltarl"))
}

fn python() -> String {
    std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs a Python snippet (with polars) on the given paths; its assertions fail the test.
fn run_python(script: &str, args: &[&Path]) {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A micro configuration: a tiny model, a short warm start, 8 prompts x 4 samples.
fn micro_config(dir: &Path) -> PathBuf {
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let text = format!(
        r#"extends = "{}"
[model.tiny]
hidden_size = 32
intermediate_size = 64
num_hidden_layers = 2
num_attention_heads = 2
num_key_value_heads = 1
max_position_embeddings = 64
[warmstart]
steps = 30
batch_size = 32
[rollout]
prompts_per_iter = 8
samples_per_prompt = 4
max_new_tokens = 24
[score]
overlong_buffer = 4
[eval]
every = 2
problems = 16
"#,
        base.display()
    );
    let path = dir.join("micro.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes `name` as a config that extends `base` with `body`, and returns its path.
fn variant(base: &Path, name: &str, body: &str) -> PathBuf {
    let path = base.with_file_name(name);
    let text = format!("extends = {:?}\n{body}", base.display().to_string());
    std::fs::write(&path, text).unwrap();
    path
}

fn deltarl(runs: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("DELTARL_RUNS", runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .output()
        .expect("run the deltarl binary")
}

/// `deltarl iterate --config CONFIG --run RUN EXTRA...`, for tests of what it refuses.
fn iterate(runs: &Path, config: &Path, run: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "iterate",
        "--config",
        config.to_str().unwrap(),
        "--run",
        run,
    ];
    args.extend_from_slice(extra);
    deltarl(runs, &args)
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "deltarl failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The files that differ between two snapshots (names only, for readable failures).
fn differing(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Every Parquet file under a run, relative path -> bytes.
fn parquet_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        // A run killed early may not have its folder yet.
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x == "parquet" || x == "safetensors")
            {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

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
        assert!(root.join(it).join("policy/optimizer.safetensors").exists());
    }
    assert!(root.join("iter-0002/eval.parquet").exists());
    let script = r#"
import sys, polars as pl
d = sys.argv[1] + "/iter-0001/"
key = ["prompt_id", "sample_idx"]
r = pl.read_parquet(d + "rollouts.parquet")
df = r.join(pl.read_parquet(d + "scores.parquet"), on=key).join(
    pl.read_parquet(d + "features.parquet"), on=key).join(pl.read_parquet(d + "coeffs.parquet"), on=key)
assert df.height == r.height == 32, df.height
assert (df["response_token_ids"].list.len() == df["coeff"].list.len()).all()
assert (df["response_token_ids"].list.len() == df["features"].list.len()).all()
assert (df["response_token_ids"].list.len() == df["old_logprobs"].list.len()).all()
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
    let bench = dir.path().join("mini.jsonl");
    let lines: Vec<String> = (0..6)
        .map(|i| {
            format!(
                "{{\"id\": \"m{i}\", \"problem\": \"{i}+2*3=?\", \"answer\": \"{}\"}}",
                i + 6
            )
        })
        .collect();
    std::fs::write(&bench, lines.join("\n")).unwrap();
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
    let (rows, _) = deltarl_schemas::read_path::<deltarl_schemas::EvalRow>(&out_file).unwrap();
    assert_eq!(rows.len(), 18);
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

#[test]
fn killed_runs_resume_to_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    let t = Instant::now();
    ok(deltarl(&runs, &["iterate", "--config", c, "--run", "ref"]));
    let total = t.elapsed();
    let reference = parquet_files(&runs.join("ref"));
    // Kill at several points spread over a whole run (warm start and every stage).
    for frac in [0.15, 0.45, 0.7, 0.9] {
        let name = format!("k{}", (frac * 100.0) as u32);
        let mut child = Command::new(bin())
            .args(["iterate", "--config", c, "--run", &name])
            .env("DELTARL_RUNS", &runs)
            .env("DELTARL_NO_PROGRESS", "1")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs_f64(total.as_secs_f64() * frac));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        // No partial file under a final name: every Parquet file present is readable.
        for (rel, bytes) in parquet_files(&runs.join(&name)) {
            if rel.ends_with(".parquet") {
                assert_eq!(
                    &bytes[bytes.len() - 4..],
                    b"PAR1",
                    "{name}/{rel} is partial"
                );
            }
        }
        ok(deltarl(
            &runs,
            &["iterate", "--config", c, "--run", &name, "--until", "1"],
        ));
        let diff = differing(&parquet_files(&runs.join(&name)), &reference);
        assert!(
            diff.is_empty(),
            "resume after kill at {frac}: {diff:?} differ"
        );
    }
}

#[test]
fn a_changed_warm_start_makes_the_base_and_every_later_stage_stale() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    ok(deltarl(
        &runs,
        &["iterate", "--config", c, "--run", "w", "--iters", "2"],
    ));
    let before = parquet_files(&runs.join("w"));
    let status = |extra: &[&str]| {
        let mut args = vec!["status", "--run", "w"];
        args.extend_from_slice(extra);
        String::from_utf8_lossy(&ok(deltarl(&runs, &args)).stdout).to_string()
    };
    let text = status(&[]);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    // Under a config with one more warm-start step, the base is stale for its settings and
    // every stage of both iterations for the base (or the policy after it).
    for (name, body) in [
        ("steps.toml", "[warmstart]\nsteps = 31\n"),
        ("shape.toml", "[model.tiny]\nintermediate_size = 48\n"),
    ] {
        let changed = variant(&cfg, name, body);
        let text = status(&["--config", changed.to_str().unwrap()]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("warmstart stale (configuration changed)"),
            "{text}"
        );
        assert_eq!(lines.len(), 3, "{text}");
        for line in &lines[1..] {
            assert_eq!(
                line.matches("stale").count(),
                line.matches(" | ").count() + 1,
                "{text}"
            );
        }
        assert!(
            lines[1].contains("rollout stale (the base is not done)"),
            "{text}"
        );
        assert!(
            lines[2].contains("rollout stale (update of iteration 1 is not done)"),
            "{text}"
        );
    }
    // The recorded config is unchanged by a status query; iterate rebuilds base and both
    // iterations under the new one.
    assert!(!status(&[]).contains("stale"));
    let changed = variant(&cfg, "steps.toml", "[warmstart]\nsteps = 31\n");
    let out = ok(iterate(&runs, &changed, "w", &["--until", "2", "--force"]));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("warmstart") && log.contains("iteration 2"),
        "{log}"
    );
    let text = status(&[]);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    let after = parquet_files(&runs.join("w"));
    let diff = differing(&before, &after);
    for f in [
        "base/model.safetensors",
        "iter-0001/rollouts.parquet",
        "iter-0002/rollouts.parquet",
        "iter-0002/policy/model.safetensors",
    ] {
        assert!(diff.iter().any(|d| d == f), "{f} not rebuilt: {diff:?}");
    }
    // `--until N` stops at iteration N when it first repairs an earlier one.
    ok(deltarl(
        &runs,
        &["stage", "coeffs", "--run", "w", "--iter", "1", "--force"],
    ));
    assert!(status(&[]).contains("update stale"));
    let c2 = changed.to_str().unwrap();
    ok(deltarl(
        &runs,
        &["iterate", "--config", c2, "--run", "w", "--until", "2"],
    ));
    assert!(!runs.join("w/iter-0003").exists());
    let text = status(&[]);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
}

#[test]
fn verify_jsonl_reports_bad_lines_and_grades_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("answers.jsonl");
    let mut bytes = b"{\"pred\": \"\\\\boxed{2}\", \"gold\": \"2\"}\n".to_vec();
    bytes.extend_from_slice(b"{\"pred\": \"\xff\xfe\", \"gold\": \"1\"}\n");
    bytes.extend_from_slice(b"not json\n");
    bytes.extend_from_slice(b"{\"pred\": \"\\\\boxed{3}\", \"gold\": \"4\"}\n");
    std::fs::write(&path, bytes).unwrap();
    let out = deltarl(dir.path(), &["verify", "--jsonl", path.to_str().unwrap()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stderr}");
    let graded: Vec<&str> = stdout.lines().collect();
    assert_eq!(graded.len(), 2, "{stdout}");
    assert!(graded[0].contains("\"correct\":true") && graded[1].contains("\"correct\":false"));
    let name = path.display().to_string();
    assert!(
        stderr.contains(&format!("{name}:2: not valid UTF-8")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{name}:3: not a JSON object")),
        "{stderr}"
    );
    assert!(stderr.contains("2 lines could not be graded"), "{stderr}");
}

#[test]
fn bad_input_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    let out = deltarl(&runs, &["iterate", "--config", c, "--run", "../escape"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("run name"));
    let bad = variant(&cfg, "bad.toml", "[rollout]\ntemprature = 1.0\n");
    let out = iterate(&runs, &bad, "x", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("temprature"), "{err}");
    let bad = variant(&cfg, "bad.toml", "[rollout]\ntemperature = -1.0\n");
    let out = iterate(&runs, &bad, "x", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rollout.temperature") && err.contains("-1"),
        "{err}"
    );
    // A type error names its key.
    let bad = variant(&cfg, "bad.toml", "[rollout]\nprompts_per_iter = \"16\"\n");
    let out = iterate(&runs, &bad, "x", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rollout.prompts_per_iter"), "{err}");
    std::fs::write(&bad, "seed = [").unwrap();
    let out = iterate(&runs, &bad, "x", &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed TOML"));
    // A run made with one config refuses another unless forced.
    ok(deltarl(
        &runs,
        &["iterate", "--config", c, "--run", "r", "--iters", "0"],
    ));
    let other = variant(&cfg, "other.toml", "seed = 2\n");
    let out = iterate(&runs, &other, "r", &["--iters", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("another configuration"));
    // A second iterate while another process holds the lock (an OS lock: `flock`) is
    // refused.
    let lock = runs.join("r/.lock");
    // `-o`: the lock stays with `flock` itself (not its child), so killing it releases it.
    let holder = Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    let mut err = String::new();
    for _ in 0..100 {
        let out = deltarl(
            &runs,
            &["iterate", "--config", c, "--run", "r", "--iters", "0"],
        );
        err = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(err.contains("in use by another process"), "{err}");
    // A forced change of configuration refused for the lock has rewritten nothing.
    let recorded = std::fs::read(runs.join("r/run.hash")).unwrap();
    let out = iterate(&runs, &other, "r", &["--iters", "0", "--force"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("in use by another process"), "{err}");
    assert_eq!(std::fs::read(runs.join("r/run.hash")).unwrap(), recorded);
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    // So is one whose prompt file does not exist.
    let missing = variant(
        &cfg,
        "missing.toml",
        "[data]\nsource = \"no/such.jsonl\"\n[eval]\nevery = 0\n",
    );
    let out = iterate(&runs, &missing, "r", &["--iters", "0", "--force"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("data.source") && err.contains("no/such.jsonl"),
        "{err}"
    );
    assert_eq!(std::fs::read(runs.join("r/run.hash")).unwrap(), recorded);
    // On a new run it is refused before the warm start, not minutes into it.
    let out = iterate(&runs, &missing, "fresh", &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("data.source"), "{err}");
    assert!(!runs.join("fresh/base").exists() && !runs.join("fresh/run.toml").exists());
    // So is a run name longer than a file name may be, by name.
    let long = "r".repeat(300);
    let out = deltarl(&runs, &["iterate", "--config", c, "--run", &long]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("run name") && err.contains("300 bytes"),
        "{err}"
    );
    ok(deltarl(&runs, &["status", "--run", "r"]));
    // A reader that goes away (`status | head -1`) is not an error.
    let mut child = Command::new(bin())
        .args(["status", "--run", "r"])
        .env("DELTARL_RUNS", &runs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("panicked"), "{err}");
    // Non-finite numbers are refused wherever they are, naming the key.
    for (body, key) in [
        ("[update]\nentropy_coef = nan\n", "update.entropy_coef"),
        ("[update]\nkl_coef = inf\n", "update.kl_coef"),
        ("[score]\noverlong_factor = nan\n", "score.overlong_factor"),
    ] {
        let nan = variant(&cfg, "nan.toml", body);
        let out = iterate(&runs, &nan, "n", &[]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success() && err.contains(key) && err.contains("finite"),
            "{body}: {err}"
        );
    }
    // A corrupted input file is named.
    ok(deltarl(
        &runs,
        &["iterate", "--config", c, "--run", "r", "--iters", "1"],
    ));
    // Same-size corruption with the modification time put back fools the hash cache's
    // stamps; `--verify` re-reads every file and sees it, and `iterate --verify` repairs it.
    let rollouts = runs.join("r/iter-0001/rollouts.parquet");
    let original = std::fs::read(&rollouts).unwrap();
    let mtime = std::fs::metadata(&rollouts).unwrap().modified().unwrap();
    let mut corrupt = original.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid..mid + 8].fill(0);
    std::fs::write(&rollouts, &corrupt).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&rollouts)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let text =
        String::from_utf8_lossy(&ok(deltarl(&runs, &["status", "--run", "r", "--verify"])).stdout)
            .to_string();
    assert!(text.contains("rollout stale (output"), "{text}");
    ok(deltarl(
        &runs,
        &[
            "iterate", "--config", c, "--run", "r", "--until", "1", "--verify",
        ],
    ));
    assert_eq!(std::fs::read(&rollouts).unwrap(), original);
    // A stage that fails (here: the base cannot be loaded) leaves the records of the
    // stages after it alone.
    let config_json = runs.join("r/base/config.json");
    let saved = std::fs::read(&config_json).unwrap();
    std::fs::write(&config_json, b"{").unwrap();
    let out = deltarl(
        &runs,
        &["stage", "rollout", "--run", "r", "--iter", "1", "--force"],
    );
    assert!(!out.status.success());
    std::fs::write(&config_json, saved).unwrap();
    let text =
        String::from_utf8_lossy(&ok(deltarl(&runs, &["status", "--run", "r"])).stdout).to_string();
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    let scores = runs.join("r/iter-0001/scores.parquet");
    let bytes = std::fs::read(&scores).unwrap();
    std::fs::write(&scores, &bytes[..bytes.len() / 2]).unwrap();
    let coeffs_before = std::fs::read(runs.join("r/iter-0001/coeffs.parquet")).unwrap();
    let out = deltarl(
        &runs,
        &["stage", "coeffs", "--run", "r", "--iter", "1", "--force"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("scores.parquet"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(runs.join("r/iter-0001/coeffs.parquet")).unwrap(),
        coeffs_before
    );
}

/// The realistic shape on CPU: Qwen3's 151,936-token vocabulary with a byte-level BPE of
/// that size, bf16 compute over f32 master weights, 256-token responses, one iteration
/// through every stage.
#[test]
fn a_real_vocabulary_in_bf16_runs_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let model = dir.path().join("q152k");
    let out = ok(deltarl(
        &runs,
        &[
            "random-model",
            "--out",
            model.to_str().unwrap(),
            "--dtype",
            "bf16",
            "--max-positions",
            "512",
        ],
    ));
    assert!(String::from_utf8_lossy(&out.stderr).contains("vocabulary 151936"));
    let prompts = dir.path().join("prompts.jsonl");
    let lines: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"problem\": \"What is {i} + {i}? Think step by step.\", \"answer\": \"{}\"}}",
                2 * i
            )
        })
        .collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let cfg = dir.path().join("real.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"extends = {:?}
[model]
source = {:?}
dtype = "bf16"
[data]
source = {:?}
template = "User:\n{{question}}\nAssistant:\n"
[rollout]
prompts_per_iter = 2
samples_per_prompt = 4
max_new_tokens = 256
# A random model never answers right: a stop string and a penalty over the whole length
# give its responses different lengths and rewards, so the update has a real gradient.
stop = ["a"]
[score]
overlong_buffer = 255
[features]
chunk_rows = 4
[update]
micro_batch_rows = 4
optimizer_steps = 2
lr = 1e-6
[eval]
every = 0
"#,
            base.display().to_string(),
            model.display().to_string(),
            prompts.display().to_string()
        ),
    )
    .unwrap();
    let out = ok(iterate(&runs, &cfg, "real", &["--iters", "1"]));
    let log = String::from_utf8_lossy(&out.stderr);
    eprintln!("{log}");
    let it = runs.join("real/iter-0001");
    let (rollouts, _) =
        deltarl_schemas::read_path::<deltarl_schemas::RolloutRow>(&it.join("rollouts.parquet"))
            .unwrap();
    assert_eq!(rollouts.len(), 8);
    assert!(rollouts.iter().all(|r| r.response_token_ids.len() <= 256));
    let lens: std::collections::BTreeSet<usize> = rollouts
        .iter()
        .map(|r| r.response_token_ids.len())
        .collect();
    assert!(lens.len() > 1, "{lens:?}");
    assert!(rollouts
        .iter()
        .flat_map(|r| &r.response_token_ids)
        .any(|&t| t > 70_000));
    // bf16 sampler and bf16 trainer disagree more than f32 ones, but boundedly.
    let m = deltarl_schemas::Manifest::read(&it.join("manifest/update.json"))
        .unwrap()
        .unwrap();
    let mm = &m.summary["mismatch"];
    assert!(mm["tokens"].as_u64().unwrap() > 0 && mm["max_abs"].as_f64().unwrap().is_finite());
    assert_eq!(m.summary["skipped_steps"].as_u64(), Some(0));
    let grad_norm = m.summary["grad_norm"].as_f64().unwrap();
    assert!(grad_norm > 0.0 && grad_norm.is_finite(), "{}", m.summary);
    // The new policy is saved in bf16 with f32 master weights in the optimizer state.
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(it.join("policy/config.json")).unwrap()).unwrap();
    assert_eq!(config["torch_dtype"], "bfloat16");
    let opt = std::fs::read(it.join("policy/optimizer.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(opt[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8_lossy(&opt[8..8 + header_len]);
    assert!(
        header.contains("\"master.model.embed_tokens.weight\""),
        "{header}"
    );
}

#[test]
fn set_changes_one_key_checked_like_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    // `config show` prints every key, the algorithm's defaults resolved, and loads back.
    let out = ok(deltarl(
        &runs,
        &["config", "show", "--config", c, "--set", "rollout.top_k=7"],
    ));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for want in [
        "top_k = 7",
        "eps_high = 0.28",
        "aggregation = \"token-mean\"",
        "estimator = \"delta\"",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let shown = dir.path().join("shown.toml");
    std::fs::write(&shown, &text).unwrap();
    ok(deltarl(
        &runs,
        &["config", "show", "--config", shown.to_str().unwrap()],
    ));
    // Refused like the file: unknown keys, non-finite values, wrong types, by key.
    for (set, key) in [
        ("rollout.topk=1", "topk"),
        ("update.lr=nan", "update.lr"),
        ("rollout.top_k=\"x\"", "rollout.top_k"),
        ("seed.x=1", "not a section"),
    ] {
        let out = iterate(&runs, &cfg, "bad", &["--set", set]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success() && err.contains(key), "{set}: {err}");
    }
    // Recorded in the run's run.toml; `stage --set` changes the recorded configuration and
    // the stages it touches go stale.
    ok(iterate(
        &runs,
        &cfg,
        "s",
        &["--iters", "1", "--set", "rollout.top_k=7"],
    ));
    let recorded = std::fs::read_to_string(runs.join("s/run.toml")).unwrap();
    assert!(recorded.contains("top_k = 7"), "{recorded}");
    ok(deltarl(
        &runs,
        &[
            "stage",
            "coeffs",
            "--run",
            "s",
            "--iter",
            "1",
            "--set",
            "coeffs.lam_max=1.3",
        ],
    ));
    let recorded = std::fs::read_to_string(runs.join("s/run.toml")).unwrap();
    assert!(recorded.contains("lam_max = 1.3") && recorded.contains("top_k = 7"));
    let status =
        String::from_utf8_lossy(&ok(deltarl(&runs, &["status", "--run", "s"])).stdout).to_string();
    assert!(
        status.contains("coeffs done") && status.contains("update stale"),
        "{status}"
    );
}
