//! Stage 0, the warm start: the tiny model trained from scratch on worked solutions of a
//! built-in task ([`deltarl_data::Task`]) with a controlled fraction of wrong steps, so the
//! policy RL starts from is right only part of the time. Runs only for `model.source =
//! "tiny"`.
//!
//! * [`Settings`]: everything the stage reads from the configuration (its hash).
//! * [`train`]: the pure core, the seeded initialisation and the supervised loop ([`sft`]).
//! * [`write_base`]: the shell the application calls, which writes the base model folder
//!   (tokenizer, config, weights) into a folder the caller renames when complete.
//!
//! The application then grades the new base on [`HELDOUT_PROBLEMS`] held-out problems of
//! the task with the eval stage's core, sampled as [`Settings::heldout`] says.

mod options;
pub mod sft;

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tch::Device;

use deltarl_data as tiny;
use deltarl_model::{Dtype, Family, Policy, Qwen3Config, Shape, Tokenizer};
use deltarl_sample::Sampling;
use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::Stage;

pub use options::WarmstartOptions;

/// Held-out problems the new base is graded on (for its manifest summary).
pub const HELDOUT_PROBLEMS: usize = 200;

/// Errors of the warm start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] deltarl_model::Error),
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
    #[error("the [model.tiny] shape is not a valid Qwen3 config: {0}")]
    Shape(deltarl_model::Error),
    #[error(
        "config key `model.tiny.max_position_embeddings` = {limit}: the longest {task} \
         example (prompt + solution + end token) has {tokens} tokens"
    )]
    Context {
        limit: usize,
        task: &'static str,
        tokens: usize,
    },
    #[error("warm start: the loss is {0} (nothing written)")]
    Loss(f64),
    #[error("warm start: tensor {0} has non-finite values (nothing written)")]
    NonFinite(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the warm start reads from the configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub seed: u64,
    pub warmstart: WarmstartOptions,
    pub tiny: Shape,
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

/// The Qwen3 config of the tiny model of `task`.
pub fn tiny_config(shape: &Shape, task: tiny::Task) -> Result<Qwen3Config> {
    shape
        .config(
            Family::Qwen3,
            task.vocab_size(),
            10_000.0,
            tiny::EOS_ID,
            Some(tiny::PAD_ID),
        )
        .map_err(Error::Shape)
}

/// The trained base and what its manifest reports.
pub struct Trained {
    pub policy: Policy,
    pub final_loss: f64,
    pub params: i64,
    pub train_seconds: f64,
}

/// The shell: writes the task's tokenizer files into `folder`, builds the tiny model on
/// `device`, trains it ([`train`]; `on_step(step, loss)` after each step) and saves its
/// config and weights there. Nothing is saved when training fails.
pub fn write_base(
    s: &Settings,
    folder: &Path,
    device: Device,
    on_step: &mut dyn FnMut(usize, f64),
) -> Result<Trained> {
    deltarl_schemas::atomic_write_bytes(
        &folder.join("tokenizer.json"),
        tiny::task_tokenizer_json(s.task).as_bytes(),
    )?;
    deltarl_schemas::atomic_write_bytes(
        &folder.join("tokenizer_config.json"),
        tiny::tokenizer_config_json().as_bytes(),
    )?;
    let tokenizer = Tokenizer::from_file(&folder.join("tokenizer.json"))?;
    let mut policy =
        deltarl_model::build(&tiny_config(&s.tiny, s.task)?, tokenizer, device, s.dtype)?;
    let start = Instant::now();
    let final_loss = train(s, &mut policy, on_step)?;
    let train_seconds = start.elapsed().as_secs_f64();
    deltarl_model::save(&policy, folder)?;
    let params = policy
        .vs
        .variables()
        .values()
        .map(|t| t.numel() as i64)
        .sum();
    Ok(Trained {
        policy,
        final_loss,
        params,
        train_seconds,
    })
}

/// The pure core: initialises `policy` from the run seed and trains it on the task's
/// worked solutions (batches drawn from seeds of (run seed, step)). Returns the last loss;
/// a non-finite loss or weight is an error.
pub fn train(
    s: &Settings,
    policy: &mut Policy,
    on_step: &mut dyn FnMut(usize, f64),
) -> Result<f64> {
    let w = &s.warmstart;
    check_context(s, &policy.tokenizer)?;
    let seed = seed_for(s.seed, 0, Stage::Warmstart.name(), "", 0);
    deltarl_model::init_weights(policy, seed);
    let mut opt = deltarl_optim::AdamW::new(
        &policy.vs,
        deltarl_optim::AdamWSettings {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.01,
        },
    );
    let sft = sft::SftSettings {
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
    let tok = &policy.tokenizer;
    // Examples are drawn inside the loop's callback; the first encoding error is kept and
    // returned after it (the character-level tokenizer encodes every character the tasks
    // use, so this is a guard, not a path taken).
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
                let mut encode = |text: &str| {
                    tok.encode(text).unwrap_or_else(|e| {
                        encode_err.get_or_insert(e);
                        Vec::new()
                    })
                };
                let p = encode(&prompt);
                let mut t = encode(&target);
                t.push(tiny::EOS_ID);
                (p, t)
            })
            .collect()
    };
    let loss = sft::train(&sft, policy, &mut opt, &mut batch, on_step);
    if let Some(e) = encode_err {
        return Err(e.into());
    }
    if w.steps > 0 && !loss.is_finite() {
        return Err(Error::Loss(loss));
    }
    if let Some(name) = policy.first_non_finite() {
        return Err(Error::NonFinite(name));
    }
    Ok(loss)
}

/// The longest example (largest numbers, an error that adds a digit) must fit the model's
/// context, or training would index past its positions.
fn check_context(s: &Settings, tok: &Tokenizer) -> Result<()> {
    let (question, answer) = s.task.longest_example();
    let prompt = deltarl_schemas::render_template(&s.template, &question);
    let tokens = tok.encode(&prompt)?.len() + tok.encode(&answer)?.len() + 1;
    if tokens > s.tiny.max_position_embeddings {
        return Err(Error::Context {
            limit: s.tiny.max_position_embeddings,
            task: s.task.source(),
            tokens,
        });
    }
    Ok(())
}
