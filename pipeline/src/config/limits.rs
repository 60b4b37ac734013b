//! Every check of one configuration's values, in one place: each size between its least
//! and its greatest value (so that a typo like `prompts_per_iter = 1000000000` is refused
//! by name at load instead of aborting an allocation, and leaving a lock and a temporary
//! file behind, later), the ranges of the floats, and the rules between keys.

use anyhow::{bail, Result};

use super::options::Options;

/// Responses an iteration may sample (prompts x samples): far beyond any real batch.
const MAX_RESPONSES: u64 = 1 << 24;

/// `value` in `[min, max]`; a minimum of 1 reads "must be positive".
fn in_range(key: &str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min {
        match min {
            1 => bail!("config key `{key}` = {value}: must be positive"),
            _ => bail!("config key `{key}` = {value}: must be at least {min}"),
        }
    }
    if value > max {
        bail!("config key `{key}` = {value}: must be at most {max}");
    }
    Ok(())
}

fn require(ok: bool, key: &str, value: impl std::fmt::Display, rule: &str) -> Result<()> {
    if !ok {
        bail!("config key `{key}` = {value}: {rule}");
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
    if value.is_nan() || value < 0.0 {
        bail!("config key `{key}` = {value}: must be >= 0");
    }
    Ok(())
}

/// Checks every value of `o`; `eps_high` is the one resolved from the algorithm.
pub(super) fn check(o: &Options, eps_high: f64) -> Result<()> {
    o.score.code.settings().map_err(anyhow::Error::msg)?;
    let u = |x: usize| x as u64;
    let (r, t, w, up) = (&o.rollout, &o.model.tiny, &o.warmstart, &o.update);
    // (key, value, least, greatest)
    let sizes: [(&str, u64, u64, u64); 28] = [
        ("data.train_size", u(o.data.train_size), 0, 1 << 26),
        (
            "rollout.prompts_per_iter",
            u(r.prompts_per_iter),
            1,
            1 << 20,
        ),
        (
            "rollout.samples_per_prompt",
            u64::from(r.samples_per_prompt),
            1,
            1 << 12,
        ),
        ("rollout.max_new_tokens", u(r.max_new_tokens), 1, 1 << 20),
        ("rollout.top_k", u(r.top_k), 0, 1 << 24),
        ("rollout.max_batch_rows", u(r.max_batch_rows), 1, 1 << 20),
        (
            "rollout.max_prompt_tokens",
            u(r.max_prompt_tokens),
            0,
            1 << 20,
        ),
        ("rollout.kv_cache_tokens", u(r.kv_cache_tokens), 0, 1 << 40),
        ("rollout.session_rows", u(r.session_rows), 0, 1 << 30),
        (
            "score.overlong_buffer",
            u(o.score.overlong_buffer),
            0,
            1 << 20,
        ),
        (
            "features.project_dim",
            u(o.features.project_dim),
            0,
            1 << 20,
        ),
        ("features.chunk_rows", u(o.features.chunk_rows), 1, 1 << 20),
        (
            "features.chunk_tokens",
            u(o.features.chunk_tokens),
            0,
            1 << 30,
        ),
        ("update.optimizer_steps", u(up.optimizer_steps), 1, 1 << 20),
        (
            "update.micro_batch_rows",
            u(up.micro_batch_rows),
            1,
            1 << 20,
        ),
        (
            "update.micro_batch_tokens",
            u(up.micro_batch_tokens),
            0,
            1 << 30,
        ),
        ("update.warmup_steps", up.warmup_steps, 0, 1 << 40),
        ("warmstart.steps", u(w.steps), 0, 1 << 30),
        ("warmstart.batch_size", u(w.batch_size), 1, 1 << 20),
        ("warmstart.warmup_steps", u(w.warmup_steps), 0, 1 << 30),
        ("model.threads", u(o.model.threads), 0, 1 << 12),
        ("model.tiny.hidden_size", u(t.hidden_size), 1, 1 << 16),
        (
            "model.tiny.intermediate_size",
            u(t.intermediate_size),
            1,
            1 << 18,
        ),
        (
            "model.tiny.num_hidden_layers",
            u(t.num_hidden_layers),
            1,
            1 << 10,
        ),
        (
            "model.tiny.max_position_embeddings",
            u(t.max_position_embeddings),
            1,
            1 << 20,
        ),
        ("eval.problems", u(o.eval.problems), 0, 1 << 24),
        ("checkpoint.shard_mb", o.checkpoint.shard_mb, 1, 1 << 30),
        ("eval.samples", u64::from(o.eval.samples), 1, 1 << 12),
    ];
    for (key, value, min, max) in sizes {
        in_range(key, value, min, max)?;
    }
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
    at_least_zero("coeffs.oracle_value", o.coeffs.oracle_value)?;
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
    let builtin = deltarl_data::Builtin::from_source(&o.data.source);
    if o.model.source == "tiny" && builtin == Some(deltarl_data::Builtin::Words) {
        bail!(
            "config key `data.source` = {:?}: the tiny model (model.source = \"tiny\") reads \
             only its own tasks' characters (tiny-*); word problems need a pretrained model \
             folder as model.source (e.g. the one `make smollm2` converts)",
            o.data.source
        );
    }
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
        let heldout = builtin.map(deltarl_data::Builtin::heldout_name);
        if name.is_empty() || names.contains(&name) || Some(&name) == heldout.as_ref() {
            bail!(
                "config key `eval.benchmarks`: {b:?} names benchmark {name:?}, which is empty \
                 or taken (each file's name without extension names its benchmark)"
            );
        }
        names.push(name);
    }
    let r = &o.rollout;
    require(
        r.temperature >= 0.0 && r.temperature.is_finite(),
        "rollout.temperature",
        r.temperature,
        "must be >= 0",
    )?;
    require(
        r.top_p > 0.0 && r.top_p <= 1.0,
        "rollout.top_p",
        r.top_p,
        "must be in (0, 1]",
    )?;
    // One response must fit the cache budget: its prompt (at most max_prompt_tokens
    // when that is set, at least one token) and max_new_tokens.
    let one_row = r.max_prompt_tokens.max(1) + r.max_new_tokens;
    require(
        r.kv_cache_tokens == 0 || r.kv_cache_tokens >= one_row,
        "rollout.kv_cache_tokens",
        r.kv_cache_tokens,
        &format!(
            "must be 0 (no limit) or hold one response: max(max_prompt_tokens, 1) + max_new_tokens = {one_row}"
        ),
    )?;
    let u = &o.update;
    // vLLM's log-probs come from another engine: the ratio uses the trainer's.
    require(
        r.engine == super::options::Engine::Native
            || u.old_logprobs == deltarl_update::OldLogprobs::Recompute,
        "update.old_logprobs",
        "rollout",
        "must be recompute with rollout.engine = vllm (the sampler's numbers are never the old policy)",
    )?;
    require(
        (0.0..1.0).contains(&u.eps_low),
        "update.eps_low",
        u.eps_low,
        "must be in [0, 1)",
    )?;
    require(eps_high >= 0.0, "update.eps_high", eps_high, "must be >= 0")?;
    require(
        u.dual_clip == 0.0 || u.dual_clip > 1.0,
        "update.dual_clip",
        u.dual_clip,
        "must be 0 (off) or > 1",
    )?;
    require(
        u.grad_clip >= 0.0,
        "update.grad_clip",
        u.grad_clip,
        "must be >= 0",
    )?;
    let s = &o.score;
    require(
        s.overlong_buffer < r.max_new_tokens,
        "score.overlong_buffer",
        s.overlong_buffer,
        "must be smaller than rollout.max_new_tokens",
    )?;
    require(
        o.data.template.contains("{question}"),
        "data.template",
        format!("{:?}", o.data.template),
        "must contain {question}",
    )?;
    let w = &o.warmstart;
    require(
        (0.0..=1.0).contains(&w.wrong_frac),
        "warmstart.wrong_frac",
        w.wrong_frac,
        "must be in [0, 1]",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests;
