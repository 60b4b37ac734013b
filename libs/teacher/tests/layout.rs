//! The shared-prompt layout gives the padded layout's numbers up to f32 round-off: the
//! states, log-probs and entropies of every response token, and the gradient of a loss
//! built on the log-probs (the prompt's share summed over its rows). Prompts of several
//! lengths, a prompt whose rows are not all consecutive, an empty response, tied and
//! untied heads, grouped kv heads (4 query heads over 2).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_model::roundoff::F32_UNIT;
use deltarl_model::{random_policy, roundoff::logit_chain, Policy};
use deltarl_teacher::{packs, token_stats, Layout, TeacherForced};
use tch::{Device, Kind, Tensor};

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

/// Four groups: prompts of 7, 2, 3 and 7 tokens (the first and last equal but not
/// adjacent, so two groups) with 3, 3, 2 and 1 rows; one response empty. The first two
/// pack their uneven responses, the last two pad theirs ([`packs_and_pads`]).
fn rows() -> Vec<(Vec<u32>, Vec<u32>)> {
    let a: Vec<u32> = vec![5, 9, 14, 3, 22, 8, 17];
    let b: Vec<u32> = vec![11, 4];
    let c: Vec<u32> = vec![13, 2, 29];
    vec![
        (a.clone(), vec![7, 12, 9, 30]),
        (a.clone(), vec![21]),
        (a.clone(), vec![6, 6, 18, 2, 25, 13]),
        (b.clone(), vec![15, 3, 8]),
        (b.clone(), vec![]),
        (b, vec![27, 27, 10]),
        (c.clone(), vec![5, 9, 1]),
        (c, vec![24, 7, 3]),
        (a, vec![19, 4]),
    ]
}

/// Both ways of laying out a group are exercised: packed for the first two groups of
/// [`rows`], padded for the last two.
#[test]
fn packs_and_pads() {
    let (_d, p) = policy(true, 1);
    let c = &p.model.config;
    assert!(packs(c, 7, &[4, 1, 6]));
    assert!(packs(c, 2, &[3, 0, 3]));
    assert!(!packs(c, 3, &[3, 3]));
    assert!(!packs(c, 7, &[2]));
}

fn pairs(rows: &[(Vec<u32>, Vec<u32>)]) -> Vec<(&[u32], &[u32])> {
    rows.iter()
        .map(|(p, r)| (p.as_slice(), r.as_slice()))
        .collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (values(a), values(b));
    assert_eq!(a.len(), b.len(), "tensors of other sizes");
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The longest row, prompt + response: the attention's inner dimension.
fn positions(rows: &[(Vec<u32>, Vec<u32>)]) -> usize {
    rows.iter().map(|(p, r)| p.len() + r.len()).max().unwrap()
}

#[test]
fn shared_prompt_states_log_probs_and_entropies_equal_the_padded_ones() {
    let rows = rows();
    for (tied, seed) in [(true, 3), (false, 4)] {
        let (_d, p) = policy(tied, seed);
        let m = &p.model;
        let stats = |layout| {
            tch::no_grad(|| token_stats(m, &pairs(&rows), layout, 1.0, usize::MAX, Device::Cpu))
        };
        let (pad, shared) = (stats(Layout::Padded), stats(Layout::SharedPrompt));
        assert_eq!(pad.lengths, vec![4, 1, 6, 3, 0, 3, 3, 3, 2]);
        assert_eq!(pad.lengths, shared.lengths);
        let n = positions(&rows);
        // Bounds of `deltarl_model::roundoff`: the states relative to their largest entry,
        // the log-probs twice the logits'. The entropy -Σ p log p moves by at most
        // Σ_v |dH/dz_v| = Σ_v p_v |log p_v + H| <= 2H <= 2 ln V times the largest logit
        // change.
        let h_max = pad.hidden.abs().max().double_value(&[]);
        let dh = max_diff(&pad.hidden, &shared.hidden);
        assert!(dh <= m.f32_hidden_tolerance(n) * h_max, "states: {dh:e}");
        let dlp = max_diff(&pad.logprob, &shared.logprob);
        assert!(dlp <= m.f32_logprob_tolerance(n), "log-probs: {dlp:e}");
        let ln_v = (m.config.vocab_size as f64).ln();
        let dent = max_diff(&pad.entropy, &shared.entropy);
        assert!(
            dent <= 2.0 * ln_v * m.f32_logit_tolerance(n),
            "entropies: {dent:e}"
        );
        // Not vacuous: the rows' numbers differ from each other far beyond the bounds.
        assert!(values(&pad.logprob).iter().any(|&x| x < -1.0));
    }
}

/// Each parameter's gradient of `sum_t w_t log p_t` in `layout`, in name order.
fn gradients(p: &Policy, rows: &[(Vec<u32>, Vec<u32>)], layout: Layout) -> Vec<(String, Tensor)> {
    let mut vars: Vec<(String, Tensor)> = p.vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, v) in &vars {
        let mut g = v.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    let tf = TeacherForced::new(&p.model, &pairs(rows), layout, Device::Cpu);
    let hidden = tf.hidden(&p.model);
    let st = tf.stats(&p.model, &hidden, 1.0, false, usize::MAX);
    let n = st.lengths.iter().sum::<usize>() as i64;
    // Weights of both signs, as advantages are.
    let w = (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.7).sin();
    (&st.logprob * &w).sum(Kind::Float).backward();
    vars.into_iter()
        .map(|(name, v)| (name, v.grad().copy()))
        .collect()
}

#[test]
fn shared_prompt_gradients_equal_the_padded_ones() {
    let rows = rows();
    for (tied, seed) in [(true, 5), (false, 6)] {
        let (_d, p) = policy(tied, seed);
        let pad = gradients(&p, &rows, Layout::Padded);
        let shared = gradients(&p, &rows, Layout::SharedPrompt);
        assert_eq!(pad.len(), shared.len());
        // A gradient entry is a sum over the response tokens (N of them) of products that
        // run the forward chain C of `roundoff::logit_chain` and back: to first order its
        // relative error is at most 2u(2C + N), with the margin 4 of `roundoff` for
        // second-order terms, measured here norm-wise against the tensor's gradient.
        let tokens = rows.iter().map(|(_, r)| r.len()).sum::<usize>();
        let chain = 2 * logit_chain(&p.model.config, positions(&rows)) + tokens;
        let tol = 4.0 * 2.0 * F32_UNIT * chain as f64;
        for ((name, a), (name_b, b)) in pad.iter().zip(&shared) {
            assert_eq!(name, name_b);
            let norm = a.norm().double_value(&[]);
            let diff = (a - b).norm().double_value(&[]);
            assert!(
                diff <= tol * norm,
                "{name}: |diff| {diff:e} against |grad| {norm:e} (tolerance {tol:e})"
            );
        }
        // The prompt's layers get a gradient at all (not vacuous).
        let q = pad
            .iter()
            .find(|(n, _)| n.ends_with("layers.0.self_attn.k_proj.weight"))
            .unwrap();
        assert!(q.1.norm().double_value(&[]) > 0.0);
    }
}
