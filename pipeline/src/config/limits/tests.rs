//! The tests of the value checks: refusals by key, bounds, and what 0 means.
#![allow(clippy::unwrap_used)]
use super::*;

fn default() -> Options {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/tiny-arith.toml");
    Options::load(&path).unwrap()
}

fn refused(edit: impl FnOnce(&mut Options)) -> String {
    let mut o = default();
    edit(&mut o);
    format!("{:#}", check(&o).unwrap_err())
}

#[test]
fn sizes_of_zero_are_refused_by_name_where_a_size_must_be_positive() {
    for (key, edit) in [
        (
            "model.tiny.hidden_size",
            (|o: &mut Options| o.model.tiny.hidden_size = 0) as fn(&mut Options),
        ),
        ("model.tiny.num_hidden_layers", |o| {
            o.model.tiny.num_hidden_layers = 0
        }),
        ("rollout.prompts_per_iter", |o| {
            o.rollout.prompts_per_iter = 0
        }),
        ("checkpoint.shard_mb", |o| o.checkpoint.shard_mb = 0),
        ("eval.samples", |o| o.eval.samples = 0),
    ] {
        let e = refused(edit);
        assert!(
            e.contains(&format!("`{key}` = 0: must be 1 to ")),
            "{key}: {e}"
        );
    }
    // Where 0 means off, it is accepted.
    let mut o = default();
    o.rollout.top_k = 0;
    o.rollout.kv_cache_tokens = 0;
    assert!(check(&o).is_ok());
}

#[test]
fn huge_sizes_are_refused_by_name() {
    assert!(check(&default()).is_ok());
    let e = refused(|o| o.rollout.prompts_per_iter = 1_000_000_000);
    assert!(
        e.contains("rollout.prompts_per_iter") && e.contains("at most"),
        "{e}"
    );
    let e = refused(|o| o.rollout.prompts_per_iter = usize::MAX);
    assert!(e.contains("rollout.prompts_per_iter"), "{e}");
    let e = refused(|o| o.rollout.samples_per_prompt = 4_000_000_000);
    assert!(e.contains("rollout.samples_per_prompt"), "{e}");
    let e = refused(|o| {
        o.rollout.prompts_per_iter = 1 << 20;
        o.rollout.samples_per_prompt = 1 << 12;
    });
    assert!(e.contains("responses an iteration"), "{e}");
    let e = refused(|o| o.model.tiny.num_key_value_heads = 3);
    assert!(e.contains("num_key_value_heads"), "{e}");
}

#[test]
fn in_loop_eval_needs_the_built_in_task() {
    let e = refused(|o| o.data.source = deltarl_data::Source::parse("prompts.jsonl"));
    assert!(e.contains("eval.every") && e.contains("--bench"), "{e}");
    let mut o = default();
    o.data.source = deltarl_data::Source::parse("prompts.jsonl");
    o.eval.every = 0;
    assert!(check(&o).is_ok());
    // With benchmark files the loop can evaluate a file dataset.
    o.eval.every = 2;
    o.eval.benchmarks = vec!["a/aime24.jsonl".into(), "b/math500.parquet".into()];
    assert!(check(&o).is_ok());
    o.eval.benchmarks.push("c/aime24.parquet".into());
    let e = check(&o).unwrap_err().to_string();
    assert!(e.contains("eval.benchmarks") && e.contains("aime24"), "{e}");
}

#[test]
fn negative_coefficients_are_refused() {
    let e = refused(|o| o.update.entropy_coef = -0.1);
    assert!(e.contains("update.entropy_coef"), "{e}");
    let e = refused(|o| o.score.overlong_factor = -1.0);
    assert!(e.contains("score.overlong_factor"), "{e}");
    let e = refused(|o| o.coeffs.oracle_value = f64::NAN);
    assert!(e.contains("coeffs.oracle_value"), "{e}");
}

#[test]
fn absurd_learning_rates_decay_and_fractions_are_refused_by_key() {
    type Edit = fn(&mut Options);
    let cases: [(&str, Edit, &str); 7] = [
        ("update.lr", |o| o.update.lr = 1e308, "[1e-12, 1]"),
        ("update.lr", |o| o.update.lr = 0.0, "[1e-12, 1]"),
        ("warmstart.lr", |o| o.warmstart.lr = 2.0, "[1e-12, 1]"),
        (
            "update.weight_decay",
            |o| o.update.weight_decay = 1e308,
            "[0, 1]",
        ),
        (
            "update.weight_decay",
            |o| o.update.weight_decay = -0.1,
            "[0, 1]",
        ),
        // Refused even when the estimator is not top-entropy (tiny-arith runs DelTA).
        (
            "coeffs.top_entropy_keep",
            |o| o.coeffs.top_entropy_keep = 1e308,
            "[1e-6, 1]",
        ),
        (
            "coeffs.top_entropy_keep",
            |o| o.coeffs.top_entropy_keep = 0.0,
            "[1e-6, 1]",
        ),
    ];
    for (key, edit, rule) in cases {
        let err = refused(edit);
        assert!(
            err.contains(&format!("`{key}`")) && err.contains(rule),
            "{key}: {err}"
        );
    }
    let mut o = default();
    (o.update.lr, o.warmstart.lr) = (1.0, 1.0);
    (o.update.weight_decay, o.coeffs.top_entropy_keep) = (1.0, 1.0);
    check(&o).unwrap();
}

#[test]
fn the_shared_prompt_layout_is_refused_with_checkpointing_by_both_keys() {
    let e = refused(|o| {
        o.model.layout = deltarl_teacher::Layout::SharedPrompt;
        o.update.activation_checkpointing = true;
    });
    assert!(
        e.contains("`model.layout` = \"shared-prompt\"")
            && e.contains("update.activation_checkpointing = false"),
        "{e}"
    );
    let mut o = default();
    o.model.layout = deltarl_teacher::Layout::SharedPrompt;
    o.update.activation_checkpointing = false;
    check(&o).unwrap();
}
