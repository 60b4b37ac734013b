//! The features stage: a teacher-forced pass of the previous policy over every response,
//! giving the per-token gradient proxy `v = (1 - p) h`, log-probs and entropies; writes
//! features.parquet. When the file is to keep not every vector (`[features] persist`), the
//! stage holds the iteration's vectors and estimates the coefficients where they are, as
//! the authors' code does, writing them beside the file for the coeffs stage.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use deltarl_coeffs::shell::Source;
use deltarl_features::Stored;
use deltarl_model::generate::logprob_temperature;
use deltarl_schemas::layout::in_stage_coeffs_path;
use deltarl_schemas::{
    atomic_write, encode_piece, read_path, read_table, CoeffRow, FeatureRow, FeatureScalars,
    FeaturesSummary, Persist, RolloutRow, SketchAgreement, Stage,
};

use super::contract::Contract;
use super::env::{load_policy, Env};
use super::ran::Ran;
use crate::config::Resolved;
use crate::progress::Progress;

/// The features stage's contract.
pub struct Features;

impl Contract for Features {
    const STAGE: Stage = Stage::Features;
    type Settings = Settings;
    type Summary = FeaturesSummary;

    fn settings(cfg: &Resolved) -> Result<Settings> {
        let o = &cfg.opts.features;
        let persist = match o.persist {
            Persist::Full => Stored::Full,
            Persist::Projected => Stored::Projected { dim: o.persist_dim },
            Persist::None => Stored::None,
        };
        Ok(Settings {
            pass: settings(cfg),
            persist,
            coeffs: (!persist.is_full()).then(|| cfg.coeffs.clone()),
        })
    }

    /// The scores, when the stage estimates the coefficients.
    fn extra_inputs(s: &Settings, env: &Env) -> Result<Vec<PathBuf>> {
        Ok(match s.coeffs {
            Some(_) => vec![env.file(Stage::Score)],
            None => Vec::new(),
        })
    }

    fn run(env: &Env, s: &Settings) -> Result<Option<Ran<FeaturesSummary>>> {
        match &s.coeffs {
            None => pass(env, &s.pass),
            Some(c) => held(env, s, c),
        }
    }

    fn line(s: &FeaturesSummary) -> String {
        let sketch = s.sketch.as_ref().map_or(String::new(), |a| {
            format!(
                ", sketch Spearman {:.4} max |dc| {:.3e}",
                a.spearman, a.max_abs_diff
            )
        });
        format!(
            "{} tokens, k = {}, entropy {:.3}{sketch}",
            s.tokens, s.dim, s.entropy_mean
        )
    }
}

/// The features stage's settings: the pass's, what the file keeps of the vectors, and when
/// that is not every vector the coefficient settings the stage estimates with. Serialised
/// flat, the last two only when the file keeps not every vector, so every configuration
/// that keeps them all hashes as it always did.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    #[serde(flatten)]
    pub pass: deltarl_features::Settings,
    #[serde(skip_serializing_if = "Stored::is_full")]
    pub persist: Stored,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coeffs: Option<deltarl_coeffs::Settings>,
}

/// The features pass's settings under this configuration (its [`deltarl_features::Job`] is
/// the run's: iteration and shard).
pub fn settings(cfg: &Resolved) -> deltarl_features::Settings {
    let o = &cfg.opts;
    deltarl_features::Settings {
        seed: o.seed,
        proxy: o.features.proxy,
        project_dim: crate::config::zero_is_off(o.features.project_dim),
        temperature: logprob_temperature(o.rollout.temperature),
        chunk_rows: o.features.chunk_rows,
        chunk_tokens: crate::config::zero_is_off(o.features.chunk_tokens),
        head_chunk_bytes: o.model.head_chunk_bytes(),
        layout: o.model.layout,
        dtype: o.model.dtype,
    }
}

/// The pass with every vector written as it comes (`persist = "full"`).
fn pass(env: &Env, s: &deltarl_features::Settings) -> Result<Option<Ran<FeaturesSummary>>> {
    let (rollouts, _) = read_path::<RolloutRow>(&env.file(Stage::Rollout))?;
    let dir = env.previous_policy();
    let policy = load_policy(&dir, env.device, s.dtype)?;
    let job = deltarl_features::Job {
        iter: env.iter,
        shard: env.shard(),
    };
    let progress = Progress::new("features", rollouts.len() as u64);
    let hidden = policy.model.config.hidden_size;
    let failed = || format!("teacher-forced pass of the policy in {}", dir.display());
    let mut stats = Stats::default();
    match env.ranks {
        // One process: each pass's rows go to the file as they come, encoded as a piece.
        None => {
            env.write_output(Stage::Features, |w| -> Result<()> {
                let mut out =
                    deltarl_features::writer(s, env.iter, hidden, Stored::Full, w, env.meta());
                let mut c = 0;
                deltarl_features::run_each(
                    s,
                    job,
                    &policy.model,
                    &rollouts,
                    &mut |rows| {
                        stats.add(&rows);
                        out.append(encode_piece(&rows)?, &format!("pass {c}"))?;
                        c += 1;
                        Ok(())
                    },
                    &mut |n| progress.inc(n as u64),
                )
                .with_context(failed)?;
                out.finish()?;
                Ok(())
            })?;
        }
        // Several processes: each computes its share of the passes (pass c on rank
        // c % world), encoding each pass into its spill file as it comes; then, pass by
        // pass in order, rank 0 takes each from its owner and copies its bytes into the
        // file (decoding only its scalars for the summary), so no rank holds more than a
        // pass or two in memory and the encoding is spread over the ranks.
        Some(g) => {
            let passes = deltarl_features::passes(s, &rollouts).len();
            let output = env.file(Stage::Features);
            if env.writes() {
                crate::ranks::Spill::remove_stale(&output, g.shard().world.max(1));
            }
            let mut spill = crate::ranks::Spill::create(&output, g.rank())?;
            deltarl_features::run_each(
                s,
                job,
                &policy.model,
                &rollouts,
                &mut |rows| Ok(spill.push(&rows)?),
                &mut |n| progress.inc(n as u64),
            )
            .with_context(failed)?;
            let own = spill.pieces();
            if env.writes() {
                let dim = deltarl_features::output_dim(hidden, s);
                env.write_output(Stage::Features, |w| -> Result<()> {
                    let mut out =
                        deltarl_features::writer(s, env.iter, hidden, Stored::Full, w, env.meta());
                    crate::ranks::stream_to_rank0(g, passes, own, &mut |b, what| {
                        stats.add_piece(&b, what, dim)?;
                        Ok(out.append(b, what)?)
                    })?;
                    out.finish()?;
                    Ok(())
                })?;
            } else {
                crate::ranks::stream_to_rank0(g, passes, own, &mut |_, _| Ok(()))?;
            }
        }
    }
    progress.finish();
    if !env.writes() {
        return Ok(None);
    }
    // Coefficients an earlier configuration estimated here, with the vectors held, are no
    // longer this iteration's (removed once the new file is in place): the coeffs stage
    // estimates from the file now.
    let stale = in_stage_coeffs_path(&env.run.root, env.iter);
    if stale.exists() {
        std::fs::remove_file(&stale)
            .with_context(|| format!("cannot remove {}", stale.display()))?;
    }
    Ok(Some(Ran::new(stats.rows, stats.summary(None))))
}

/// The pass with the vectors held (`persist` = projected or none): every row computed and
/// held where it was computed (among several processes, each rank its own passes' rows;
/// the per-token scalars, a few bytes a token, go to every rank), the coefficients
/// estimated from them under `coeffs` (each pass's per-response results exchanged, so
/// every rank computes what one process does) and written beside features.parquet by rank
/// 0 ([`in_stage_coeffs_path`]), then the rows written as the file keeps them, each
/// rank's pieces streamed to rank 0 in pass order. Under `projected` the coefficients are
/// also estimated from the sketch, and how they agree with full width's goes into the
/// summary.
fn held(
    env: &Env,
    s: &Settings,
    coeffs: &deltarl_coeffs::Settings,
) -> Result<Option<Ran<FeaturesSummary>>> {
    let (rollouts, _) = read_path::<RolloutRow>(&env.file(Stage::Rollout))?;
    let dir = env.previous_policy();
    let policy = load_policy(&dir, env.device, s.pass.dtype)?;
    let hidden = policy.model.config.hidden_size;
    let dim = deltarl_features::output_dim(hidden, &s.pass);
    if let Stored::Projected { dim: k } = s.persist {
        if k >= dim {
            bail!(
                "config key `features.persist_dim` = {k}: the vectors of the policy in {} \
                 have {dim} dimensions, so a sketch of {k} keeps nothing less; use \
                 features.persist = \"full\"",
                dir.display()
            );
        }
    }
    let job = deltarl_features::Job {
        iter: env.iter,
        shard: env.shard(),
    };
    let passes = deltarl_features::passes(&s.pass, &rollouts);
    let own: Vec<&RolloutRow> = passes
        .iter()
        .enumerate()
        .filter(|(c, _)| job.shard.owns(*c))
        .flat_map(|(_, p)| p.iter().copied())
        .collect();
    check_memory(&own, dim, s.persist)?;
    let progress = Progress::new("features", rollouts.len() as u64);
    let failed = || format!("teacher-forced pass of the policy in {}", dir.display());
    // This process's rows, and how many each of its passes gave (its pieces of the file).
    let mut rows: Vec<FeatureRow> = Vec::new();
    let mut piece_rows: Vec<usize> = Vec::new();
    deltarl_features::run_each(
        &s.pass,
        job,
        &policy.model,
        &rollouts,
        &mut |r| {
            piece_rows.push(r.len());
            rows.extend(r);
            Ok(())
        },
        &mut |n| progress.inc(n as u64),
    )
    .with_context(failed)?;
    progress.finish();
    // 1. The coefficients at full width, where the vectors are.
    let everyone = match env.ranks {
        None => None,
        Some(g) => Some(gather_scalars(g, &rows)?),
    };
    let (settings, full, summary) = estimate_held(
        env,
        coeffs,
        &rollouts,
        everyone.as_deref().unwrap_or(&rows),
        &rows,
        dim,
    )?;
    let path = in_stage_coeffs_path(&env.run.root, env.iter);
    if env.writes() {
        atomic_write(&path, |w| {
            deltarl_coeffs::shell::write(w, &settings, &full, &summary, env.meta())
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // 2. The rows as the file keeps them.
    let stored = s.persist.apply(rows, s.pass.sketch_seed(env.iter));
    // 3. Under a sketch: the coefficients it gives, against full width's.
    let sketch = match s.persist {
        Stored::Projected { dim: k } => {
            // The stored rows keep the scalars: one process's are every response's.
            let scalars = everyone.as_deref().unwrap_or(&stored);
            let (_, sketched, _) = estimate_held(env, coeffs, &rollouts, scalars, &stored, k)?;
            Some(agreement(k, &full, &sketched)?)
        }
        Stored::Full | Stored::None => None,
    };
    // 4. The file: each pass's rows encoded as a piece where they are; among several
    //    processes the pieces go to rank 0 in pass order, which copies them in.
    let stored_dim = s.persist.dim(dim);
    let pieces = split(stored, &piece_rows);
    let mut stats = Stats::default();
    if !env.writes() {
        if let Some(g) = env.ranks {
            let pieces = pieces.map(|p| Ok(encode_piece(&p)?));
            crate::ranks::stream_to_rank0(g, passes.len(), pieces, &mut |_, _| Ok(()))?;
        }
        return Ok(None);
    }
    env.write_output(Stage::Features, |w| -> Result<()> {
        let mut out = deltarl_features::writer(&s.pass, env.iter, hidden, s.persist, w, env.meta());
        match env.ranks {
            None => {
                for (c, p) in pieces.enumerate() {
                    stats.add(&p);
                    out.append(encode_piece(&p)?, &format!("pass {c}"))?;
                }
            }
            Some(g) => {
                let pieces = pieces.map(|p| Ok(encode_piece(&p)?));
                crate::ranks::stream_to_rank0(g, passes.len(), pieces, &mut |b, what| {
                    stats.add_piece(&b, what, stored_dim)?;
                    Ok(out.append(b, what)?)
                })?;
            }
        }
        out.finish()?;
        Ok(())
    })?;
    let mut ran = Ran::new(stats.rows, stats.summary(sketch));
    ran.outputs.push(path);
    Ok(Some(ran))
}

/// The coefficients from held rows: this process's `rows` (of `dim` dimensions), with
/// `scalars` holding every response's per-token scalars; among several processes each
/// pass's results are exchanged with the other ranks'.
fn estimate_held(
    env: &Env,
    coeffs: &deltarl_coeffs::Settings,
    rollouts: &[RolloutRow],
    scalars: &[FeatureRow],
    rows: &[FeatureRow],
    dim: usize,
) -> Result<(
    deltarl_coeffs::Settings,
    Vec<CoeffRow>,
    deltarl_schemas::CoeffsSummary,
)> {
    match env.ranks {
        None => {
            super::coeffs::estimate_rows(env, coeffs, rollouts, scalars, Source::Rows(rows), dim)
        }
        Some(g) => {
            let mut share = |local: &[u8]| {
                g.all_gather_bytes(local)
                    .map_err(|e| deltarl_coeffs::Error::Exchange(format!("{e:#}")))
            };
            let source = Source::Shared(rows, &mut share);
            super::coeffs::estimate_rows(env, coeffs, rollouts, scalars, source, dim)
        }
    }
}

/// Every rank's rows without their vectors (the per-token scalars), on every rank.
fn gather_scalars(g: &deltarl_dist::Group, rows: &[FeatureRow]) -> Result<Vec<FeatureRow>> {
    let stripped = Stored::None.apply(rows.to_vec(), 0);
    let bytes = encode_piece(&stripped)?;
    let mut all = Vec::new();
    for (rank, b) in g.all_gather_bytes(&bytes)?.into_iter().enumerate() {
        if !b.is_empty() {
            let what = format!("the per-token scalars of rank {rank}");
            all.extend(read_table::<FeatureRow, _>(b.as_slice(), &what)?.0);
        }
    }
    Ok(all)
}

/// `rows` cut into consecutive pieces of the given lengths.
fn split(rows: Vec<FeatureRow>, lengths: &[usize]) -> impl Iterator<Item = Vec<FeatureRow>> + '_ {
    let mut rest = rows.into_iter();
    lengths
        .iter()
        .map(move |&n| rest.by_ref().take(n).collect())
}

/// How the coefficients estimated from a sketch of `k` dimensions agree with `full`'s,
/// over the tokens of responses with a non-zero advantage.
fn agreement(k: usize, full: &[CoeffRow], sketched: &[CoeffRow]) -> Result<SketchAgreement> {
    let a: Vec<Vec<f32>> = full.iter().map(|r| r.coeff.clone()).collect();
    let b: Vec<Vec<f32>> = sketched.iter().map(|r| r.coeff.clone()).collect();
    Ok(deltarl_coeffs::agreement(
        u32::try_from(k).unwrap_or(u32::MAX),
        &a,
        &b,
        |i| full[i].advantage != 0.0,
    )?)
}

/// Refuses, before the pass, to hold more vectors than the machine has memory for: the
/// `dim` f32 values of every response token this process computes (`rollouts`, and its
/// sketch's), against what the kernel says is available now, with a quarter left for the
/// model and the estimate.
fn check_memory(rollouts: &[&RolloutRow], dim: usize, persist: Stored) -> Result<()> {
    let tokens: u64 = rollouts
        .iter()
        .map(|r| r.response_token_ids.len() as u64)
        .sum();
    let per_token = 4 * (dim + persist.dim(dim)) as u64;
    let need = tokens.saturating_mul(per_token);
    if let Some(free) = crate::memory::available() {
        if need > free / 4 * 3 {
            bail!(
                "features.persist = \"{}\" holds the iteration's vectors in memory: {tokens} \
                 response tokens x {dim} dimensions need {:.1} GiB, and {:.1} GiB is \
                 available; use features.persist = \"full\" (the vectors streamed to the \
                 file) or fewer responses an iteration",
                persist.persist(),
                need as f64 / f64::from(1u32 << 30),
                free as f64 / f64::from(1u32 << 30)
            );
        }
    }
    Ok(())
}

/// The manifest summary's sums, taken as rows pass by.
#[derive(Default)]
struct Stats {
    rows: usize,
    tokens: usize,
    dim: u32,
    entropy: f64,
}

impl Stats {
    fn summary(&self, sketch: Option<SketchAgreement>) -> FeaturesSummary {
        FeaturesSummary {
            tokens: self.tokens,
            dim: self.dim,
            entropy_mean: self.entropy / self.tokens.max(1) as f64,
            sketch,
        }
    }

    /// A piece's rows, from its bytes: only the entropies are decoded (the vectors of
    /// `dim` values are copied into the file, never read).
    fn add_piece(&mut self, bytes: &[u8], what: &str, dim: usize) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        for r in read_table::<FeatureScalars, _>(bytes, what)?.0 {
            self.rows += 1;
            self.tokens += r.entropy.len();
            self.dim = u32::try_from(dim).unwrap_or(u32::MAX);
            for &e in &r.entropy {
                self.entropy += f64::from(e);
            }
        }
        Ok(())
    }

    fn add(&mut self, rows: &[FeatureRow]) {
        for r in rows {
            self.rows += 1;
            self.tokens += r.tokens();
            self.dim = r.dim;
            // Token by token, in file order: the sum the summary always took.
            for &e in &r.entropy {
                self.entropy += f64::from(e);
            }
        }
    }
}
