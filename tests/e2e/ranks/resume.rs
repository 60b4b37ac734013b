//! A run resumed with another number of processes: the optimizer's state file is the same
//! whoever wrote it (each rank writes the tensors it owns into the one file).

use std::path::Path;
use std::process::Command;

use super::{both, config, same_bytes, same_update_rows, torchrun_n};
use crate::common::*;

/// The optimizer's state file does not depend on how many processes wrote it, so a run
/// resumes with another number: iteration 1 in two sharded processes and iteration 2 in
/// one, or the other way round, give the files of one process running both (two ranks
/// equal one process bit for bit: `config`). Four processes under ZeRO-2 write a state
/// one process and two resume from.
#[test]
fn a_run_resumes_with_another_number_of_processes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let runs = dir.path().join("runs");
    let c = cfg.to_str().unwrap();
    let sharded = "update.shard_optimizer=true";
    let iterate = |run: &str, iters: &str| {
        vec![
            "iterate", "--config", c, "--run", run, "--iters", iters, "--set", sharded,
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    let torchrun = |n: usize, args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = torchrun_n(&runs, n, &args).output().unwrap();
        assert!(out.status.success(), "{}", both(&out));
    };
    let one = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(deltarl(&runs, &args));
    };
    one(iterate("one", "2"));
    torchrun(2, iterate("two-then-one", "1"));
    one(iterate("two-then-one", "2"));
    one(iterate("one-then-two", "1"));
    torchrun(2, iterate("one-then-two", "2"));
    let files = [
        "iter-0001/optimizer/optimizer.safetensors",
        "iter-0001/optimizer/optimizer.json",
        "iter-0002/optimizer/optimizer.safetensors",
        "iter-0002/optimizer/optimizer.json",
        "iter-0002/policy/model.safetensors",
    ];
    for run in ["two-then-one", "one-then-two"] {
        for f in files {
            same_bytes(&runs.join(run).join(f), &runs.join("one").join(f));
        }
        let u = "iter-0002/update.parquet";
        same_update_rows(&runs.join(run).join(u), &runs.join("one").join(u));
    }
    // Each process logs its memory while it loaded and saved the state (metrics.jsonl):
    // sharded, the two processes' shares make the one process's state, and neither held
    // more than its share and one tensor past 64 MB of buffers.
    let logged = |run: &str, iter: u64| -> serde_json::Value {
        let log = std::fs::read_to_string(runs.join(run).join("metrics.jsonl")).unwrap();
        log.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["stage"] == "update" && v["iter"] == iter)
            .unwrap()["metrics"]
            .clone()
    };
    let (whole, split) = (logged("one", 2), logged("one-then-two", 2));
    let get = |m: &serde_json::Value, rank: usize, what: &str| {
        let key = format!("update/optimizer/rank{rank}/{what}");
        m[&key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} not in {m}"))
    };
    let owned = |m: &serde_json::Value, r| get(m, r, "owned_state_bytes");
    assert!(owned(&split, 0) > 0.0 && owned(&split, 1) > 0.0, "{split}");
    assert_eq!(owned(&split, 0) + owned(&split, 1), owned(&whole, 0));
    for rank in 0..2 {
        let bound = owned(&split, rank) + get(&split, rank, "largest_state_tensor_bytes") + 64e6;
        for phase in ["load_rss_over_start_bytes", "save_rss_over_start_bytes"] {
            assert!(
                get(&split, rank, phase) <= bound,
                "rank {rank} {phase}: {split}"
            );
        }
    }
    // Four processes (their sums grouped otherwise, so not the same bits), under ZeRO-2
    // (two micro-batches a step: two ranks idle each round, sending zeros): the state
    // they write is read by two and by one (the same setting, so the same run hash).
    let zero2 = |mut args: Vec<String>| {
        args.extend(["--set".into(), "update.shard_gradients=true".into()]);
        args
    };
    torchrun(4, zero2(iterate("four", "1")));
    let four = runs.join("four");
    // Its file has the one process's tensors, and every one was written by its owner: a
    // tensor no process wrote reads as zeros, while every second moment of a trained
    // parameter is positive somewhere.
    let t = deltarl_model::TensorFile::open(&four.join(files[0])).unwrap();
    let o = deltarl_model::TensorFile::open(&runs.join("one").join(files[0])).unwrap();
    assert_eq!(t.names().collect::<Vec<_>>(), o.names().collect::<Vec<_>>());
    let second: Vec<&str> = t.names().filter(|n| n.starts_with("exp_avg_sq.")).collect();
    assert!(second.len() >= 4, "{second:?}");
    for name in second {
        let v = t.read(name).unwrap().unwrap();
        assert!(
            v.sum(tch::Kind::Double).double_value(&[]) > 0.0,
            "{name} was not written"
        );
    }
    for (n, to) in [(2, "four-then-two"), (1, "four-then-one")] {
        copy_dir(&four, &runs.join(to));
        if n == 1 {
            one(zero2(iterate(to, "2")));
        } else {
            torchrun(n, zero2(iterate(to, "2")));
        }
        assert!(runs.join(to).join(files[2]).exists(), "{to}");
    }
}

/// Copies folder `from` to `to` (a run resumed under another name).
fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}
