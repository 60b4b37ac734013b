//! `deltarl mechanism`: DelTA's mechanism read directly on runs of a built-in arithmetic
//! task ([`crate::mechanism`]): per iteration, the gradient-weighted AUROC of the
//! coefficients between the shared and the discriminative tokens of wrong and of right
//! answers; per run, the mean over its iterations; over the runs given (seeds), the mean
//! and its 95 % t-interval. With `--gradients`, also each class's net policy gradient
//! ([`crate::mechanism::gradients`]) at the policy that sampled the iteration; with
//! `--classes filler`, the filler's and the rest's, per iteration or (`--per-step`) per
//! optimizer step.

mod filler;
mod open;

use std::path::Path;

use anyhow::{Context as _, Result};

use deltarl_schemas::{read_path, FeatureProbs, Index, Stage};

use crate::mechanism::gradients::{self, SideGradients};
use crate::mechanism::{read, shared_tokens, Readout, Response, Side};
use filler::{filler_readouts, At};
use open::{
    decoded, net_gradients, open_labelled, scored_iterations, Labelled, Labels, Scored, FILLER,
    FIRST_ERROR,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run names (repeat for several seeds: the interval is over runs). Every iteration
    /// with a coeffs file is read.
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// Also each token class's net policy gradient ‖Σ A ∇θ log π‖ (four backward passes
    /// over an iteration's responses, the policy loaded on the CPU in f32).
    #[arg(long)]
    gradients: bool,
    /// Which classes the tokens are split into.
    #[arg(long, value_enum, default_value_t = Classes::FirstError)]
    classes: Classes,
    /// With `--classes filler`: read each optimizer step's mini-batch apart (the responses
    /// the update trained that step on, cut as the update cuts them), not the iteration's
    /// whole batch. Filler's expected net gradient is zero (the reward cannot see it), so
    /// its share is sampling noise, larger in a smaller batch: a step's share is what the
    /// step's gradient carries.
    #[arg(long)]
    per_step: bool,
}

/// How the readout splits a response's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Classes {
    /// Shared = a wrong answer's text before its first error, a right answer's prefix that
    /// a wrong answer of its group has too (the AUROC, and the net gradients with
    /// `--gradients`); the arithmetic tasks.
    FirstError,
    /// Filler = `tiny-steps-filler[-80]`'s filler words (after the answer), the rest =
    /// everything else (the net gradients only: how much of each side's update is text the
    /// reward cannot see).
    Filler,
}

impl Classes {
    /// The labels the split needs of a run's task.
    fn labels(self) -> &'static Labels {
        match self {
            Classes::FirstError => &FIRST_ERROR,
            Classes::Filler => &FILLER,
        }
    }
}

impl Args {
    pub fn run(self, runs_dir: &Path) -> Result<()> {
        // Every run named exists, once, and has the labels before any table starts (the
        // first-error readout prints each run's rows as it reads them).
        if let Some(name) = super::flags::repeated(&self.runs) {
            anyhow::bail!(
                "--run {name} is given twice: the interval is over runs, each counted once"
            );
        }
        let opened = self
            .runs
            .iter()
            .map(|name| open_labelled(runs_dir, name, self.classes.labels()))
            .collect::<Result<Vec<_>>>()?;
        if self.classes == Classes::Filler {
            let grads = self
                .runs
                .iter()
                .zip(&opened)
                .map(|(name, run)| Ok((name.as_str(), filler_readouts(run, self.per_step)?)))
                .collect::<Result<Vec<_>>>()?;
            print_gradients(&grads, "filler");
            return Ok(());
        }
        anyhow::ensure!(
            !self.per_step,
            "--per-step reads the filler classes' net gradients: it needs --classes filler"
        );
        println!(
            "AUROC: P(c of a discriminative token > c of a shared one), tokens weighted by \
             (1 - p)|A|; above 0.5 is what DelTA's premise predicts.\n\
             wrong answers: shared = before the first error; right answers: shared = the \
             prefix a wrong answer of the group has too.\n"
        );
        println!(
            "| run | iteration | wrong: tokens shared / rest | shared share | mean c shared / \
             rest | AUROC | right: tokens shared / rest | shared share | mean c shared / rest \
             | AUROC |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let mut means = Vec::new();
        let mut grads = Vec::new();
        for (name, run) in self.runs.iter().zip(&opened) {
            let readouts = run_readouts(run, self.gradients)?;
            for (iter, r, _) in &readouts {
                println!(
                    "| {name} | {iter} | {} | {} |",
                    cells(&r.wrong),
                    cells(&r.right)
                );
            }
            let mean = |side: fn(&Readout) -> &Side| {
                let xs: Vec<f64> = readouts
                    .iter()
                    .filter_map(|(_, r, _)| side(r).auroc)
                    .collect();
                (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
            };
            grads.push((
                name.as_str(),
                readouts
                    .iter()
                    .filter_map(|(iter, _, g)| g.map(|g| (At::whole(*iter), g)))
                    .collect::<Vec<_>>(),
            ));
            means.push(RunMean {
                name,
                iterations: readouts.len(),
                wrong: mean(|r| &r.wrong),
                right: mean(|r| &r.right),
            });
        }
        println!("\n| run | iterations | mean AUROC, wrong answers | mean AUROC, right answers |");
        println!("|---|---|---|---|");
        let show = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.4}"));
        for m in &means {
            println!(
                "| {} | {} | {} | {} |",
                m.name,
                m.iterations,
                show(m.wrong),
                show(m.right)
            );
        }
        // Over runs (seeds), each run's mean over its iterations: iterations of one run are
        // not independent, runs are.
        let wrong: Vec<f64> = means.iter().filter_map(|m| m.wrong).collect();
        let right: Vec<f64> = means.iter().filter_map(|m| m.right).collect();
        print_over_runs("wrong answers: mean AUROC", &wrong, 4);
        print_over_runs("right answers: mean AUROC", &right, 4);
        if self.gradients {
            print_gradients(&grads, "shared");
        }
        Ok(())
    }
}

/// The gradient readout's tables: per iteration (or optimizer step), per run the mean share
/// of `class` (the first of the two classes: shared, or filler), and over runs its
/// t-interval.
fn print_gradients(runs: &[(&str, Vec<(At, gradients::Readout)>)], class: &str) {
    println!(
        "\nNet policy gradient of each class, ||sum A grad log p|| at the policy that sampled \
         the iteration (DAPO's update before its token mean); share = the class's part of \
         its side's update along that update, g_class . g / ||g||^2 ({class} + rest = 1); \
         {class} cos = cos(g_{class} of wrong answers, g_{class} of right ones), -1 where the \
         two sides' pushes on that text cancel.\n"
    );
    println!(
        "| run | iteration | wrong: norm {class} / rest | cos | share {class} | right: norm \
         {class} / rest | cos | share {class} | {class} cos |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, readouts) in runs {
        for (at, g) in readouts {
            println!(
                "| {name} | {at} | {} | {} | {:.3} |",
                gradient_cells(&g.wrong),
                gradient_cells(&g.right),
                g.shared_cosine()
            );
        }
    }
    let mean = |xs: Vec<f64>| {
        let xs: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    let show = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
    println!(
        "\n| run | readouts | mean share {class}, wrong answers | mean share {class}, right \
         answers | mean {class} cos |"
    );
    println!("|---|---|---|---|---|");
    let mut over_runs: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for (name, readouts) in runs {
        let wrong = mean(readouts.iter().map(|(_, g)| g.wrong.share()[0]).collect());
        let right = mean(readouts.iter().map(|(_, g)| g.right.share()[0]).collect());
        let cross = mean(readouts.iter().map(|(_, g)| g.shared_cosine()).collect());
        println!(
            "| {name} | {} | {} | {} | {} |",
            readouts.len(),
            show(wrong),
            show(right),
            show(cross)
        );
        over_runs[0].extend(wrong);
        over_runs[1].extend(right);
        over_runs[2].extend(cross);
    }
    let labels = [
        format!("wrong answers: mean share of the {class} tokens"),
        format!("right answers: mean share of the {class} tokens"),
        format!("{class} tokens: mean cos of the two sides"),
    ];
    for (label, xs) in labels.iter().zip(&over_runs) {
        print_over_runs(label, xs, 3);
    }
}

/// The mean over runs (seeds) of each run's mean, with its 95 % t-interval, when there are
/// two runs or more: iterations of one run are not independent, runs are.
fn print_over_runs(label: &str, xs: &[f64], decimals: usize) {
    if xs.len() >= 2 {
        let (m, h) = crate::paired::mean_ci(xs);
        println!(
            "\n{label} over {} runs {m:.decimals$}, 95 % CI [{:.decimals$}, {:.decimals$}] \
             (t over runs)",
            xs.len(),
            m - h,
            m + h
        );
    }
}

fn gradient_cells(s: &SideGradients) -> String {
    format!(
        "{:.4e} / {:.4e} | {:.3} | {:.3}",
        s.norm[0],
        s.norm[1],
        s.cosine(),
        s.share()[0]
    )
}

/// One run's means over its iterations.
struct RunMean<'a> {
    name: &'a str,
    iterations: usize,
    wrong: Option<f64>,
    right: Option<f64>,
}

fn cells(s: &Side) -> String {
    let auroc = s.auroc.map_or("-".to_string(), |a| format!("{a:.4}"));
    format!(
        "{} / {} | {:.3} | {:.3} / {:.3} | {auroc}",
        s.tokens[0], s.tokens[1], s.shared_share, s.mean_coeff[0], s.mean_coeff[1]
    )
}

/// Each iteration's readout of one run (iterations without a coeffs file are skipped), and
/// with `gradients` its gradient readout.
fn run_readouts(
    run: &Labelled,
    gradients: bool,
) -> Result<Vec<(u32, Readout, Option<gradients::Readout>)>> {
    let (ctx, task, tokenizer) = (&run.ctx, run.task, &run.tokenizer);
    let mut out = Vec::new();
    for scored in scored_iterations(ctx) {
        let Scored {
            iter,
            rollouts,
            coeffs,
            coeffs_path,
        } = scored?;
        let at = |stage| ctx.run.output(iter, stage);
        let probs: Vec<FeatureProbs> = read_path(&at(Stage::Features))?.0;
        let (prob_of, coeff_of) = (Index::new(&probs), Index::new(&coeffs));
        // The task's labels, each token decoded alone (as the oracles read them).
        let labels: Vec<Vec<bool>> = rollouts
            .iter()
            .map(|r| {
                let pieces = decoded(tokenizer, &r.response_token_ids)?;
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                task.correct_prefix_tokens(&r.prompt_id, &pieces)
                    .with_context(|| {
                        format!(
                            "{}: prompt id {:?} is not a problem of {}",
                            at(Stage::Rollout).display(),
                            r.prompt_id,
                            task.source()
                        )
                    })
            })
            .collect::<Result<_>>()?;
        let mut responses = Vec::with_capacity(rollouts.len());
        for (r, labels) in rollouts.iter().zip(&labels) {
            let c = coeff_of.get(r, "coeffs").map_err(anyhow::Error::msg)?;
            let p = prob_of.get(r, "features").map_err(anyhow::Error::msg)?;
            responses.push(Response {
                prompt_id: &r.prompt_id,
                advantage: c.advantage,
                token_ids: &r.response_token_ids,
                coeff: &c.coeff,
                token_prob: &p.token_prob,
                correct_prefix: labels,
            });
        }
        let readout = read(&responses)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{}", coeffs_path.display()))?;
        let grads = if gradients {
            let shared = shared_tokens(&responses)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{}", coeffs_path.display()))?;
            let rows: Vec<gradients::Row<'_>> = rollouts
                .iter()
                .zip(&responses)
                .zip(&shared)
                .map(|((r, resp), s)| gradients::Row {
                    prompt: &r.prompt_token_ids,
                    response: &r.response_token_ids,
                    advantage: resp.advantage,
                    shared: s.as_deref(),
                })
                .collect();
            Some(net_gradients(ctx, iter, &rows)?)
        } else {
            None
        };
        out.push((iter, readout, grads));
    }
    Ok(out)
}
