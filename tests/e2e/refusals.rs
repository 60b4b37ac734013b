//! Bad input is refused clearly and destroys nothing.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

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

/// `deltarl report` runs the report binary, whose errors read as `deltarl`'s do: what
/// failed, then why, and no backtrace even where `RUST_BACKTRACE` asks for one.
#[test]
fn a_report_of_a_missing_run_names_it_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["report", "--run", "absent"])
        .env("DELTARL_RUNS", dir.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("error: report of absent\n  caused by: run directory")
            && stderr.contains("absent does not exist")
            && !stderr.contains("backtrace"),
        "{stderr}"
    );
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
    // So is a benchmark file that exists but the eval stage could not read: it is read
    // before the configuration is recorded, not after the warm start and an iteration.
    let garbled = dir.path().join("bench.jsonl");
    std::fs::write(&garbled, "{\"problem\": \"1+1\"\nnot json\n").unwrap();
    let bad_bench = variant(
        &cfg,
        "bench.toml",
        &format!(
            "[eval]\nbenchmarks = [{:?}]\n",
            garbled.display().to_string()
        ),
    );
    let out = iterate(&runs, &bad_bench, "r", &["--iters", "0", "--force"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success() && err.contains("eval.benchmarks") && err.contains("bench.jsonl"),
        "{err}"
    );
    assert_eq!(std::fs::read(runs.join("r/run.hash")).unwrap(), recorded);
    let out = iterate(&runs, &bad_bench, "fresh2", &[]);
    assert!(!out.status.success());
    assert!(!runs.join("fresh2/base").exists() && !runs.join("fresh2/run.toml").exists());
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
    // `--verify` finds it and exits non-zero, naming it.
    let out = deltarl(&runs, &["status", "--run", "r", "--verify"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("rollout stale (output"), "{text}");
    assert!(
        err.contains("rollout of iteration 1") && err.contains("rollouts.parquet"),
        "{err}"
    );
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

/// A prompt too long for the context with `max_new_tokens` stops the rollout with the fix
/// named: `rollout.max_prompt_tokens` (verl's left truncation), and `--force` for a
/// recorded run; with it set, the same data runs.
#[test]
fn a_prompt_too_long_for_the_context_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("long.jsonl");
    let long = "1+".repeat(40) + "1=?";
    std::fs::write(
        &data,
        format!("{{\"problem\": \"{long}\", \"answer\": \"41\"}}\n"),
    )
    .unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "long.toml",
        &format!(
            "[data]\nsource = {:?}\n[rollout]\nprompts_per_iter = 1\n[eval]\nevery = 0\n",
            data.display().to_string()
        ),
    );
    let runs = dir.path().join("runs");
    let out = iterate(&runs, &cfg, "l", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("rollout.max_prompt_tokens") && err.contains("--force"),
        "{err}"
    );
    ok(iterate(
        &runs,
        &cfg,
        "l",
        &["--force", "--set", "rollout.max_prompt_tokens=32"],
    ));
    // A killed stage's temporary is removed by the next command that takes the run's lock
    // (here a no-op `iterate --until 1`), whichever stage it belonged to.
    let leftover = runs.join("l/iter-0001/.scores.parquet.tmp-4242");
    std::fs::write(&leftover, b"partial").unwrap();
    let until = ["--until", "1", "--set", "rollout.max_prompt_tokens=32"];
    ok(iterate(&runs, &cfg, "l", &until));
    assert!(!leftover.exists(), "the temporary is still there");
    assert!(runs.join("l/iter-0001/scores.parquet").is_file());
    // An edited data file: `status` names it.
    let mut text = std::fs::read_to_string(&data).unwrap();
    text.push_str("{\"problem\": \"1+1=?\", \"answer\": \"2\"}\n");
    std::fs::write(&data, text).unwrap();
    let status = ok(deltarl(&runs, &["status", "--run", "l"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("rollout stale (inputs changed: ") && status.contains("long.jsonl"),
        "{status}"
    );
}

/// A training file with repeated ids, or an empty one, is refused before anything is
/// recorded or warm-started (the configuration check reads every record).
#[test]
fn a_bad_training_file_is_refused_before_the_warm_start() {
    let dir = tempfile::tempdir().unwrap();
    let dup = dir.path().join("dup.jsonl");
    std::fs::write(
        &dup,
        "{\"id\": \"a\", \"problem\": \"1+1=?\", \"answer\": \"2\"}\n\
         {\"id\": \"a\", \"problem\": \"2+2=?\", \"answer\": \"4\"}\n",
    )
    .unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let runs = dir.path().join("runs");
    for (file, says) in [
        (&dup, "appears twice (line 1 and line 2)"),
        (&empty, "no prompts"),
    ] {
        let cfg = variant(
            &micro_config(dir.path()),
            "bad.toml",
            &format!(
                "[data]\nsource = {:?}\n[eval]\nevery = 0\n",
                file.display().to_string()
            ),
        );
        let out = iterate(&runs, &cfg, "b", &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
        assert!(
            !err.contains("warmstart"),
            "the warm start ran first: {err}"
        );
        assert!(!runs.join("b/run.toml").exists() && !runs.join("b/base").exists());
    }
}
