//! Two processes under the venv's `torchrun` (gloo on the CPU): the same files as one
//! process, the same weights bit for bit (see `config` for what that takes), sharded optimizer state equal to unsharded, and a
//! rank killed mid-features or mid-update ending both without a hang, then a clean resume;
//! a run resumed with another number of processes ([`resume`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

mod features_memory;
mod persist;
mod resume;
mod zero2_memory;

fn torchrun() -> PathBuf {
    Path::new(&python()).with_file_name("torchrun")
}

/// `torchrun --standalone --nproc-per-node 2 --no-python -- deltarl ARGS` (the `--` keeps
/// torchrun's parser from reading `--run` as its `--run-path`).
fn torchrun_cmd(runs: &Path, args: &[&str]) -> Command {
    torchrun_n(runs, 2, args)
}

/// [`torchrun_cmd`] with `n` processes.
fn torchrun_n(runs: &Path, n: usize, args: &[&str]) -> Command {
    let mut c = Command::new(torchrun());
    let n = n.to_string();
    c.args(["--standalone", "--nproc-per-node", &n, "--no-python", "--"])
        .arg(bin())
        .args(args)
        .env("DELTARL_RUNS", runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .env("DELTARL_DIST_TIMEOUT_S", "60");
    c
}

fn both(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// The micro configuration with several generation sessions (each through fewer slots than
/// rows; the evaluation's too, every iteration) and features chunks, so both
/// ranks have work in every shared stage, and two optimizer steps of two micro-batches.
///
/// What makes the update exactly reproducible: one intra-op thread on both sides
/// (`model.threads = 1`; left at 0, one process takes both cores and each of two ranks
/// one, and libtorch splits its reductions by thread), and at most one micro-batch a rank
/// a step. Each micro-batch's gradient is then the same bits in both runs, and the one
/// process's sum `g0 + g1` and the all-reduce's `g0 + g1` are the same single f32 addition.
/// With more micro-batches the two runs add them in other groupings (`(g0 + g1) + g2` vs
/// `(g0 + g2) + g1`), and AdamW's step `g / (|g| + eps)` turns a last-bit difference of a
/// near-zero gradient into one of up to `lr` in the weight: no useful tolerance exists.
/// 8 prompts x 4 samples in 2 steps: at most 4 groups, 16 rows a step, so 8 rows a
/// micro-batch cut it in at most two.
fn config(dir: &Path) -> PathBuf {
    variant(
        &micro_config(dir),
        "ranks.toml",
        "[model]\nthreads = 1\n[rollout]\nmax_batch_rows = 4\nsession_rows = 8\n[features]\nchunk_rows = 5\n\
         [update]\noptimizer_steps = 2\nmicro_batch_rows = 8\n[eval]\nevery = 1\n",
    )
}

/// Two files' bytes are equal (named in the failure).
fn same_bytes(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(x == y, "{} and {} differ", a.display(), b.display());
}

/// Two update.parquet files hold the same rows, every column bit for bit (the files' own
/// metadata may differ).
fn same_update_rows(a: &Path, b: &Path) {
    run_python(
        "import sys, polars as pl\n\
         a = pl.read_parquet(sys.argv[1]); b = pl.read_parquet(sys.argv[2])\n\
         assert a.height >= 2 and a.equals(b), (a, b)",
        &[a, b],
    );
}

fn stage_files(run: &Path, iter: u32) -> std::collections::BTreeMap<String, Vec<u8>> {
    parquet_files(&run.join(format!("iter-{iter:04}")))
        .into_iter()
        .filter(|(k, _)| k.ends_with(".parquet") && k != "update.parquet")
        .collect()
}

#[test]
fn two_ranks_give_the_files_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    ok(deltarl(&runs, &["iterate", "--config", c, "--run", "one"]));
    let out = torchrun_cmd(&runs, &["iterate", "--config", c, "--run", "two"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let (one, two) = (runs.join("one"), runs.join("two"));
    // The console and metrics.jsonl say how many processes ran.
    assert!(both(&out).contains("2 processes)"), "{}", both(&out));
    for (run, n) in [(&one, 1), (&two, 2)] {
        let log = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        assert!(log.lines().count() >= 5, "{log}");
        for line in log.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["processes"], n, "{line}");
        }
    }
    // Rollouts, scores, features, coefficients and the evaluation (each rank its share of
    // the held-out sessions): byte for byte.
    let a = stage_files(&one, 1);
    assert_eq!(a.len(), 5, "{:?}", a.keys());
    assert_eq!(differing(&a, &stage_files(&two, 1)), Vec::<String>::new());
    // The new weights and the update's rows (loss, gradient norm, ... per step): equal
    // bits, as `config` says why.
    let w = "iter-0001/policy/model.safetensors";
    same_bytes(&two.join(w), &one.join(w));
    let u = "iter-0001/update.parquet";
    same_update_rows(&two.join(u), &one.join(u));
    // Each manifest says what it was computed with.
    let m = deltarl_schemas::Manifest::read(&two.join("iter-0001/manifest/update.json"))
        .unwrap()
        .unwrap();
    assert_eq!(
        m.compute,
        Some(deltarl_schemas::Compute {
            threads: 1,
            processes: 2
        })
    );
    // The evaluation was shared: 16 held-out problems x 1 sample in sessions of 8, one a
    // rank, and it still wrote the one process's file (above).
    let m = deltarl_schemas::Manifest::read(&two.join("iter-0001/manifest/eval.json"))
        .unwrap()
        .unwrap();
    assert_eq!(m.compute.map(|c| c.processes), Some(2));
    // `status` says when a rerun here would not compute as the recorded stages did (the
    // shared stages ran in two processes), and is silent when it would.
    let text = |run: &str| {
        let out = ok(deltarl(&runs, &["status", "--run", run]));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let two_status = text("two");
    assert!(
        two_status.contains("note: computed with different thread counts")
            && two_status.contains("1 thread x 2 processes: rollout of iteration 1")
            && two_status.contains("a rerun here"),
        "{two_status}"
    );
    assert!(!text("one").contains("note:"), "{}", text("one"));
}

#[test]
fn sharded_optimizer_state_gives_the_unsharded_step() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    // Two iterations each, so the second loads optimizer state the first saved.
    for (run, optimizer, gradients) in [
        ("plain", "false", "false"),
        ("zero", "true", "false"),
        ("zero2", "true", "true"),
    ] {
        let opt = format!("update.shard_optimizer={optimizer}");
        let grads = format!("update.shard_gradients={gradients}");
        let out = torchrun_cmd(
            &runs,
            &[
                "iterate", "--config", c, "--run", run, "--iters", "2", "--set", &opt, "--set",
                &grads,
            ],
        )
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", both(&out));
    }
    // Each parameter's owner takes the very step every rank takes unsharded: equal bits,
    // weights and the optimizer state's file included. ZeRO-2 too: with one micro-batch a
    // rank a step, the owner's gradient sum is the all-reduce's (see `config`).
    let plain = parquet_files(&runs.join("plain"));
    assert!(plain
        .keys()
        .any(|k| k.ends_with("optimizer/optimizer.safetensors")));
    for run in ["zero", "zero2"] {
        let b = parquet_files(&runs.join(run));
        assert_eq!(differing(&plain, &b), Vec::<String>::new(), "{run}");
    }
    // Under ZeRO-2 each rank kept the gradient sums of its own parameters only (f32
    // weights: 4 bytes a parameter, the two shares the whole model).
    let log = std::fs::read_to_string(runs.join("zero2/metrics.jsonl")).unwrap();
    let m = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["stage"] == "update")
        .unwrap()["metrics"]
        .clone();
    let sums: Vec<f64> = (0..2)
        .map(|r| {
            m[&format!("update/optimizer/rank{r}/gradient_sum_bytes")]
                .as_f64()
                .unwrap()
        })
        .collect();
    let params = deltarl_model::load(
        &runs.join("zero2/iter-0001/policy"),
        tch::Device::Cpu,
        deltarl_model::Dtype::F32,
    )
    .unwrap()
    .vs
    .variables()
    .values()
    .map(|t| t.numel())
    .sum::<usize>();
    assert!(sums.iter().all(|&b| b > 0.0), "{m}");
    assert_eq!(sums[0] + sums[1], 4.0 * params as f64, "{m}");
}

/// The process of `rank` among deltarl processes working on run `run`.
fn rank_pid(run: &str, rank: usize) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let has = |hay: &[u8], needle: &[u8]| hay.split(|&b| b == 0).any(|w| w == needle);
        if has(&cmd, run.as_bytes())
            && cmd
                .split(|&b| b == 0)
                .next()
                .is_some_and(|a| a.ends_with(b"deltarl"))
            && has(&env, format!("RANK={rank}").as_bytes())
        {
            return Some(pid);
        }
    }
    None
}

/// Kills rank 1 of a two-process `iterate` once `after`'s manifest is written, so the kill
/// lands in `stage` (or at its start, while rank 1 waits for it): both stop without a hang,
/// torchrun names the rank, `stage` is not recorded, and the next run completes the
/// iteration with the files of a one-process run. A kill that came too late (`stage`
/// already recorded) is not counted and is tried again on a new run, at most 4 times.
fn kill_rank_1_in(cfg: &Path, runs: &Path, stage: &str, after: &str) {
    let c = cfg.to_str().unwrap();
    ok(deltarl(runs, &["iterate", "--config", c, "--run", "ref"]));
    let mut landed = None;
    for attempt in 0..4 {
        // Named by stage: rank_pid finds processes by run name, and the tests run at once.
        let name = format!("killed-{stage}-{attempt}");
        let t0 = Instant::now();
        let child = torchrun_cmd(runs, &["iterate", "--config", c, "--run", &name])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let before = runs
            .join(&name)
            .join(format!("iter-0001/manifest/{after}.json"));
        while !before.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(300),
                "{after} never finished"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = rank_pid(&name, 1).expect("rank 1 is running");
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let killed_at = Instant::now();
        let out = child.wait_with_output().unwrap();
        let text = both(&out);
        let recorded = runs
            .join(&name)
            .join(format!("iter-0001/manifest/{stage}.json"));
        if out.status.success() || recorded.exists() {
            // The stage had finished before the kill arrived: not a kill in it.
            eprintln!("attempt {attempt}: the kill came after {stage} had finished");
            continue;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(60),
            "took {:?} to stop: {text}",
            killed_at.elapsed()
        );
        // torchrun names the rank that died; rank 0's own error says which rank it is.
        assert!(
            text.contains("rank      : 1") || text.contains("rank: 1"),
            "{text}"
        );
        eprintln!("attempt {attempt}: the kill landed in {stage}");
        landed = Some(name);
        break;
    }
    let name = landed.unwrap_or_else(|| panic!("no kill landed in {stage} in 4 runs"));
    // Nothing half-written: the next run completes the iteration.
    let out = torchrun_cmd(
        runs,
        &["iterate", "--config", c, "--run", &name, "--until", "1"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let ref_files = stage_files(&runs.join("ref"), 1);
    assert_eq!(
        differing(&ref_files, &stage_files(&runs.join(&name), 1)),
        Vec::<String>::new()
    );
    let w = "iter-0001/policy/model.safetensors";
    same_bytes(&runs.join(&name).join(w), &runs.join("ref").join(w));
    let u = "iter-0001/update.parquet";
    same_update_rows(&runs.join(&name).join(u), &runs.join("ref").join(u));
}

#[test]
fn a_rank_killed_mid_update_stops_both_and_the_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    // 8 optimizer steps, each an all-reduce of every gradient: an update of many
    // collectives, so the kill lands inside it. At most one group (4 rows) a step, cut in
    // two micro-batches of 2 rows, one a rank (see `config`).
    let cfg = variant(
        &config(dir.path()),
        "kill.toml",
        "[update]\noptimizer_steps = 8\nmicro_batch_rows = 2\n",
    );
    kill_rank_1_in(&cfg, &dir.path().join("runs"), "update", "coeffs");
}

#[test]
fn a_rank_killed_mid_features_stops_both_and_the_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    // One response a pass: as many passes (each streamed to rank 0) as responses, so the
    // stage lasts long enough for the kill to land in it. 16 prompts in 2 steps: at most 32
    // rows a step, two micro-batches of 16 (see `config`).
    let cfg = variant(
        &config(dir.path()),
        "kill.toml",
        "[rollout]\nprompts_per_iter = 16\n[features]\nchunk_rows = 1\n\
         [update]\nmicro_batch_rows = 16\n",
    );
    kill_rank_1_in(&cfg, &dir.path().join("runs"), "features", "score");
}

/// Two "nodes" (two torchrun agents of one process each) meeting through torchrun's c10d
/// rendezvous, as `srun torchrun --nnodes 2 --rdzv-endpoint HOST:PORT` does on a cluster.
#[test]
fn two_agents_meet_through_the_c10d_rendezvous() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    ok(deltarl(&runs, &["iterate", "--config", c, "--run", "one"]));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("127.0.0.1:{port}");
    let agents: Vec<_> = (0..2)
        .map(|_| {
            let mut cmd = Command::new(torchrun());
            cmd.args([
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
            ])
            .args([
                "--rdzv-endpoint",
                &endpoint,
                "--rdzv-id",
                "e2e",
                "--no-python",
                "--",
            ])
            .arg(bin())
            .args(["iterate", "--config", c, "--run", "nodes"])
            .env("DELTARL_RUNS", &runs)
            .env("DELTARL_NO_PROGRESS", "1")
            .env("DELTARL_DIST_TIMEOUT_S", "60")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for a in agents {
        let out = a.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", both(&out));
    }
    let a = stage_files(&runs.join("one"), 1);
    assert_eq!(
        differing(&a, &stage_files(&runs.join("nodes"), 1)),
        Vec::<String>::new()
    );
}
