//! The supervised warm start of the tiny model (`runs/<run>/base/`).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::json;

use deltarl_data as tiny;
use deltarl_model::{Qwen3Config, Tokenizer};
use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::{atomic_write_bytes, Manifest, TOOL_VERSION};

use crate::run::Ctx;

/// The Qwen3 config of the tiny model.
pub fn tiny_config(ctx: &Ctx) -> Qwen3Config {
    let t = &ctx.cfg.opts.model.tiny;
    let v = json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": tiny::vocab_size(),
        "hidden_size": t.hidden_size,
        "intermediate_size": t.intermediate_size,
        "num_hidden_layers": t.num_hidden_layers,
        "num_attention_heads": t.num_attention_heads,
        "num_key_value_heads": t.num_key_value_heads,
        "head_dim": t.hidden_size / t.num_attention_heads.max(1),
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": t.max_position_embeddings,
        "tie_word_embeddings": true,
        "attention_bias": false,
        "hidden_act": "silu",
        "bos_token_id": tiny::EOS_ID,
        "eos_token_id": tiny::EOS_ID,
        "pad_token_id": tiny::PAD_ID,
        "torch_dtype": "float32",
    });
    serde_json::from_value(v).unwrap_or_else(|_| unreachable!("static config"))
}

/// Creates the base policy when the run has none (tiny model only).
pub fn ensure_base(ctx: &Ctx) -> Result<()> {
    if ctx.cfg.opts.model.source != "tiny" {
        let dir = ctx.base_dir();
        if !dir.join("config.json").exists() {
            bail!("model.source {}: no config.json there", dir.display());
        }
        return Ok(());
    }
    if ctx.run.base().join("manifest.json").exists() {
        return Ok(());
    }
    warmstart(ctx)
}

/// Greedy and sampled accuracy on held-out problems.
pub fn held_out_accuracy(
    ctx: &Ctx,
    policy: &deltarl_model::Policy,
    n: usize,
    temperature: f64,
) -> Result<f64> {
    let prompts = crate::data::tiny_test_prompts(n);
    let mut s = ctx.eval_settings(0);
    s.samples = 1;
    s.temperature = temperature;
    let rows = crate::eval::evaluate(policy, "tiny-arith-test", &prompts, &s)?;
    Ok(rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64)
}

/// Trains the tiny model from scratch on worked solutions with a controlled fraction of
/// wrong steps, writing `base/` atomically (temporary folder, renamed when complete).
pub fn warmstart(ctx: &Ctx) -> Result<()> {
    let o = &ctx.cfg.opts;
    let w = &o.warmstart;
    let base = ctx.run.base();
    let tmp = ctx
        .run
        .root
        .join(format!(".base.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    atomic_write_bytes(
        &tmp.join("tokenizer.json"),
        tiny::tokenizer_json().as_bytes(),
    )?;
    atomic_write_bytes(
        &tmp.join("tokenizer_config.json"),
        tiny::tokenizer_config_json().as_bytes(),
    )?;
    let tokenizer = Tokenizer::from_file(&tmp.join("tokenizer.json"))?;
    let cfg = tiny_config(ctx);
    let mut policy = deltarl_model::build(&cfg, tokenizer, ctx.device, o.model.dtype)?;
    let seed = seed_for(o.seed, 0, "warmstart", "", 0);
    deltarl_model::init_weights(&mut policy, seed);
    let mut opt = deltarl_update::AdamW::new(
        &policy.vs,
        deltarl_update::AdamWSettings {
            lr: w.lr,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.01,
        },
    );
    let s = deltarl_update::sft::SftSettings {
        steps: w.steps,
        lr: w.lr,
        warmup_steps: w.warmup_steps,
        grad_clip: 1.0,
    };
    let start = Instant::now();
    let pb = indicatif::ProgressBar::new(w.steps as u64);
    if std::env::var_os("DELTARL_NO_PROGRESS").is_some() {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let tok = &policy.tokenizer;
    let mut encode_err = None;
    let mut batch = |step: usize| {
        let mut rng = Rng::new(seed_for(o.seed, 0, "warmstart", "batch", step as u32));
        (0..w.batch_size)
            .map(|_| {
                let (prompt, target) =
                    tiny::warmstart_example(&mut rng, &o.data.template, w.wrong_frac);
                let p = tok.encode(&prompt).unwrap_or_else(|e| {
                    encode_err = Some(e.to_string());
                    Vec::new()
                });
                let mut t = tok.encode(&target).unwrap_or_default();
                t.push(tiny::EOS_ID);
                (p, t)
            })
            .collect()
    };
    let loss = deltarl_update::sft::train(&s, &policy, &mut opt, &mut batch, &mut |step, loss| {
        pb.set_position(step as u64 + 1);
        pb.set_message(format!("loss {loss:.3}"));
    });
    pb.finish_and_clear();
    if let Some(e) = encode_err {
        bail!("warm start: {e}");
    }
    let train_secs = start.elapsed().as_secs_f64();
    deltarl_model::save(&policy, &tmp)?;
    let greedy = held_out_accuracy(ctx, &policy, 200, 0.0)?;
    let sampled = held_out_accuracy(ctx, &policy, 200, 1.0)?;
    if base.exists() {
        std::fs::remove_dir_all(&base)
            .with_context(|| format!("cannot replace {}", base.display()))?;
    }
    std::fs::rename(&tmp, &base)?;
    let params: i64 = policy
        .vs
        .variables()
        .values()
        .map(|t| t.numel() as i64)
        .sum();
    let m = Manifest {
        stage: "warmstart".into(),
        iter: 0,
        config_hash: ctx
            .cfg
            .part_hash(&[&o.seed, &o.warmstart, &o.model.tiny, &o.data.template]),
        seed,
        inputs: Default::default(),
        outputs: [(
            "base/model.safetensors".to_string(),
            deltarl_schemas::sha256_file(&base.join("model.safetensors"))?,
        )]
        .into(),
        rows: w.steps as u64,
        seconds: train_secs,
        version: TOOL_VERSION.into(),
        summary: json!({"final_loss": loss, "params": params, "heldout_greedy_accuracy": greedy, "heldout_t1_accuracy": sampled}),
    };
    m.write(&base.join("manifest.json"))?;
    eprintln!(
        "  warmstart {params} parameters, {} steps in {train_secs:.1} s, loss {loss:.3}, held-out accuracy {greedy:.3} greedy / {sampled:.3} at T=1",
        w.steps
    );
    Ok(())
}
