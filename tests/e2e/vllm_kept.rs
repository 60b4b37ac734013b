//! A vLLM server kept across iterations (`rollout.vllm.keep_alive`, the default) and one
//! server per rank under torchrun, on the real vLLM CPU backend.
//!
//! The tiny models here have their own LM head (`tie_word_embeddings = false`): vLLM's CPU
//! backend cannot reload a tied head in place (the last test shows the probe catching it).
//! Where files are compared with another run's, both run with `concurrency = 1`: every
//! request is then computed alone, so vLLM's per-request seeds fix its samples whatever the
//! server or the batch around it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::vllm::{config, servers_of, vllm_python};

/// The vLLM micro configuration with an untied head.
pub fn untied(dir: &Path, extra: &str) -> PathBuf {
    let base = config(dir, "vllm", extra);
    variant(
        &base,
        "untied.toml",
        "[model.tiny]\nhidden_size = 64\nintermediate_size = 128\nnum_hidden_layers = 2\n\
         num_attention_heads = 2\nnum_key_value_heads = 1\nmax_position_embeddings = 64\n\
         tie_word_embeddings = false\n",
    )
}

pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Three iterations start the server once and reload it twice; after each reload the
/// served probe log-probs are the trainer's to f32 round-off, and the rollouts are those of
/// a run that starts a fresh server every iteration, byte for byte.
#[test]
fn a_kept_server_serves_three_iterations_from_one_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = untied(dir.path(), "concurrency = 1");
    let runs = dir.path().join("runs");
    let t0 = Instant::now();
    let out = ok(iterate(&runs, &cfg, "kept", &["--iters", "3"]));
    let kept_s = t0.elapsed().as_secs_f64();
    let err = stderr_of(&out);
    assert_eq!(err.matches("vLLM server started").count(), 1, "{err}");
    assert_eq!(err.matches("vLLM server reloaded").count(), 2, "{err}");
    let root = runs.join("kept");
    let server = |it| summary_of::<RolloutSummary>(&root, it).engine_server;
    assert!(
        matches!(server(1), Some(Acquired::Started { .. })),
        "{:?}",
        server(1)
    );
    for it in [2, 3] {
        let s = server(it);
        let Some(Acquired::Reloaded {
            probe_tokens,
            probe_max_abs,
            ..
        }) = s
        else {
            panic!("iteration {it}: {s:?}, not reloaded");
        };
        assert!(probe_tokens >= 8, "{s:?}");
        // The probe and the rollout evaluate the policy the server was reloaded with.
        let tol = logprob_tolerance(&root, it);
        assert!(probe_max_abs <= tol, "{s:?} (tolerance {tol:e})");
        let mm = summary_of::<UpdateSummary>(&root, it).mismatch;
        assert!(mm.max_abs <= tol, "{mm:?} (tolerance {tol:e})");
    }
    assert!(servers_of(&root).is_empty(), "{:?}", servers_of(&root));

    let t0 = Instant::now();
    let out = ok(iterate(
        &runs,
        &cfg,
        "fresh",
        &["--iters", "3", "--set", "rollout.vllm.keep_alive=false"],
    ));
    let fresh_s = t0.elapsed().as_secs_f64();
    assert_eq!(stderr_of(&out).matches("vLLM server started").count(), 3);
    for it in 1..=3 {
        let name = format!("iter-{it:04}/rollouts.parquet");
        assert!(
            std::fs::read(root.join(&name)).unwrap()
                == std::fs::read(runs.join("fresh").join(&name)).unwrap(),
            "{name}: a reloaded server sampled otherwise than a fresh one"
        );
    }
    eprintln!("3 iterations: kept server {kept_s:.1} s, a server per rollout {fresh_s:.1} s");
}

/// The kept server SIGKILLed between two iterations: the next rollout starts a new one
/// (saying why) and the run completes.
#[test]
fn a_kept_server_killed_between_iterations_is_started_again() {
    between_iterations("-KILL", "had stopped");
}

/// The kept server wedged between two iterations (SIGSTOP: it runs but answers nothing):
/// the next rollout's health check gives up after 30 s, the wedged server is killed and a
/// new one serves.
#[test]
fn a_wedged_kept_server_is_replaced() {
    between_iterations("-STOP", "does not answer");
}

/// Sends `sig` to the kept server between iterations 1 and 2 of a run and checks that
/// iteration 2 started a new server for the reason `why`. deltarl itself is stopped
/// (SIGSTOP) meanwhile, after iteration 1's rollout and before its update ends (no
/// evaluation runs: it would draw through the server); a stop that came too late (the
/// update done, iteration 2 maybe begun) is not counted and is tried on a new run.
fn between_iterations(sig: &str, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    // Four optimizer steps leave the update time to be caught.
    let cfg = variant(
        &untied(dir.path(), ""),
        "kill.toml",
        "[update]\noptimizer_steps = 4\n",
    );
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    for attempt in 0..4 {
        let name = format!("killed-{attempt}");
        let mut child = Command::new(bin())
            .args(["iterate", "--config", c, "--run", &name, "--iters", "2"])
            .env("DELTARL_RUNS", &runs)
            .env("DELTARL_NO_PROGRESS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let root = runs.join(&name);
        let done = root.join("iter-0001/manifest/rollout.json");
        let t0 = Instant::now();
        while !done.exists() {
            assert!(t0.elapsed() < Duration::from_secs(600), "no rollout");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = child.id().to_string();
        signal("-STOP", &pid);
        // Until iteration 1's update ends the kept server idles.
        let begun = root.join("iter-0001/manifest/update.json").exists();
        let servers = servers_of(&root);
        if !begun {
            assert!(!servers.is_empty(), "no kept server between iterations");
            for s in &servers {
                signal(sig, &s.to_string());
            }
        }
        signal("-CONT", &pid);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        if begun {
            eprintln!("attempt {attempt}: iteration 2 had begun; trying again");
            continue;
        }
        assert!(status.success(), "{err}");
        assert_eq!(err.matches("vLLM server started").count(), 2, "{err}");
        let s = summary_of::<RolloutSummary>(&root, 2).engine_server;
        let Some(Acquired::Started {
            restarted: Some(restarted),
            ..
        }) = &s
        else {
            panic!("{s:?}: not restarted");
        };
        assert!(restarted.contains(why), "{s:?}");
        // Neither server is left, the replaced one included.
        assert!(servers_of(&root).is_empty(), "{:?}", servers_of(&root));
        return;
    }
    panic!("deltarl could never be stopped between iterations 1 and 2");
}

fn signal(sig: &str, pid: &str) {
    let _ = Command::new("kill").args([sig, pid]).status();
}

/// A kept server whose in-place reload does not take is refused before any request: on a
/// tied LM head vLLM's CPU backend keeps serving the head packed from the old embeddings,
/// so its probe log-probs are not the new policy's. The server is stopped with the error.
#[test]
fn a_server_serving_other_weights_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let folder = |seed: &str| {
        let out = dir.path().join(format!("m{seed}"));
        small_random_model(
            &out,
            &["--vocab", "512", "--max-positions", "128", "--seed", seed],
        );
        out
    };
    let (a, b) = (folder("1"), folder("2"));
    let settings = deltarl::vllm::Settings::new(&deltarl::config::VllmOptions {
        python: vllm_python().display().to_string(),
        ..Default::default()
    });
    let at = deltarl::vllm::Placement {
        log: dir.path().join("vllm.log"),
        cpu: true,
        dtype: deltarl_model::Dtype::F32,
        seed: 0,
        env: Vec::new(),
    };
    let tokenizer = deltarl_model::Tokenizer::from_file(&a.join("tokenizer.json")).unwrap();
    let ids = deltarl::vllm::probe_ids(&tokenizer, 128).unwrap();
    let reference_of = |folder: PathBuf| {
        move |ids: &[u32]| {
            deltarl::vllm::trainer_logprobs(
                &folder,
                tch::Device::Cpu,
                deltarl_model::Dtype::F32,
                ids,
            )
        }
    };
    let kept = deltarl::vllm::Kept::default();
    let (ra, rb) = (reference_of(a.clone()), reference_of(b.clone()));
    let probe_a = deltarl::vllm::Probe {
        ids: ids.clone(),
        reference: &ra,
    };
    let probe_b = deltarl::vllm::Probe {
        ids,
        reference: &rb,
    };
    let (v, how) = deltarl::vllm::acquire(&settings, &a, &at, &kept, &probe_a).unwrap();
    assert!(
        matches!(how, deltarl::vllm::Acquired::Started { .. }),
        "{how:?}"
    );
    assert!(!servers_of(&a).is_empty());
    deltarl::vllm::release(v, &settings, &kept).unwrap();
    let e = deltarl::vllm::acquire(&settings, &b, &at, &kept, &probe_b)
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("does not serve")
            && e.contains(&b.canonicalize().unwrap().display().to_string()),
        "{e}"
    );
    // Refused means stopped: no server of either folder is left.
    assert!(servers_of(&a).is_empty(), "{:?}", servers_of(&a));
}

/// Two ranks under torchrun each start a server of their own on their own core and serve
/// their half of the prompts and of the held-out problems; over two iterations (each
/// evaluation and the second rollout reload both) the files are one process's, byte for
/// byte, the evaluations' included. Both sides compute with one libtorch thread a process
/// (`model.threads = 1`): the second iteration samples from the first's update, whose
/// reductions libtorch splits by thread. (The update's one micro-batch a step is then
/// the same arithmetic in both; see `ranks::config`.)
#[test]
fn two_ranks_serve_from_a_server_each_and_write_one_process_files() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &untied(dir.path(), "concurrency = 1"),
        "one-thread.toml",
        "[model]\nthreads = 1\n[eval]\nevery = 1\n",
    );
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    ok(iterate(&runs, &cfg, "one", &["--iters", "2"]));
    let torchrun = Path::new(&python()).with_file_name("torchrun");
    let out = Command::new(torchrun)
        .args(["--standalone", "--nproc-per-node", "2", "--no-python", "--"])
        .arg(bin())
        .args(["iterate", "--config", c, "--run", "two", "--iters", "2"])
        .env("DELTARL_RUNS", &runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .env("DELTARL_DIST_TIMEOUT_S", "600")
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("vLLM server started").count(), 2, "{err}");
    assert_eq!(err.matches("vLLM server reloaded").count(), 6, "{err}");
    let two = runs.join("two");
    let mut binds = Vec::new();
    for rank in 0..2 {
        let log =
            std::fs::read_to_string(two.join(format!("iter-0001/vllm-rank{rank}.log"))).unwrap();
        // In each iteration 4 of the 8 prompts and 8 of the 16 held-out problems, and the
        // probes of the three reloads.
        assert_eq!(
            log.matches("POST /v1/completions").count(),
            2 * (4 + 8) + 3,
            "rank {rank}"
        );
        let bind = log
            .lines()
            .find_map(|l| l.split("VLLM_CPU_OMP_THREADS_BIND=").nth(1))
            .map(|s| s.split(',').next().unwrap_or("").to_string());
        binds.push(bind.unwrap_or_default());
    }
    assert!(binds[0] != binds[1] && !binds[0].is_empty(), "{binds:?}");
    for it in 1..=2 {
        for f in [
            "rollouts.parquet",
            "scores.parquet",
            "features.parquet",
            "eval.parquet",
        ] {
            let name = format!("iter-{it:04}/{f}");
            assert!(
                std::fs::read(runs.join("one").join(&name)).unwrap()
                    == std::fs::read(two.join(&name)).unwrap(),
                "{name} differs between one process and two ranks"
            );
        }
    }
}
