//! Bounds on every size and on the floats the main validation does not cover, so that a
//! typo like `prompts_per_iter = 1000000000` is refused by name at load instead of
//! aborting an allocation (and leaving a lock and a temporary file behind) later.

use anyhow::{bail, Result};

use super::options::Options;

/// Responses an iteration may sample (prompts x samples): far beyond any real batch.
const MAX_RESPONSES: u64 = 1 << 24;

fn at_most(key: &str, value: u64, max: u64) -> Result<()> {
    if value > max {
        bail!("config key `{key}` = {value}: must be at most {max}");
    }
    Ok(())
}

/// `value` in (0, 1], or in [0, 1] with `zero_ok`.
fn unit(key: &str, value: f64, zero_ok: bool) -> Result<()> {
    let ok = if zero_ok {
        (0.0..=1.0).contains(&value)
    } else {
        value > 0.0 && value <= 1.0
    };
    if !ok {
        let range = if zero_ok { "[0, 1]" } else { "(0, 1]" };
        bail!("config key `{key}` = {value}: must be in {range}");
    }
    Ok(())
}

fn at_least_zero(key: &str, value: f64) -> Result<()> {
    if value < 0.0 {
        bail!("config key `{key}` = {value}: must be >= 0");
    }
    Ok(())
}

/// Checks every size against its limit and the remaining float ranges.
pub(super) fn check(o: &Options) -> Result<()> {
    o.score.code.settings().map_err(anyhow::Error::msg)?;
    let u = |x: usize| x as u64;
    let (r, t, w, up) = (&o.rollout, &o.model.tiny, &o.warmstart, &o.update);
    let sizes: [(&str, u64, u64); 25] = [
        ("data.train_size", u(o.data.train_size), 1 << 26),
        ("rollout.prompts_per_iter", u(r.prompts_per_iter), 1 << 20),
        (
            "rollout.samples_per_prompt",
            u64::from(r.samples_per_prompt),
            1 << 12,
        ),
        ("rollout.max_new_tokens", u(r.max_new_tokens), 1 << 20),
        ("rollout.top_k", u(r.top_k), 1 << 24),
        ("rollout.max_batch_rows", u(r.max_batch_rows), 1 << 20),
        ("rollout.max_prompt_tokens", u(r.max_prompt_tokens), 1 << 20),
        ("rollout.kv_cache_tokens", u(r.kv_cache_tokens), 1 << 40),
        ("score.overlong_buffer", u(o.score.overlong_buffer), 1 << 20),
        ("features.project_dim", u(o.features.project_dim), 1 << 20),
        ("features.chunk_rows", u(o.features.chunk_rows), 1 << 20),
        ("features.chunk_tokens", u(o.features.chunk_tokens), 1 << 30),
        ("update.optimizer_steps", u(up.optimizer_steps), 1 << 20),
        ("update.micro_batch_rows", u(up.micro_batch_rows), 1 << 20),
        (
            "update.micro_batch_tokens",
            u(up.micro_batch_tokens),
            1 << 30,
        ),
        ("update.warmup_steps", up.warmup_steps, 1 << 40),
        ("warmstart.steps", u(w.steps), 1 << 30),
        ("warmstart.batch_size", u(w.batch_size), 1 << 20),
        ("warmstart.warmup_steps", u(w.warmup_steps), 1 << 30),
        ("model.threads", u(o.model.threads), 1 << 12),
        ("model.tiny.hidden_size", u(t.hidden_size), 1 << 16),
        (
            "model.tiny.intermediate_size",
            u(t.intermediate_size),
            1 << 18,
        ),
        (
            "model.tiny.num_hidden_layers",
            u(t.num_hidden_layers),
            1 << 10,
        ),
        (
            "model.tiny.max_position_embeddings",
            u(t.max_position_embeddings),
            1 << 20,
        ),
        ("eval.problems", u(o.eval.problems), 1 << 24),
    ];
    for (key, value, max) in sizes {
        at_most(key, value, max)?;
    }
    at_most("eval.samples", u64::from(o.eval.samples), 1 << 12)?;
    let responses = u(r.prompts_per_iter) * u64::from(r.samples_per_prompt);
    if responses > MAX_RESPONSES {
        bail!(
            "config keys `rollout.prompts_per_iter` x `rollout.samples_per_prompt` = \
             {responses} responses an iteration: must be at most {MAX_RESPONSES}"
        );
    }
    if t.num_attention_heads == 0
        || t.num_key_value_heads == 0
        || t.hidden_size % t.num_attention_heads != 0
        || t.num_attention_heads % t.num_key_value_heads != 0
    {
        bail!(
            "config keys `model.tiny.hidden_size` = {}, `num_attention_heads` = {}, \
             `num_key_value_heads` = {}: heads must divide the width, kv heads the heads",
            t.hidden_size,
            t.num_attention_heads,
            t.num_key_value_heads
        );
    }
    at_least_zero("update.kl_coef", up.kl_coef)?;
    at_least_zero("update.entropy_coef", up.entropy_coef)?;
    at_least_zero("score.overlong_factor", o.score.overlong_factor)?;
    at_least_zero("eval.temperature", o.eval.temperature)?;
    at_least_zero("update.tis_cap", up.tis_cap)?;
    if up.tis_cap > 0.0 && up.old_logprobs == deltarl_update::OldLogprobs::Rollout {
        bail!(
            "config key `update.tis_cap` = {}: needs update.old_logprobs = \"recompute\" \
             (with the sampler's own log-probs there is no mismatch to correct)",
            up.tis_cap
        );
    }
    // A learning rate above 1 has no use in fine-tuning and only makes the weights
    // non-finite after the first step, once the iteration's work is spent.
    unit("update.lr", up.lr, false)?;
    unit("warmstart.lr", w.lr, false)?;
    // Decoupled decay shrinks the weights by lr * weight_decay a step: above 1 it is a
    // typo, not a setting (AdamW's default is 0.01, DAPO's 0.1).
    unit("update.weight_decay", up.weight_decay, true)?;
    // A fraction, checked whatever the estimator so a typo is never carried silently.
    unit("coeffs.top_entropy_keep", o.coeffs.top_entropy_keep, false)?;
    unit("eval.top_p", o.eval.top_p, false)?;
    if !(w.digit_weight > 0.0 && w.digit_weight.is_finite()) {
        bail!(
            "config key `warmstart.digit_weight` = {}: must be a positive number",
            w.digit_weight
        );
    }
    // In-loop evaluation samples the built-in task's held-out split or benchmark files; a
    // file dataset has no held-out split, so without benchmarks a run could never get past
    // its first evaluation.
    let builtin = deltarl_data::Task::from_source(&o.data.source);
    if builtin.is_none() && o.eval.every > 0 && o.eval.benchmarks.is_empty() {
        bail!(
            "config key `eval.every` = {}: in-loop evaluation needs benchmark files \
             (`eval.benchmarks`) or a built-in data.source (the datasets with a held-out \
             split); or set it to 0 and evaluate with `deltarl eval --bench FILE`",
            o.eval.every
        );
    }
    let mut names: Vec<String> = Vec::new();
    for b in &o.eval.benchmarks {
        let name = crate::data::benchmark_name(std::path::Path::new(b));
        let heldout = builtin.map(deltarl_data::Task::heldout_name);
        if name.is_empty() || names.contains(&name) || Some(&name) == heldout.as_ref() {
            bail!(
                "config key `eval.benchmarks`: {b:?} names benchmark {name:?}, which is empty \
                 or taken (each file's name without extension names its benchmark)"
            );
        }
        names.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn default() -> Options {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/tiny-arith.toml");
        Options::load(&path).unwrap()
    }

    fn refused(edit: impl FnOnce(&mut Options)) -> String {
        let mut o = default();
        edit(&mut o);
        format!("{:#}", check(&o).unwrap_err())
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
        let e = refused(|o| o.data.source = "prompts.jsonl".into());
        assert!(e.contains("eval.every") && e.contains("--bench"), "{e}");
        let mut o = default();
        o.data.source = "prompts.jsonl".into();
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
    }

    #[test]
    fn absurd_learning_rates_decay_and_fractions_are_refused_by_key() {
        let base =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/tiny-arith.toml");
        for (set, rule) in [
            ("update.lr=1e308", "(0, 1]"),
            ("update.lr=0", "(0, 1]"),
            ("warmstart.lr=2", "(0, 1]"),
            ("update.weight_decay=1e308", "[0, 1]"),
            ("update.weight_decay=-0.1", "[0, 1]"),
            // Refused even when the estimator is not top-entropy (tiny-arith runs DelTA).
            ("coeffs.top_entropy_keep=1e308", "(0, 1]"),
            ("coeffs.top_entropy_keep=0", "(0, 1]"),
        ] {
            let err = format!(
                "{:#}",
                crate::config::Resolved::load_with(&base, &[set.into()]).unwrap_err()
            );
            let key = set.split('=').next().unwrap();
            assert!(
                err.contains(&format!("`{key}`")) && err.contains(rule),
                "{set}: {err}"
            );
        }
        for ok in [
            "update.lr=1",
            "warmstart.lr=1",
            "update.weight_decay=1",
            "coeffs.top_entropy_keep=1",
        ] {
            crate::config::Resolved::load_with(&base, &[ok.into()]).unwrap();
        }
    }
}
