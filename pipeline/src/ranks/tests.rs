//! The collective timeout by configuration, the spill file, and the commands rank 0 sends.
#![allow(clippy::unwrap_used)]

use super::*;

/// The 8B config on 8 CUDA ranks: 128 x 16 / 8 = 256 samples of 20,480 tokens a rank,
/// 5,242,880 tokens at 500 a second = 10,485.76 s, rounded up. The CPU default on 2
/// ranks: 64 x 8 / 2 = 256 samples of 40 tokens at 4 a second = 2,560 s; on 16 ranks
/// 32 x 40 / 4 = 320 s, under the floor of 30 minutes. An override wins and is named;
/// a bad one is refused.
#[test]
fn the_collective_timeout_is_the_rollout_bound() {
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let load = |name: &str| {
        crate::config::Resolved::load_with(&configs.join(name), &[])
            .unwrap()
            .opts
            .rollout
    };
    let big = load("qwen3-8b-dapo-math.toml");
    let (t, origin) = collective_timeout(&big, 8, true, None).unwrap();
    assert_eq!(t, Duration::from_secs(10_486));
    assert!(
        origin.starts_with("the rollout bound, 256 samples x 20480 tokens a rank at 500"),
        "{origin}"
    );
    // One rank decodes all of it: eight times the tokens.
    let (t1, _) = collective_timeout(&big, 1, true, None).unwrap();
    assert_eq!(t1, Duration::from_secs(83_887));
    let tiny = load("tiny-arith.toml");
    let (t, _) = collective_timeout(&tiny, 2, false, None).unwrap();
    assert_eq!(t, Duration::from_secs(2_560));
    let (t, _) = collective_timeout(&tiny, 16, false, None).unwrap();
    assert_eq!(t, Duration::from_secs(MIN_TIMEOUT_S));
    let (t, origin) = collective_timeout(&big, 8, true, Some(" 60 ")).unwrap();
    assert_eq!(
        (t, origin.as_str()),
        (Duration::from_secs(60), "set by DELTARL_DIST_TIMEOUT_S")
    );
    for bad in ["0", "ten", "-5"] {
        let err = format!(
            "{:#}",
            collective_timeout(&big, 8, true, Some(bad)).unwrap_err()
        );
        assert!(
            err.contains("DELTARL_DIST_TIMEOUT_S") && err.contains(bad),
            "{err}"
        );
    }
}

/// Pieces come back from the spill as pushed (an empty one as no rows), the file goes
/// with the spill, and only the spills of ranks past the world are stale.
#[test]
fn a_spill_gives_back_its_pieces_and_leaves_nothing() {
    use deltarl_schemas::{FeatureRow, Precision};
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("features.parquet");
    let row = |i: u32, n: usize| FeatureRow {
        prompt_id: format!("p{i}"),
        sample_idx: i,
        dim: 2,
        precision: Precision::Bf16,
        features: vec![0.5; 2 * n],
        token_prob: vec![0.25; n],
        logprob: vec![-1.0; n],
        entropy: vec![2.0; n],
    };
    let pieces = vec![vec![row(0, 3), row(1, 1)], Vec::new(), vec![row(2, 5)]];
    let mut spill = Spill::create(&output, 1).unwrap();
    for p in &pieces {
        spill.push(p).unwrap();
    }
    let path = dir.path().join(".features.parquet.rank-1.spill");
    assert!(path.exists());
    let back: Vec<Vec<FeatureRow>> = spill
        .pieces()
        .map(|p| {
            let p = p.unwrap();
            if p.is_empty() {
                return Vec::new();
            }
            deltarl_schemas::read_table::<FeatureRow, _>(p.as_slice(), "piece")
                .unwrap()
                .0
        })
        .collect();
    assert_eq!(back, pieces);
    drop(spill);
    assert!(!path.exists());
    for r in [0, 1, 2, 3] {
        std::fs::write(Spill::path(&output, r), b"x").unwrap();
    }
    std::fs::write(dir.path().join(".features.parquet.rank-x.spill"), b"x").unwrap();
    Spill::remove_stale(&output, 2);
    let left: Vec<bool> = (0..4).map(|r| Spill::path(&output, r).exists()).collect();
    assert_eq!(left, [true, true, false, false]);
    assert!(dir.path().join(".features.parquet.rank-x.spill").exists());
}

#[test]
fn commands_round_trip() {
    for c in [
        Command::End,
        Command::Run {
            iter: 3,
            stage: Stage::Features,
        },
    ] {
        assert_eq!(Command::decode(&c.encode()).unwrap(), c);
    }
    assert!(Command::decode("jump 3").is_err());
}
