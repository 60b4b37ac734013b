//! Every check of one configuration's values: each size between its least and its
//! greatest value (so that a typo like `prompts_per_iter = 1000000000` is refused by name
//! at load instead of aborting an allocation, and leaving a lock and a temporary file
//! behind, later), the ranges of the floats (`ranges.rs`), then each table's rules, one
//! function a table.

use anyhow::{bail, Result};

use super::options::Options;

/// Responses an iteration may sample (prompts x samples): far beyond any real batch.
const MAX_RESPONSES: u64 = 1 << 24;

fn require(ok: bool, key: &str, value: impl std::fmt::Display, rule: &str) -> Result<()> {
    if !ok {
        bail!("config key `{key}` = {value}: {rule}");
    }
    Ok(())
}

/// This machine's memory in MiB (`MemTotal` of /proc/meminfo), where it can be read.
fn machine_mib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// Checks every value of `o`: each numeric key against its range (`ranges.rs`), then each
/// table's rules, including those between its keys and other tables'.
pub(super) fn check(o: &Options) -> Result<()> {
    super::ranges::check(o)?;
    code(&o.score.code)?;
    coeffs(o)?;
    model(o)?;
    rollout(o)?;
    update(o)?;
    score(o)?;
    data(o)?;
    eval(o)
}

/// `[score.code]`: the sandbox's limits.
fn code(c: &super::options::CodeOptions) -> Result<()> {
    c.settings().map_err(anyhow::Error::msg)?;
    // A sandbox limit above the machine's memory never binds: a program allocating all of
    // it would be graded by the timer (or the kernel's OOM killer) instead.
    if let Some(mib) = machine_mib() {
        require(
            c.memory_mb <= mib,
            "score.code.memory_mb",
            c.memory_mb,
            &format!("must be at most this machine's memory, {mib} MiB, or the limit never binds"),
        )?;
    }
    Ok(())
}

/// `[coeffs]`: the λ range, KTAE's weights.
fn coeffs(o: &Options) -> Result<()> {
    let c = &o.coeffs;
    require(
        c.lam_min <= c.lam_max,
        "coeffs.lam_min",
        super::ranges::show(c.lam_min),
        &format!(
            "must be at most coeffs.lam_max = {}",
            super::ranges::show(c.lam_max)
        ),
    )?;
    let k = &c.ktae;
    require(
        k.alpha + k.beta_ig > 0.0,
        "coeffs.ktae.beta_ig",
        super::ranges::show(k.beta_ig),
        "coeffs.ktae.alpha and beta_ig weigh the two tests in a token's score and divide \
         it by their sum: they cannot both be 0",
    )
}

/// `[model]`: the tiny model's heads, and the data it can read.
fn model(o: &Options) -> Result<()> {
    let t = &o.model.tiny;
    if t.num_attention_heads == 0
        || t.num_key_value_heads == 0
        || !t.hidden_size.is_multiple_of(t.num_attention_heads)
        || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads)
    {
        bail!(
            "config keys `model.tiny.hidden_size` = {}, `num_attention_heads` = {}, \
             `num_key_value_heads` = {}: heads must divide the width, kv heads the heads",
            t.hidden_size,
            t.num_attention_heads,
            t.num_key_value_heads
        );
    }
    if o.model.source == "tiny" && o.data.source.builtin() == Some(deltarl_data::Builtin::Words) {
        bail!(
            "config key `data.source` = \"{}\": the tiny model (model.source = \"tiny\") reads \
             only its own tasks' characters (tiny-*); word problems need a pretrained model \
             folder as model.source (e.g. the one `make smollm2` converts)",
            o.data.source
        );
    }
    Ok(())
}

/// `[rollout]`: the batch's size, the cache budget.
fn rollout(o: &Options) -> Result<()> {
    let r = &o.rollout;
    let responses = r.prompts_per_iter as u64 * u64::from(r.samples_per_prompt);
    if responses > MAX_RESPONSES {
        bail!(
            "config keys `rollout.prompts_per_iter` x `rollout.samples_per_prompt` = \
             {responses} responses an iteration: must be at most {MAX_RESPONSES}"
        );
    }
    // The empty string is in every text: each response would stop at its first token.
    if let Some(i) = r.stop.iter().position(String::is_empty) {
        bail!(
            "config key `rollout.stop` entry {}: the empty string, which every response \
             contains, so each would end at its first token",
            i + 1
        );
    }
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
    )
}

/// `[update]`: which old log-probs the ratio uses; what is sharded; the layout the
/// checkpointed pass runs on.
fn update(o: &Options) -> Result<()> {
    let u = &o.update;
    if u.activation_checkpointing && o.model.layout == deltarl_teacher::Layout::SharedPrompt {
        bail!(
            "config key `model.layout` = \"shared-prompt\": needs update.activation_checkpointing \
             = false (the checkpointed pass recomputes a padded batch's layers)"
        );
    }
    if u.tis_cap > 0.0 && u.old_logprobs == deltarl_update::OldLogprobs::Rollout {
        bail!(
            "config key `update.tis_cap` = {}: needs update.old_logprobs = \"recompute\" \
             (with the sampler's own log-probs there is no mismatch to correct)",
            u.tis_cap
        );
    }
    if u.shard_gradients && !u.shard_optimizer {
        bail!(
            "config key `update.shard_gradients` = true: needs update.shard_optimizer = true \
             (ZeRO-2 keeps each gradient sum with the parameter's optimizer state, on its owner)"
        );
    }
    // vLLM's log-probs come from another engine: the ratio uses the trainer's.
    require(
        o.rollout.engine.is_native() || u.old_logprobs == deltarl_update::OldLogprobs::Recompute,
        "update.old_logprobs",
        "rollout",
        "must be recompute with rollout.engine = vllm (the sampler's numbers are never the old policy)",
    )
}

/// `[score]`: the overlong penalty's buffer within the length limit.
fn score(o: &Options) -> Result<()> {
    require(
        o.score.overlong_buffer < o.rollout.max_new_tokens,
        "score.overlong_buffer",
        o.score.overlong_buffer,
        "must be smaller than rollout.max_new_tokens",
    )
}

/// The placeholder a prompt template must hold: each problem goes there.
const QUESTION: &str = "{question}";

/// `[data]`: the template.
fn data(o: &Options) -> Result<()> {
    require(
        o.data.template.contains(QUESTION),
        "data.template",
        format!("{:?}", o.data.template),
        &format!("must contain {QUESTION}"),
    )
}

/// A prompt template given on the command line (`eval --template`), under `data.template`'s
/// rule: without the placeholder every problem would get the same prompt.
pub fn template_arg(text: &str) -> Result<String, String> {
    if text.contains(QUESTION) {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} must contain {QUESTION}"))
    }
}

/// `[eval]`: something to evaluate on, benchmarks with distinct names.
fn eval(o: &Options) -> Result<()> {
    // In-loop evaluation samples the built-in task's held-out split or benchmark files; a
    // file dataset has no held-out split, so without benchmarks a run could never get past
    // its first evaluation.
    let builtin = o.data.source.builtin();
    if builtin.is_none() && o.eval.every > 0 && o.eval.benchmarks.is_empty() {
        bail!(
            "config key `eval.every` = {}: in-loop evaluation needs benchmark files \
             (`eval.benchmarks`) or a built-in data.source (the datasets with a held-out \
             split); or set it to 0 and evaluate with `deltarl eval --bench FILE`",
            o.eval.every
        );
    }
    let heldout = builtin.map(deltarl_data::Builtin::heldout_name);
    let mut names: Vec<String> = Vec::new();
    for b in &o.eval.benchmarks {
        let name = crate::data::benchmark_name(std::path::Path::new(b));
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
mod tests;
