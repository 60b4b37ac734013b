//! The collectives across two real processes under the venv's `torchrun`: the test binary
//! relaunches itself as the two ranks (`deltarl_dist::testing`). The ranks' own functions
//! (`*_worker`) are ignored tests, run by the launching test under torchrun.

use std::time::{Duration, Instant};

use deltarl_dist::testing::{launch, output_text, worker};
use tch::{Kind, Tensor};

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
    // Reduce into rank 1 alone (rank 0's copy holds a partial sum, not read).
    let mut t = Tensor::from_slice(&[r + 1.0, 0.25]);
    g.reduce_sum(&mut t, 1).unwrap();
    if g.rank() == 1 {
        assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![3.0, 0.5]);
    }
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
    let out = launch("collectives_worker", 2, &[]);
    let text = output_text(&out);
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
    let out = launch("failure_worker", 2, &[]);
    let text = output_text(&out);
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
