//! The engine's batching changes no sample beyond float round-off: prompts of mixed
//! lengths decoded in one batch, through fewer slots than rows (continuous batching), or
//! in sessions shared out to several processes give the tokens of one-row decoding, and
//! the same call twice gives the same bits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_model::generate::{generate, generate_part, Request, Sample, SampleSettings};
use deltarl_model::{random_policy, Policy};
use deltarl_schemas::Shard;
mod common;

use common::greedy_gaps;

fn policy(tied: bool, seed: u64) -> (tempfile::TempDir, Policy) {
    tch::set_num_threads(1);
    let dir = tempfile::tempdir().unwrap();
    let p = random_policy(
        dir.path(),
        &deltarl_data::tokenizer_json(),
        deltarl_data::vocab_size(),
        tied,
        seed,
        2.0,
    )
    .unwrap();
    (dir, p)
}

fn settings(temperature: f64, max_new_tokens: usize, slots: usize) -> SampleSettings {
    SampleSettings {
        temperature,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens,
        eos_ids: Vec::new(),
        stop_strings: Vec::new(),
        max_batch_rows: slots,
        max_cache_tokens: None,
        session_rows: None,
    }
}

/// Seven prompts of 1 to 19 tokens (no two alike), `g` samples each.
fn requests(vocab: u32, g: u64) -> Vec<Request> {
    (0..7u32)
        .map(|i| Request {
            prompt_ids: (0..1 + (i * 7) % 19)
                .map(|t| 2 + (i * 13 + t * 5) % (vocab - 2))
                .collect(),
            seeds: (0..g).map(|k| 100 * u64::from(i) + k).collect(),
        })
        .collect()
}

/// The largest |difference| of two samples' log-probs (same lengths asserted).
fn max_lp_diff(a: &Sample, b: &Sample) -> f64 {
    assert_eq!(a.logprobs.len(), b.logprobs.len());
    a.logprobs
        .iter()
        .zip(&b.logprobs)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

#[test]
fn greedy_rows_of_mixed_lengths_decode_as_one_row_alone() {
    for (tied, seed) in [(true, 3), (false, 4)] {
        let (_d, p) = policy(tied, seed);
        let reqs = requests(deltarl_data::vocab_size() as u32, 1);
        let n = 24;
        let together = generate(
            &p.model,
            &p.tokenizer,
            &reqs,
            &settings(0.0, n, 64),
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(together.len(), reqs.len());
        // A batch of rows at other positions, masked keys and padded attention lengths:
        // each log-prob within the f32 round-off bound of this model.
        let tol = p
            .model
            .f32_logprob_tolerance(p.model.config.max_position_embeddings);
        let typical = p
            .model
            .f32_logit_statistical(p.model.config.max_position_embeddings);
        let (mut worst, mut compared) = (0.0f64, 0);
        for (req, batched) in reqs.iter().zip(&together) {
            let alone = generate(
                &p.model,
                &p.tokenizer,
                std::slice::from_ref(req),
                &settings(0.0, n, 1),
                &mut |_, _| {},
            )
            .unwrap();
            let (a, b) = (&alone[0][0], &batched[0]);
            assert_eq!(a.tokens.len(), n);
            assert_eq!(b.tokens.len(), n);
            // Tokens agree up to the first step whose two largest logits lie within twice
            // the statistical size of the round-off (either may win there).
            let gaps = greedy_gaps(&p, &req.prompt_ids, &a.tokens);
            let sure = gaps
                .iter()
                .position(|&g| g <= 2.0 * typical)
                .unwrap_or(gaps.len());
            assert_eq!(
                a.tokens[..sure],
                b.tokens[..sure],
                "prompt {:?}",
                req.prompt_ids
            );
            compared += sure;
            let sure_a = Sample {
                tokens: a.tokens[..sure].to_vec(),
                logprobs: a.logprobs[..sure].to_vec(),
                finish: a.finish,
            };
            let sure_b = Sample {
                tokens: b.tokens[..sure].to_vec(),
                logprobs: b.logprobs[..sure].to_vec(),
                finish: b.finish,
            };
            let d = max_lp_diff(&sure_a, &sure_b);
            assert!(d <= tol, "log-probs differ by {d:e} > {tol:e}");
            worst = worst.max(d);
        }
        // Most of the steps are compared (a near-tie cuts a row short, not the test).
        assert!(
            compared >= reqs.len() * n / 2,
            "only {compared} steps compared"
        );
        eprintln!(
            "tied={tied}: batched vs alone, largest log-prob difference {worst:e} (bound {tol:e})"
        );
    }
}

#[test]
fn fewer_slots_than_rows_and_end_tokens_change_no_token() {
    let (_d, p) = policy(true, 5);
    let reqs = requests(deltarl_data::vocab_size() as u32, 4);
    let mut s = settings(1.0, 20, 64);
    // End tokens finish rows early, at different steps, so slots free up mid-session.
    s.eos_ids = vec![deltarl_data::EOS_ID, 7, 9];
    let all = generate(&p.model, &p.tokenizer, &reqs, &s, &mut |_, _| {}).unwrap();
    let lengths: Vec<usize> = all.iter().flatten().map(|x| x.tokens.len()).collect();
    assert!(
        lengths.iter().any(|&l| l < 20),
        "no row ended early: {lengths:?}"
    );
    assert!(lengths.contains(&20), "every row ended early: {lengths:?}");
    let tol = p
        .model
        .f32_logprob_tolerance(p.model.config.max_position_embeddings);
    for slots in [1, 3, 10] {
        s.max_batch_rows = slots;
        let few = generate(&p.model, &p.tokenizer, &reqs, &s, &mut |_, _| {}).unwrap();
        assert_eq!(few.len(), all.len());
        for (x, y) in few.iter().flatten().zip(all.iter().flatten()) {
            assert_eq!(x.tokens, y.tokens, "{slots} slots");
            assert_eq!(x.finish, y.finish);
            assert!(max_lp_diff(x, y) <= tol, "{slots} slots");
        }
        assert_eq!(few.iter().flatten().count(), all.iter().flatten().count());
    }
}

#[test]
fn reruns_are_bit_identical_and_processes_share_sessions() {
    let (_d, p) = policy(false, 6);
    let reqs = requests(deltarl_data::vocab_size() as u32, 3);
    let mut s = settings(1.0, 12, 4);
    s.eos_ids = vec![deltarl_data::EOS_ID, 7];
    s.session_rows = Some(5);
    let once = generate(&p.model, &p.tokenizer, &reqs, &s, &mut |_, _| {}).unwrap();
    let twice = generate(&p.model, &p.tokenizer, &reqs, &s, &mut |_, _| {}).unwrap();
    assert_eq!(once, twice);
    // Two processes, each its sessions (0, 2, 4 and 1, 3): together the bits of one.
    let mut merged: Vec<Vec<(usize, Sample)>> = vec![Vec::new(); reqs.len()];
    for rank in 0..2 {
        let part = generate_part(
            &p.model,
            &p.tokenizer,
            &reqs,
            &s,
            Shard { rank, world: 2 },
            &mut |_, _| {},
        )
        .unwrap();
        assert!(
            part.iter().any(|g| !g.is_empty()),
            "rank {rank} had no work"
        );
        for (m, g) in merged.iter_mut().zip(part) {
            m.extend(g);
        }
    }
    for (m, want) in merged.iter_mut().zip(&once) {
        m.sort_by_key(|(k, _)| *k);
        let got: Vec<Sample> = m.iter().map(|(_, x)| x.clone()).collect();
        assert_eq!(&got, want);
    }
}
