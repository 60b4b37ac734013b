//! Runs and stages refused before they start, by what they would read: a model folder the
//! rollout could not load (before the run is recorded), a stage whose dependency is stale.

use crate::common::*;

/// A model folder the rollout could not load — a config it cannot build, weights missing
/// or cut short — is refused by name before the run is recorded.
#[test]
fn a_broken_model_folder_is_refused_before_anything_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    ok(crate::common::deltarl(
        &dir.path().join("unused"),
        &[
            "random-model",
            "--out",
            model.to_str().unwrap(),
            "--vocab",
            "300",
            "--hidden",
            "32",
            "--intermediate",
            "64",
            "--layers",
            "1",
            "--heads",
            "2",
            "--kv-heads",
            "1",
        ],
    ));
    let weights = model.join("model.safetensors");
    let whole = std::fs::read(&weights).unwrap();
    let runs = dir.path().join("runs");
    let set = format!("model.source={}", model.display());
    let config = std::fs::read(model.join("config.json")).unwrap();
    let chat = ["--set", "data.chat_template=true"];
    /// What the error says, the `--set`s added, and how the folder is broken.
    type Case<'a> = (&'a str, &'a [&'a str], &'a dyn Fn());
    let cases: [Case<'_>; 4] = [
        ("truncated or padded", &[], &|| {
            std::fs::write(&weights, &whole[..whole.len() / 2]).unwrap()
        }),
        ("config.json", &[], &|| {
            std::fs::write(&weights, &whole).unwrap();
            std::fs::write(model.join("config.json"), "{}").unwrap();
        }),
        // A value transformers would read otherwise, named with its file and field.
        ("rope_theta = -1", &[], &|| {
            let mut v: serde_json::Value = serde_json::from_slice(&config).unwrap();
            v["rope_theta"] = (-1.0).into();
            std::fs::write(model.join("config.json"), v.to_string()).unwrap();
        }),
        // A chat template with a syntax error, found at the check and not at the rollout.
        ("chat_template.jinja", &chat, &|| {
            std::fs::write(model.join("config.json"), &config).unwrap();
            std::fs::write(model.join("chat_template.jinja"), "{% if %}").unwrap();
        }),
    ];
    for (says, extra, break_it) in cases {
        break_it();
        let mut args = vec!["--set", set.as_str()];
        args.extend_from_slice(extra);
        let out = iterate(&runs, &micro_config(dir.path()), "m", &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("model.source") && err.contains(says),
            "{says}: {err}"
        );
        assert!(!runs.join("m/run.toml").exists(), "{says}: recorded");
        // Nor is an empty run folder left behind (its lock file alone).
        assert!(!runs.join("m").exists(), "{says}: run folder left");
    }
}

/// A stage run alone whose dependency is stale is refused, naming the dependency: eval
/// after a forced coeffs would otherwise grade the policy of an update that will rerun.
#[test]
fn a_stage_whose_dependency_is_stale_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = variant(
        &micro_config(dir.path()),
        "every.toml",
        "[eval]\nevery = 1\n",
    );
    ok(iterate(&runs, &cfg, "s", &[]));
    let stage = |args: &[&str]| {
        let mut a = vec!["stage"];
        a.extend_from_slice(args);
        a.extend(["--run", "s", "--iter", "1"]);
        deltarl(&runs, &a)
    };
    ok(stage(&["coeffs", "--force"]));
    let out = stage(&["eval", "--force"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("reads what update of iteration 1 wrote, which is stale"),
        "{err}"
    );
    // Once the update has rerun, eval runs.
    ok(stage(&["update"]));
    ok(stage(&["eval", "--force"]));
}
