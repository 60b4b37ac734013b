//! What `deltarl plan` is computed from: the model's shape (its config.json, or a known
//! model's published shape) and the workload a configuration puts on one device and on
//! the host.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_model::Qwen3Config;

use crate::config::Resolved;
use crate::host_plan::HostWorkload;
use crate::plan::{Shape, Workload};

/// The host side of the configuration's workload (all responses of an iteration: the
/// files are one process's whatever the device count).
pub(super) fn host_workload(
    cfg: &Resolved,
    shape: &Shape,
    w: &Workload,
    devices: u64,
) -> HostWorkload {
    let o = &cfg.opts;
    let k = match o.features.project_dim as u64 {
        0 => shape.hidden,
        k => k.min(shape.hidden),
    };
    HostWorkload {
        dtype: w.dtype,
        parameters: shape.parameters(),
        vector_dim: k,
        stored_dim: match o.features.persist {
            deltarl_schemas::Persist::Full => k,
            deltarl_schemas::Persist::Projected => (o.features.persist_dim as u64).min(k),
            deltarl_schemas::Persist::None => 0,
        },
        responses: o.rollout.prompts_per_iter as u64 * u64::from(o.rollout.samples_per_prompt),
        prompt_tokens: w.prompt_tokens,
        response_tokens: w.response_tokens,
        features_rows: w.features_rows,
        ranks: devices,
        coeffs_passes: cfg.coeffs.estimator.vector_passes(true) as u64,
        keep_last: o.checkpoint.keep_last,
        save_every: o.checkpoint.save_every,
        keep_features: o.checkpoint.keep_features,
    }
}

/// The model's shape: from `--model` (a published shape), `--model-config`, the tiny
/// model, model.source's config.json, or the published shape model.source's name names.
pub(super) fn model_shape(
    cfg: &Resolved,
    explicit: Option<&Path>,
    name: Option<&str>,
) -> Result<Shape> {
    let known = || crate::plan_models::names().join(", ");
    if let Some(name) = name {
        return crate::plan_models::shape(name).with_context(|| {
            format!(
                "--model {name:?}: not a model whose shape deltarl knows ({})",
                known()
            )
        });
    }
    if let Some(path) = explicit {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let c: Qwen3Config = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a Qwen3 config.json", path.display()))?;
        return Ok(Shape::new(&c));
    }
    let source = &cfg.opts.model.source;
    if source == "tiny" {
        return Ok(Shape::new(&deltarl_warmstart::tiny_config(
            &cfg.opts.model.tiny,
            cfg.stages.warmstart.task,
        )?));
    }
    let dir = cfg.opts.model.folder();
    if dir.join("config.json").exists() {
        return Ok(Shape::new(&deltarl_model::read_config(&dir)?));
    }
    if let Some(shape) = crate::plan_models::shape(source) {
        eprintln!("note: {source} has no config.json here; planning with its published shape");
        return Ok(shape);
    }
    bail!(
        "model.source = {source:?} has no config.json here: pass --model-config with the \
         model's config.json, or --model with one of {}",
        known()
    )
}

/// A model shape every size of which is one a model can have (a config.json of zeros, or
/// of 2^64 - 1, plans nothing real).
pub(super) fn check_shape(s: &Shape) -> Result<()> {
    let sizes = [
        ("vocab_size", s.vocab, 1 << 24),
        ("hidden_size", s.hidden, 1 << 20),
        ("intermediate_size", s.intermediate, 1 << 22),
        ("num_hidden_layers", s.layers, 1 << 12),
        ("num_attention_heads", s.heads, 1 << 12),
        ("num_key_value_heads", s.kv_heads, 1 << 12),
        ("head_dim", s.head_dim, 1 << 14),
    ];
    for (key, value, max) in sizes {
        if value == 0 || value > max {
            bail!("the model's `{key}` is {value}: expected 1 to {max}");
        }
    }
    if !s.heads.is_multiple_of(s.kv_heads) {
        bail!(
            "the model's num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
            s.heads,
            s.kv_heads
        );
    }
    Ok(())
}

/// The per-device workload the configuration asks for.
pub(super) fn workload(
    cfg: &Resolved,
    devices: u64,
    prompt_tokens: Option<u64>,
) -> Result<Workload> {
    let (o, r, u) = (&cfg.opts, &cfg.opts.rollout, &cfg.opts.update);
    let prompt = match prompt_tokens {
        Some(n) => n,
        None if r.max_prompt_tokens > 0 => r.max_prompt_tokens as u64,
        None => bail!(
            "rollout.max_prompt_tokens is 0 (no limit): pass --prompt-tokens with the \
             longest prompt"
        ),
    };
    let response = r.max_new_tokens as u64;
    let seq = prompt + response;
    let rows = (r.prompts_per_iter as u64 * u64::from(r.samples_per_prompt)).div_ceil(devices);
    let mini_batch = rows.div_ceil(u.optimizer_steps as u64).max(1);
    // Rows of one pass: the row cap, the token budget over padded rows (at least one row),
    // and the rows there are.
    let pass = |max_rows: usize, max_tokens: usize, available: u64| {
        let by_tokens = if max_tokens > 0 {
            (max_tokens as u64 / seq).max(1)
        } else {
            u64::MAX
        };
        (max_rows as u64).min(by_tokens).min(available).max(1)
    };
    // A session holds at most `session_rows` samples, and never more slots than samples.
    let rows_decoded = match r.session_rows {
        0 => rows,
        n => rows.min(n as u64),
    };
    let decode_rows = if r.kv_cache_tokens > 0 {
        (r.max_batch_rows as u64)
            .min(r.kv_cache_tokens as u64 / seq)
            .min(rows_decoded)
    } else {
        (r.max_batch_rows as u64).min(rows_decoded)
    };
    Ok(Workload {
        dtype: o.model.dtype,
        prompt_tokens: prompt,
        response_tokens: response,
        update_rows: pass(u.micro_batch_rows, u.micro_batch_tokens, mini_batch),
        features_rows: pass(o.features.chunk_rows, o.features.chunk_tokens, rows),
        activation_checkpointing: u.activation_checkpointing,
        entropy_grad: u.entropy_coef != 0.0,
        kv_cache_tokens: decode_rows * seq,
        decode_rows,
        head_chunk_bytes: o.model.head_chunk_bytes(),
    })
}
