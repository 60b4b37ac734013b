//! Configuration from the command line: `--set` and `config show`.

use crate::common::*;

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
        "engine = \"native\"",
        "[rollout.vllm]",
        "[checkpoint]",
        "shard_mb = 5000",
        "keep_last = 0",
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

/// The field's other surrogates and ratio levels run through a whole iteration (the
/// update reads each response's length for the sequence ratios), each recorded in the
/// run's configuration.
#[test]
fn other_surrogates_run_an_iteration() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = micro_config(dir.path());
    let runs = dir.path().join("runs");
    for (run, sets) in [
        ("cispo", ["update.surrogate=cispo", "update.ratio=token"]),
        ("sapo", ["update.surrogate=sapo", "update.ratio=sequence"]),
        (
            "gspo-token",
            ["update.surrogate=clip", "update.ratio=sequence-token"],
        ),
    ] {
        let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
        ok(iterate(&runs, &cfg, run, &args));
        let summary = std::fs::read_to_string(runs.join(run).join("metrics.jsonl")).unwrap();
        assert!(summary.contains("\"stage\":\"update\""), "{summary}");
        let recorded = std::fs::read_to_string(runs.join(run).join("run.toml")).unwrap();
        for s in sets {
            let (key, value) = s.split_once('=').unwrap();
            let key = key.split('.').nth(1).unwrap();
            assert!(
                recorded.contains(&format!("{key} = \"{value}\""))
                    || value == "token"
                    || value == "clip",
                "{run}: {key}: {recorded}"
            );
        }
    }
}
