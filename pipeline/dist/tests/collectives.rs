//! The collectives across two real processes under the venv's `torchrun`: the test binary
//! relaunches itself as the two ranks (`worker`, which does nothing without torchrun's
//! variables).

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
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env("DELTARL_DIST_WORKER", test);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().expect("torchrun runs")
}

/// The group of this worker, or None outside torchrun / when another test is launched.
fn worker(name: &str) -> Option<(Launch, Group)> {
    if std::env::var("DELTARL_DIST_WORKER").ok()? != name {
        return None;
    }
    let l = Launch::from_env().expect("launch variables")?;
    let g = Group::connect(&l, Duration::from_secs(60), false).expect("rendezvous");
    Some((l, g))
}

#[test]
fn collectives_worker() {
    let Some((l, g)) = worker("collectives_worker") else {
        return;
    };
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
    if std::env::var_os("DELTARL_DIST_WORKER").is_some() {
        return;
    }
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
fn failure_worker() {
    let Some((_, g)) = worker("failure_worker") else {
        return;
    };
    if g.rank() == 1 {
        g.report_failure("out of patience");
        // Stay alive a while: rank 0 must learn of the failure from the report in the
        // store. Exiting at once races torchrun, which stops rank 0 as soon as rank 1 dies
        // and can do so before rank 0 prints (seen on a loaded machine).
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(3);
    }
    let mut t = Tensor::from_slice(&[1.0f32]);
    let e = g.all_reduce_sum(&mut t).unwrap_err().to_string();
    println!("rank 0 saw: {e}");
    assert!(e.contains("rank 1 failed: out of patience"), "{e}");
}

#[test]
fn a_dead_rank_ends_the_others_quickly() {
    if std::env::var_os("DELTARL_DIST_WORKER").is_some() {
        return;
    }
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
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "took {:?}: {text}",
        t0.elapsed()
    );
}
