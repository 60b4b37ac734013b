//! The warm-start adapter: the settings from the configuration, a temporary `base/`
//! folder the stage crate ([`deltarl_warmstart`]) writes and this renames when complete,
//! progress lines and the manifest summary.

use anyhow::Result;

use deltarl_schemas::{Stage, WarmstartSummary};
use deltarl_warmstart::{write_base, Settings, HELDOUT_PROBLEMS};

use super::contract::Contract;
use super::env::Env;
use super::ran::Ran;
use super::temp_folder::TempFolder;
use crate::config::Resolved;
use crate::progress::Progress;

/// The warm start's contract.
pub struct Warmstart;

impl Contract for Warmstart {
    const STAGE: Stage = Stage::Warmstart;
    type Settings = Settings;
    type Summary = WarmstartSummary;

    fn settings(cfg: &Resolved) -> &Settings {
        &cfg.stages.warmstart
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<WarmstartSummary>>> {
        warm_start(env, s).map(Some)
    }

    fn line(s: &WarmstartSummary) -> String {
        format!(
            "{} parameters, {} steps in {:.1} s, loss {:.3}, held-out accuracy {:.3} greedy / \
             {:.3} at T=1",
            s.params,
            s.steps,
            s.train_seconds,
            s.final_loss,
            s.heldout_greedy_accuracy,
            s.heldout_t1_accuracy
        )
    }
}

fn warm_start(env: &Env, s: &Settings) -> Result<Ran<WarmstartSummary>> {
    let folder = TempFolder::new(&env.run.root, "base")?;
    let progress = Progress::new("warmstart", s.warmstart.steps as u64);
    let trained = write_base(s, folder.path(), env.device, &mut |step, loss| {
        progress.set_message(format!("loss {loss:.3}"));
        progress.set_position(step as u64 + 1);
    })?;
    progress.finish();
    // A code task's held-out answers run in the sandbox, with the default limits (this
    // accuracy is a report on the base, not an input of any later stage).
    let heldout = s.task.test_prompts(1);
    let grader = crate::rewards::grader_for(&heldout, Ok(deltarl_code::Settings::default()))?;
    let graded = |temperature: f64| {
        let progress = Progress::new("eval", HELDOUT_PROBLEMS as u64);
        let acc = heldout_accuracy(
            s,
            &trained.policy,
            temperature,
            grader.as_ref(),
            &mut |done| progress.set_position(done as u64),
        );
        progress.finish();
        acc
    };
    let greedy = graded(0.0)?;
    let sampled = graded(1.0)?;
    folder.commit(&env.run.base())?;
    let summary = WarmstartSummary {
        final_loss: trained.final_loss,
        params: trained.params,
        steps: s.warmstart.steps,
        train_seconds: trained.train_seconds,
        heldout_greedy_accuracy: greedy,
        heldout_t1_accuracy: sampled,
    };
    Ok(Ran::new(s.warmstart.steps, summary))
}

/// Accuracy of `policy` on [`HELDOUT_PROBLEMS`] held-out problems of the task, one answer
/// each at `temperature` (0 = greedy), sampled as the eval stage samples the base; a code
/// task's answers run in `grader`'s sandbox. `progress(responses_done)`.
fn heldout_accuracy(
    s: &Settings,
    policy: &deltarl_model::Policy,
    temperature: f64,
    grader: Option<&deltarl_code::Grader>,
    progress: &mut dyn FnMut(usize),
) -> Result<f64> {
    let prompts = s.task.test_prompts(HELDOUT_PROBLEMS);
    let rows = deltarl_eval::evaluate(
        &deltarl_eval::Sampler::native(policy),
        &s.task.heldout_name(),
        &prompts,
        &s.heldout.at(deltarl_eval::Draw::plain(1, temperature), 0),
        grader,
        progress,
    )?;
    Ok(rows.iter().filter(|r| r.correct).count() as f64 / rows.len().max(1) as f64)
}
