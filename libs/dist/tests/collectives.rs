//! The collectives across two real processes under the venv's `torchrun`: the test binary
//! relaunches itself as the two ranks. The ranks' own functions (`*_worker`) are ignored
//! tests: a plain `cargo test` lists them as ignored, never as passed, and the launching
//! test runs them with `--ignored` under torchrun.

use std::process::Command;
use std::time::{Duration, Instant};

use deltarl_dist::{Group, Launch};
use tch::{Kind, Tensor};

/// torchrun from the environment deltarl builds against (`DELTARL_PYTHON`'s folder).
fn torchrun() -> Option<std::path::PathBuf> {
    let py = std::env::var_os("DELTARL_PYTHON")?;
    let t = std::path::Path::new(&py).parent()?.join("torchrun");
    t.exists().then_some(t)
}

fn launch(test: &str, extra: &[(&str, &str)]) -> std::process::Output {
    let Some(torchrun) = torchrun() else {
        panic!("torchrun not found next to DELTARL_PYTHON (make venv)");
    };
    let exe = std::env::current_exe().expect("test binary");
    let mut c = Command::new(torchrun);
    c.args(["--standalone", "--nproc-per-node", "2", "--no-python", "--"])
        .arg(exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DELTARL_DIST_WORKER", test);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().expect("torchrun runs")
}

/// The group of this worker; it is only ever run by `launch`, under torchrun.
fn worker(name: &str) -> (Launch, Group) {
    assert_eq!(
        std::env::var("DELTARL_DIST_WORKER").ok().as_deref(),
        Some(name),
        "a worker runs only under torchrun, launched by the test that names it"
    );
    let l = Launch::from_env()
        .expect("launch variables")
        .expect("torchrun sets WORLD_SIZE = 2");
    let g = Group::connect(&l, Duration::from_secs(60), false)
        .expect("rendezvous")
        .with_timeout_origin("set by the test");
    (l, g)
}

#[test]
#[ignore = "a rank of collectives_across_two_processes, run by it under torchrun"]
fn collectives_worker() {
    let (l, g) = worker("collectives_worker");
    assert_eq!((g.rank(), g.world()), (l.rank, 2));
    // Sum: rank r contributes [r+1, 10(r+1)] -> [3, 30] on both.
    let r = g.rank() as f32;
    let mut t = Tensor::from_slice(&[r + 1.0, 10.0 * (r + 1.0)]);
    g.all_reduce_sum(&mut t).unwrap();
    assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![3.0, 30.0]);
    // bf16 too (the working weights of a bf16 run).
    let mut b = Tensor::from_slice(&[r + 0.5]).to_kind(Kind::BFloat16);
    g.all_reduce_sum(&mut b).unwrap();
    assert_eq!(b.to_kind(Kind::Float).double_value(&[0]), 2.0);
    // Broadcast from rank 1.
    let mut t = Tensor::from_slice(&[r; 4]);
    g.broadcast(&mut t, 1).unwrap();
    assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![1.0; 4]);
    // Bytes of different lengths, in rank order.
    let mine: Vec<u8> = (0..=(g.rank() as u8 * 3)).collect();
    let all = g.all_gather_bytes(&mine).unwrap();
    assert_eq!(all, vec![vec![0], vec![0, 1, 2, 3]]);
    let empty = g.all_gather_bytes(&[]).unwrap();
    assert_eq!(empty, vec![Vec::<u8>::new(), Vec::new()]);
    // Bytes from rank 1 to rank 0 alone, in the order sent (an empty message too).
    let messages: [&[u8]; 3] = [b"first", b"", &[7u8; 70_000]];
    for m in messages {
        if g.rank() == 1 {
            g.send_bytes(m, 0).unwrap();
        } else {
            assert_eq!(g.recv_bytes(1).unwrap(), m);
        }
    }
    // The store: rank 0 publishes, rank 1 waits for it.
    if g.rank() == 0 {
        g.set("k", b"v").unwrap();
    } else {
        assert_eq!(g.wait_key("k").unwrap(), b"v");
    }
    g.barrier().unwrap();
    println!("rank {} ok", g.rank());
}

#[test]
fn collectives_across_two_processes() {
    let out = launch("collectives_worker", &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("rank 0 ok") && text.contains("rank 1 ok"),
        "{text}"
    );
}

#[test]
#[ignore = "a rank of a_dead_rank_ends_the_others_quickly, run by it under torchrun"]
fn failure_worker() {
    let (_, g) = worker("failure_worker");
    let grace = Duration::from_secs(40);
    if g.rank() == 1 {
        // Rank 0 is inside an all-reduce this rank never joins: the report closes this
        // rank's connections, so rank 0's collective fails now, and this rank stays until
        // rank 0 has printed what it saw and reported in turn (torchrun stops rank 0 as soon
        // as this one exits).
        g.report_failure("out of patience");
        let silent = g.await_reports(grace);
        assert!(silent.is_empty(), "rank 0 never reported");
        std::process::exit(3);
    }
    let mut t = Tensor::from_slice(&[1.0f32]);
    let e = g.all_reduce_sum(&mut t).unwrap_err().to_string();
    println!("rank 0 saw: {e}");
    g.report_failure(&e);
    assert!(g.await_reports(grace).is_empty());
    assert!(e.contains("rank 1 failed: out of patience"), "{e}");
}

#[test]
fn a_dead_rank_ends_the_others_quickly() {
    let t0 = Instant::now();
    let out = launch("failure_worker", &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    // Rank 0's collective failed and named rank 1 with its reason.
    assert!(
        text.contains("rank 0 saw: rank 0 of 2: all-reduce failed:"),
        "{text}"
    );
    assert!(text.contains("rank 1 failed: out of patience"), "{text}");
    // The error names the timeout in force and where it came from.
    assert!(
        text.contains("(collective timeout 60 s: set by the test)"),
        "{text}"
    );
    // Noticed through the closed connections, long before the 60 s collective timeout.
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "took {:?}: {text}",
        t0.elapsed()
    );
}
