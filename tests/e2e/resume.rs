//! Resuming: after kill -9 (of iterate and of compare), and after a change to the warm start.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

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
        // The kill must land on a running process: a run that is done by then (this one
        // went faster than the reference, or finished between the sleep and the signal)
        // is started again and killed earlier. Only a run that the signal ended counts.
        let mut at = frac;
        loop {
            let _ = std::fs::remove_dir_all(runs.join(&name));
            let mut child = Command::new(bin())
                .args(["iterate", "--config", c, "--run", &name])
                .env("DELTARL_RUNS", &runs)
                .env("DELTARL_NO_PROGRESS", "1")
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_secs_f64(total.as_secs_f64() * at));
            // SIGKILL; on a process that already exited (not yet reaped) it is a no-op,
            // and the exit status below tells the two apart.
            child.kill().unwrap();
            let status = child.wait().unwrap();
            if status.signal() == Some(9) {
                break;
            }
            assert!(status.success(), "run {name} failed on its own: {status}");
            at *= 0.8;
            assert!(
                at > 0.05,
                "every run finished before its kill (last at {at:.2})"
            );
        }
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
    // The base names the key that changed; the stages after it say the base will rerun
    // (it finished once), then that the policy they read will.
    for (name, body, key) in [
        ("steps.toml", "[warmstart]\nsteps = 31\n", "steps: 30 -> 31"),
        (
            "shape.toml",
            "[model.tiny]\nintermediate_size = 48\n",
            "intermediate_size: 64 -> 48",
        ),
    ] {
        let changed = variant(&cfg, name, body);
        let text = status(&["--config", changed.to_str().unwrap()]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("warmstart stale (configuration changed: ") && lines[0].contains(key),
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
            lines[1].contains("rollout stale (the base will rerun)"),
            "{text}"
        );
        assert!(
            lines[2].contains("rollout stale (update of iteration 1 will rerun)"),
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

/// `[checkpoint] keep_last` / `save_every`: old iterations' weights and optimizer state go,
/// the run stays complete (status --verify), the next iteration runs, and a rerun that needs
/// a pruned policy is refused by name.
#[test]
fn pruned_checkpoints_keep_the_run_complete() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "prune.toml",
        "[checkpoint]\nkeep_last = 1\nsave_every = 2\n[eval]\nevery = 0\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "p", &["--iters", "3"]));
    let root = runs.join("p");
    let weights = |i: u32| root.join(format!("iter-{i:04}/policy/model.safetensors"));
    let moments = |i: u32| root.join(format!("iter-{i:04}/optimizer/optimizer.safetensors"));
    // Iteration 1 pruned; 2 kept (save_every = 2); 3 kept (the last).
    assert!(!weights(1).exists() && !moments(1).exists());
    assert!(weights(2).exists() && moments(2).exists());
    assert!(weights(3).exists() && moments(3).exists());
    assert!(root.join("iter-0001/policy/config.json").exists());
    let status = ok(deltarl(&runs, &["status", "--run", "p", "--verify"]));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    // The next iteration runs (and iteration 3, no longer among the last one, goes).
    ok(iterate(&runs, &cfg, "p", &["--iters", "1"]));
    assert!(weights(4).exists() && !weights(3).exists() && weights(2).exists());
    // Iteration 2 sampled from iteration 1's policy, which is gone.
    let out = deltarl(
        &runs,
        &["stage", "rollout", "--run", "p", "--iter", "2", "--force"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pruned") && err.contains("keep_last = 1"),
        "{err}"
    );
}

/// `deltarl prune` on a run made without `[checkpoint]` pruning: the same files go as
/// `keep_last = 1, save_every = 2` would have removed, their hashes kept, so the run stays
/// complete (status --verify) and continues; a run being written, `--keep-last 0` and an
/// unknown run are refused by name.
#[test]
fn prune_applies_keep_last_to_a_finished_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(&micro_config(dir.path()), "all.toml", "[eval]\nevery = 0\n");
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "q", &["--iters", "3"]));
    let root = runs.join("q");
    let weights = |i: u32| root.join(format!("iter-{i:04}/policy/model.safetensors"));
    let moments = |i: u32| root.join(format!("iter-{i:04}/optimizer/optimizer.safetensors"));
    assert!((1..=3).all(|i| weights(i).exists() && moments(i).exists()));
    let before = std::fs::read(moments(1)).unwrap();
    let args = [
        "prune",
        "--run",
        "q",
        "--keep-last",
        "1",
        "--save-every",
        "2",
    ];
    let out = ok(deltarl(&runs, &args));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("pruned 2 files"), "{text}");
    assert!(!weights(1).exists() && !moments(1).exists());
    assert!(weights(2).exists() && moments(2).exists());
    assert!(weights(3).exists() && moments(3).exists());
    // The record holds the removed file's hash.
    let pruned: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(root.join("pruned.json")).unwrap()).unwrap();
    let want = deltarl_schemas::sha256_hex(&before);
    assert_eq!(
        pruned.get("iter-0001/optimizer/optimizer.safetensors"),
        Some(&want)
    );
    let status = ok(deltarl(&runs, &["status", "--run", "q", "--verify"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        !status.contains("stale") && !status.contains("missing"),
        "{status}"
    );
    ok(iterate(&runs, &cfg, "q", &["--iters", "1"]));
    assert!(weights(4).exists());
    // Again after iteration 4: iteration 3's two files go (no longer the last), iteration
    // 1's, already gone, are not counted twice, iteration 2's stay.
    let again = ok(deltarl(&runs, &args));
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(again.contains("pruned 2 files"), "{again}");
    assert!(!weights(3).exists() && weights(2).exists() && weights(4).exists());
    for (args, says) in [
        (
            vec!["prune", "--run", "q", "--keep-last", "0"],
            "--keep-last 0",
        ),
        (vec!["prune", "--run", "nope", "--keep-last", "1"], "nope"),
    ] {
        let out = deltarl(&runs, &args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}

/// `keep_features = 1`: older iterations' features files go once the next completes, their
/// hashes kept, so the run stays complete and continues; rerunning a stage that reads a
/// pruned features file is refused by name.
#[test]
fn pruned_features_keep_the_run_complete() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "features.toml",
        "[checkpoint]\nkeep_features = 1\n[eval]\nevery = 0\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "f", &["--iters", "2"]));
    let root = runs.join("f");
    let features = |i: u32| root.join(format!("iter-{i:04}/features.parquet"));
    assert!(!features(1).exists() && features(2).exists());
    assert!(root.join("iter-0001/coeffs.parquet").exists());
    let pruned = std::fs::read_to_string(root.join("pruned.json")).unwrap();
    assert!(pruned.contains("iter-0001/features.parquet"), "{pruned}");
    let status = ok(deltarl(&runs, &["status", "--run", "f", "--verify"]));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    ok(iterate(&runs, &cfg, "f", &["--iters", "1"]));
    assert!(!features(2).exists() && features(3).exists());
    let out = deltarl(
        &runs,
        &["stage", "coeffs", "--run", "f", "--iter", "1", "--force"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("features.parquet") && err.contains("keep_features = 1"),
        "{err}"
    );
}

/// A sharded tiny policy (`shard_mb = 1`) with pruning: the next iteration finds the
/// previous policy's index, a rerun that needs pruned shards is refused by name, and a
/// garbled record of pruned files is an error naming it, never an empty record.
#[test]
fn sharded_pruned_policies_resume_refuse_and_keep_their_record() {
    let dir = tempfile::tempdir().unwrap();
    // ~1.3 M parameters in f32: about 5 MB, written as 1 MB shards.
    let cfg = variant(
        &micro_config(dir.path()),
        "sharded.toml",
        "[model.tiny]\nhidden_size = 256\nintermediate_size = 512\n[checkpoint]\nshard_mb = 1\n\
         keep_last = 1\n[eval]\nevery = 0\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "s", &["--iters", "2"]));
    let root = runs.join("s");
    let policy = |i: u32| root.join(format!("iter-{i:04}/policy"));
    assert!(policy(2).join("model.safetensors.index.json").exists());
    assert!(!policy(2).join("model.safetensors").exists());
    let shards = |i: u32| {
        std::fs::read_dir(policy(i))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
            .count()
    };
    assert!(shards(2) > 1, "iteration 2's policy is sharded");
    // Iteration 1's shards were pruned; its index stays.
    assert_eq!(shards(1), 0);
    assert!(policy(1).join("model.safetensors.index.json").exists());
    // Iteration 2 sampled from iteration 1's (pruned) policy.
    let out = deltarl(
        &runs,
        &["stage", "rollout", "--run", "s", "--iter", "2", "--force"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pruned") && err.contains("keep_last = 1"),
        "{err}"
    );
    // The run is complete; with its record garbled, status says which file.
    ok(deltarl(&runs, &["status", "--run", "s"]));
    std::fs::write(root.join("pruned.json"), b"{\"iter-0001/policy/model-00001").unwrap();
    let out = deltarl(&runs, &["status", "--run", "s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("pruned.json"),
        "{err}"
    );
}

/// `compare` killed while its first run trains, then run again: it resumes the killed run
/// and finishes with the runs and the table of a compare never interrupted.
#[test]
fn a_killed_compare_resumes_to_the_same_runs_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    let args = |name: &'static str| {
        [
            "compare",
            "--config",
            c,
            "--variants",
            "dapo,delta",
            "--seeds",
            "1",
            "--iters",
            "2",
            "--name",
            name,
        ]
    };
    ok(deltarl(&runs, &args("whole")));
    let mut child = Command::new(bin())
        .args(args("cut"))
        .env("DELTARL_RUNS", &runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The first run's first iteration recorded: three more run-iterations remain.
    let mark = runs.join("cut-dapo-s1/iter-0001/manifest/update.json");
    let t0 = Instant::now();
    while !mark.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no update recorded"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "compare finished before the kill"
    );
    child.kill().unwrap(); // SIGKILL
    assert!(!child.wait().unwrap().success(), "killed, not finished");
    assert!(!runs.join("cut/compare.md").exists());
    ok(deltarl(&runs, &args("cut")));
    for v in ["dapo", "delta"] {
        let (a, b) = (
            parquet_files(&runs.join(format!("whole-{v}-s1"))),
            parquet_files(&runs.join(format!("cut-{v}-s1"))),
        );
        assert!(
            a.keys().any(|k| k.starts_with("iter-0002/")),
            "{v}: {:?}",
            a.keys()
        );
        assert_eq!(differing(&a, &b), Vec::<String>::new(), "{v}");
    }
    let table = |name: &str| {
        std::fs::read_to_string(runs.join(name).join("compare.csv"))
            .unwrap()
            .replace(name, "NAME")
    };
    assert_eq!(table("whole"), table("cut"));
}
