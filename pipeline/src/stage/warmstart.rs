//! Stage 0, the warm start: the tiny model trained from scratch on worked solutions with a
//! controlled fraction of wrong steps, written to `base/` (a temporary folder renamed when
//! complete). Runs only when `model.source = "tiny"`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::json;

use deltarl_data as tiny;
use deltarl_model::synthetic::Shape;
use deltarl_model::{Dtype, Policy, Qwen3Config, Tokenizer};
use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::{atomic_write_bytes, Stage};

use super::env::Env;
use super::eval::Sampling;
use super::ran::{num, Ran};
use super::temp_folder::TempFolder;
use crate::config::{Resolved, TinyOptions, WarmstartOptions};
use crate::progress::Progress;

/// Held-out problems the new base is measured on (for its manifest summary).
const HELDOUT_PROBLEMS: usize = 200;

/// Everything the warm start reads from the configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub seed: u64,
    pub warmstart: WarmstartOptions,
    pub tiny: TinyOptions,
    /// The prompt template the worked solutions follow.
    pub template: String,
    pub dtype: Dtype,
    /// How the held-out accuracy of the new base is sampled.
    pub heldout: Sampling,
    /// The built-in task whose solutions the model learns (and whose vocabulary it has):
    /// the one `data.source` names, else the compact one.
    #[serde(skip_serializing_if = "is_arith")]
    pub task: tiny::Task,
}

fn is_arith(t: &tiny::Task) -> bool {
    *t == tiny::Task::Arith
}

impl Settings {
    pub fn new(cfg: &Resolved) -> Self {
        let o = &cfg.opts;
        Settings {
            seed: o.seed,
            warmstart: o.warmstart.clone(),
            tiny: o.model.tiny.clone(),
            template: o.data.template.clone(),
            dtype: o.model.dtype,
            heldout: Sampling::new(cfg),
            task: tiny_task(cfg),
        }
    }
}

/// The task the tiny model is warm-started on.
pub fn tiny_task(cfg: &Resolved) -> tiny::Task {
    tiny::Task::from_source(&cfg.opts.data.source).unwrap_or_default()
}

/// The Qwen3 config of the tiny model of `task`.
pub fn tiny_config(t: &TinyOptions, task: tiny::Task) -> Result<Qwen3Config> {
    let shape = Shape {
        vocab_size: task.vocab_size(),
        hidden_size: t.hidden_size,
        intermediate_size: t.intermediate_size,
        num_hidden_layers: t.num_hidden_layers,
        num_attention_heads: t.num_attention_heads,
        num_key_value_heads: t.num_key_value_heads,
        max_position_embeddings: t.max_position_embeddings,
        tie_word_embeddings: true,
    };
    shape
        .config(10_000.0, tiny::EOS_ID, Some(tiny::PAD_ID))
        .context("the [model.tiny] shape is not a valid Qwen3 config")
}

/// Greedy or sampled accuracy of `policy` on held-out problems.
fn heldout_accuracy(s: &Settings, policy: &Policy, temperature: f64) -> Result<f64> {
    let prompts = crate::data::tiny_test_prompts(s.task, HELDOUT_PROBLEMS);
    let rows = super::eval::evaluate(
        policy,
        &crate::data::heldout_name(s.task),
        &prompts,
        &s.heldout.at(1, temperature, 0),
    )?;
    Ok(rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64)
}

pub fn run(env: &Env, s: &Settings) -> Result<Ran> {
    let w = &s.warmstart;
    let base = env.run.base();
    let folder = TempFolder::new(&env.run.root, "base")?;
    let tmp = folder.path();
    atomic_write_bytes(
        &tmp.join("tokenizer.json"),
        tiny::task_tokenizer_json(s.task).as_bytes(),
    )?;
    atomic_write_bytes(
        &tmp.join("tokenizer_config.json"),
        tiny::tokenizer_config_json().as_bytes(),
    )?;
    let tokenizer = Tokenizer::from_file(&tmp.join("tokenizer.json"))?;
    let mut policy = deltarl_model::build(
        &tiny_config(&s.tiny, s.task)?,
        tokenizer,
        env.device,
        s.dtype,
    )?;
    let seed = seed_for(s.seed, 0, Stage::Warmstart.name(), "", 0);
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
    let sft = deltarl_update::sft::SftSettings {
        steps: w.steps,
        lr: w.lr,
        warmup_steps: w.warmup_steps,
        grad_clip: 1.0,
        token_weights: (0..s.task.vocab_size() as u32)
            .map(|id| {
                if tiny::digit_ids().contains(&id) {
                    w.digit_weight as f32
                } else {
                    1.0
                }
            })
            .collect(),
    };
    // The longest example (largest numbers, an error that adds a digit) must fit the
    // model's context, or training would index past its positions.
    let worst = tiny::Problem::LONGEST;
    let tokens = policy
        .tokenizer
        .encode(&deltarl_schemas::render_template(
            &s.template,
            &worst.question(),
        ))?
        .len()
        + policy
            .tokenizer
            .encode(&s.task.solution(&worst, Some((0, 3))))?
            .len()
        + 1;
    if tokens > s.tiny.max_position_embeddings {
        bail!(
            "config key `model.tiny.max_position_embeddings` = {}: the longest {} example \
             (prompt + solution + end token) has {tokens} tokens",
            s.tiny.max_position_embeddings,
            s.task.source()
        );
    }
    let start = Instant::now();
    let progress = Progress::new("warmstart", w.steps as u64);
    let tok = &policy.tokenizer;
    let mut encode_err = None;
    let mut batch = |step: usize| {
        let mut rng = Rng::new(seed_for(
            s.seed,
            0,
            Stage::Warmstart.name(),
            "batch",
            step as u32,
        ));
        (0..w.batch_size)
            .map(|_| {
                let (prompt, target) =
                    tiny::warmstart_example(s.task, &mut rng, &s.template, w.wrong_frac);
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
    let loss =
        deltarl_update::sft::train(&sft, &policy, &mut opt, &mut batch, &mut |step, loss| {
            progress.set_message(format!("loss {loss:.3}"));
            progress.set_position(step as u64 + 1);
        });
    progress.finish();
    if let Some(e) = encode_err {
        bail!("warm start: {e}");
    }
    if w.steps > 0 && !loss.is_finite() {
        bail!("warm start: the loss is {loss} (nothing written)");
    }
    if let Some(name) = policy.first_non_finite() {
        bail!("warm start: tensor {name} has non-finite values (nothing written)");
    }
    let train_secs = start.elapsed().as_secs_f64();
    deltarl_model::save(&policy, tmp)?;
    let greedy = heldout_accuracy(s, &policy, 0.0)?;
    let sampled = heldout_accuracy(s, &policy, 1.0)?;
    folder.commit(&base)?;
    let params: i64 = policy
        .vs
        .variables()
        .values()
        .map(|t| t.numel() as i64)
        .sum();
    Ok(Ran {
        rows: w.steps,
        summary: json!({
            "final_loss": loss,
            "params": params,
            "steps": w.steps,
            "train_seconds": train_secs,
            "heldout_greedy_accuracy": greedy,
            "heldout_t1_accuracy": sampled,
        }),
        outputs: Vec::new(),
    })
}

pub fn summary(s: &serde_json::Value) -> String {
    format!(
        "{} parameters, {} steps in {:.1} s, loss {:.3}, held-out accuracy {:.3} greedy / {:.3} at T=1",
        s["params"],
        s["steps"],
        num(s, "train_seconds"),
        num(s, "final_loss"),
        num(s, "heldout_greedy_accuracy"),
        num(s, "heldout_t1_accuracy")
    )
}
