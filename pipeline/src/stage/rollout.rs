//! The rollout stage: draw the iteration's prompts, sample G responses to each with the
//! previous policy, write rollouts.parquet.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use deltarl_model::generate::SampleSettings;
use deltarl_schemas::{FinishReason, RolloutSummary, Stage};

use super::contract::Contract;
use super::env::{load_policy, longest_prompt, sampling_engine, Env, Vocabulary};
use super::ran::Ran;
use crate::config::{Engine, Resolved, RolloutOptions};
use crate::data;
use crate::progress::Progress;

/// The rollout stage's contract.
pub struct Rollout;

impl Contract for Rollout {
    const STAGE: Stage = Stage::Rollout;
    type Settings = Settings;
    type Summary = RolloutSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.rollout
    }

    fn extra_inputs(s: &Settings, _: &Env) -> Result<Vec<PathBuf>> {
        Ok(s.data_file().into_iter().collect())
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<RolloutSummary>>> {
        sample(env, s)
    }

    fn line(s: &RolloutSummary) -> String {
        let mut line = format!(
            "{:.0} tok/s, mean len {:.1}, truncated {:.1}%",
            s.tokens_per_s,
            s.mean_response_len,
            100.0 * s.truncated_frac
        );
        if let Some(e) = s.epoch_line() {
            line.push_str(&format!(", {e}"));
        }
        line
    }
}

/// The rollout stage's settings (the rollout crate's own).
pub type Settings = deltarl_rollout::Settings;

/// The engine's sampling settings for these options at `temperature`.
pub fn sample_settings(r: &RolloutOptions, temperature: f64, eos_ids: Vec<u32>) -> SampleSettings {
    SampleSettings::plain(temperature, r.max_new_tokens, eos_ids)
        .truncated(r.top_p, r.top_k)
        .stopping_at(r.stop.clone())
        .batched(
            r.max_batch_rows,
            crate::config::zero_is_off(r.kv_cache_tokens),
            crate::config::zero_is_off(r.session_rows),
        )
}

fn sample(env: &Env, s: &Settings) -> Result<Option<Ran<RolloutSummary>>> {
    let r = &s.rollout;
    let prompts = data::load_prompts(
        &s.data.source,
        s.data.train_size,
        &crate::rewards::Routing::of(&s.data),
    )?;
    let mut drawn = crate::epochs::draw(&prompts, r.prompts_per_iter, s.seed, env.iter);
    let dir = env.previous_policy();
    // vLLM loads the folder itself: here only the tokenizer and the end tokens are needed.
    let policy = match r.engine {
        Engine::Native => Some(load_policy(&dir, env.device, s.dtype)?),
        Engine::Vllm => None,
    };
    let vocabulary;
    let (tokenizer, eos_ids) = match &policy {
        Some(p) => (&p.tokenizer, p.eos_ids()),
        None => {
            vocabulary = Vocabulary::of(&dir)?;
            (&vocabulary.tokenizer, vocabulary.eos_ids.clone())
        }
    };
    let template = if s.data.chat_template {
        crate::chat::apply(&mut drawn, &s.data.template, &dir)?
    } else {
        s.data.template.clone()
    };
    let core = deltarl_rollout::Plan {
        samples_per_prompt: r.samples_per_prompt,
        template,
        sampling: sample_settings(r, r.temperature, eos_ids),
        run_seed: s.seed,
        iter: env.iter,
        policy_iter: env.iter - 1,
        seed_stage: Stage::Rollout,
        max_prompt_tokens: crate::config::zero_is_off(r.max_prompt_tokens),
        shard: env.shard(),
    };
    let shard = core.shard;
    if r.engine == Engine::Native && !shard.is_whole() && shard.rank == 0 {
        let samples = drawn.len() * r.samples_per_prompt as usize;
        let sessions = match r.session_rows {
            0 => 1,
            n => samples.div_ceil(n),
        };
        if sessions < shard.world {
            eprintln!(
                "note: {samples} samples in {sessions} session(s) of rollout.session_rows = {}: \
                 {} of {} processes sample nothing (set session_rows to about {} to share the work)",
                r.session_rows,
                shard.world - sessions,
                shard.world,
                samples.div_ceil(shard.world)
            );
        }
    }
    let progress = Progress::new(
        "rollout",
        drawn.len() as u64 * u64::from(r.samples_per_prompt),
    );
    // With vLLM: the server kept from the last rollout with this policy loaded in place, a
    // new one (stopped when `vllm` drops, on every failing path) or the user's, which must
    // serve this very folder.
    let mut vllm_settings = crate::vllm::Settings::new(&s.vllm);
    let vllm = match r.engine {
        Engine::Native => None,
        Engine::Vllm => {
            // The longest prompt, cut to max_prompt_tokens when set.
            let prompts = drawn
                .iter()
                .map(|p| (core.template.as_str(), p.problem.as_str()));
            let mut longest = longest_prompt(tokenizer, prompts)?;
            if let Some(m) = core.max_prompt_tokens {
                longest = longest.min(m);
            }
            Some(env.vllm_server(
                ("vllm", s.dtype, s.seed),
                &mut vllm_settings,
                (longest, r.max_new_tokens),
                &dir,
                tokenizer,
            )?)
        }
    };
    let engine = sampling_engine(
        policy.as_ref(),
        vllm.as_ref().map(|(v, _)| v),
        vllm_settings.concurrency,
    )?;
    let t0 = Instant::now();
    let ran = deltarl_rollout::run_with(&core, tokenizer, engine, &drawn, &mut |done, toks| {
        progress.set_message(format!(
            "{:.0} tok/s",
            toks as f64 / t0.elapsed().as_secs_f64().max(1e-9)
        ));
        progress.set_position(done as u64);
    });
    let rows = match (ran, &vllm) {
        (Ok(rows), _) => Ok(rows),
        // A failed request usually means the server died: say so, with its log.
        (Err(e), Some((v, _))) => Err(v.explain(e.into())),
        (Err(e), None) => Err(too_long_hint(e)),
    }
    .with_context(|| format!("sampling with the policy in {}", dir.display()))?;
    let generate_s = t0.elapsed().as_secs_f64();
    let acquired = match vllm {
        Some((v, acquired)) => {
            crate::vllm::release(v, &vllm_settings, env.kept)?;
            Some(acquired)
        }
        None => None,
    };
    progress.finish();
    // Several processes: each sampled its share of the sessions; rank 0 writes them all in
    // the order of one process (prompts as drawn, then samples).
    let rows = match env.ranks {
        Some(g) => {
            let ids = drawn.iter().map(|p| p.id.as_str());
            crate::ranks::gather_samples(g, rows, ids, |r| (r.prompt_id.as_str(), r.sample_idx))?
        }
        None => rows,
    };
    if !env.writes() {
        return Ok(None);
    }
    env.write_output(Stage::Rollout, |w| -> Result<()> {
        deltarl_rollout::write(&core, &rows, w, env.meta())?;
        Ok(())
    })?;
    let tokens: usize = rows.iter().map(|r| r.response_token_ids.len()).sum();
    let n = rows.len().max(1) as f64;
    let at = crate::epochs::epoch_of(prompts.len(), r.prompts_per_iter, env.iter);
    let truncated = rows
        .iter()
        .filter(|r| r.finish_reason == FinishReason::Length)
        .count();
    let summary = RolloutSummary {
        prompts: drawn.len(),
        tokens,
        tokens_per_s: tokens as f64 / generate_s.max(1e-9),
        mean_response_len: tokens as f64 / n,
        truncated_frac: truncated as f64 / n,
        engine: r.engine,
        engine_startup_s: acquired
            .as_ref()
            .map_or(0.0, deltarl_schemas::Acquired::seconds),
        engine_server: acquired,
        epoch: at.map(|a| a.epoch),
        epoch_batch: at.map(|a| a.batch),
        batches_per_epoch: at.map(|a| a.batches),
    };
    Ok(Some(Ran::new(rows.len(), summary)))
}

/// A prompt longer than the context leaves room for says what fixes it: verl's left
/// truncation (`rollout.max_prompt_tokens`), and `--force` to change a recorded run.
fn too_long_hint(e: deltarl_rollout::Error) -> anyhow::Error {
    let too_long = matches!(
        &e,
        deltarl_rollout::Error::Request {
            problem: deltarl_model::RequestProblem::TooLong { .. },
            ..
        }
    );
    let e = anyhow::Error::from(e);
    if too_long {
        e.context(
            "a prompt does not fit the model's context with rollout.max_new_tokens: set \
             rollout.max_prompt_tokens (prompts keep their last that many tokens, as verl \
             truncates them) or lower max_new_tokens; a run already recorded needs --force \
             to change either",
        )
    } else {
        e
    }
}
