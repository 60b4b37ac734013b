//! The features pass with the vectors held (`[features] persist` below full): the
//! coefficients estimated where the vectors are, then the rows written as the file keeps
//! them.

use anyhow::{bail, Context, Result};

use deltarl_coeffs::shell::{HeldVectors, Source};
use deltarl_features::Stored;
use deltarl_schemas::layout::in_stage_coeffs_path;
use deltarl_schemas::{
    atomic_write, encode_piece, read_path, read_table, CoeffRow, FeatureRow, FeaturesSummary,
    Precision, RolloutRow, SketchAgreement, Stage,
};

use crate::progress::Progress;
use crate::stage::env::{load_policy, Env};
use crate::stage::ran::Ran;

/// The pass with the vectors held (`persist` = projected or none): every row computed and
/// held where it was computed (among several processes, each rank its own passes' rows;
/// the per-token scalars, a few bytes a token, go to every rank), the coefficients
/// estimated from them under `coeffs` (each pass's per-response results exchanged, so
/// every rank computes what one process does) and written beside features.parquet by rank
/// 0 ([`in_stage_coeffs_path`]), then the rows written as the file keeps them, each
/// rank's pieces streamed to rank 0 in pass order. Under `projected` the coefficients are
/// also estimated from the sketch, and how they agree with full width's goes into the
/// summary.
pub(super) fn held(
    env: &Env,
    pass: &deltarl_features::Settings,
    persist: Stored,
    coeffs: &deltarl_coeffs::Settings,
) -> Result<Option<Ran<FeaturesSummary>>> {
    let (rollouts, _) = read_path::<RolloutRow>(&env.file(Stage::Rollout))?;
    let dir = env.previous_policy();
    let policy = load_policy(&dir, env.device, pass.dtype)?;
    let hidden = policy.model.config.hidden_size;
    let dim = deltarl_features::output_dim(hidden, pass);
    if let Stored::Projected { dim: k } = persist {
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
    let passes = deltarl_features::passes(pass, &rollouts);
    let own: Vec<&RolloutRow> = passes
        .iter()
        .enumerate()
        .filter(|(c, _)| job.shard.owns(*c))
        .flat_map(|(_, p)| p.iter().copied())
        .collect();
    let precision = pass.precision();
    check_memory(&own, dim, precision, persist)?;
    let progress = Progress::new("features", rollouts.len() as u64);
    let failed = || format!("teacher-forced pass of the policy in {}", dir.display());
    // This process's vectors, held at the model's precision; its rows as the file keeps
    // them (the scalars, and a sketch's vectors), and how many each of its passes gave
    // (its pieces of the file).
    let mut held = HeldVectors::new(precision);
    let mut stored: Vec<FeatureRow> = Vec::new();
    let mut piece_rows: Vec<usize> = Vec::new();
    let seed = pass.sketch_seed(env.iter);
    deltarl_features::run_each(
        pass,
        job,
        &policy.model,
        &rollouts,
        &mut |rows| {
            piece_rows.push(rows.len());
            for r in &rows {
                // The row's key once: the features error names it.
                held.push(r).map_err(|e| deltarl_features::Error::Row {
                    prompt_id: r.prompt_id.clone(),
                    sample_idx: r.sample_idx,
                    message: match e {
                        deltarl_coeffs::Error::Vectors {
                            precision, problem, ..
                        } => format!("its vectors at {precision}: {problem}"),
                        e => e.to_string(),
                    },
                })?;
            }
            stored.extend(persist.apply(rows, seed));
            Ok(())
        },
        &mut |n| progress.inc(n as u64),
    )
    .with_context(failed)?;
    progress.finish();
    // 1. The coefficients at full width, where the vectors are. The stored rows keep the
    //    scalars: one process's are every response's.
    let everyone = match env.ranks {
        None => None,
        Some(g) => Some(gather_scalars(g, &stored)?),
    };
    let scalars = everyone.as_deref().unwrap_or(&stored);
    let (settings, full, summary) = estimate_held(env, coeffs, &rollouts, scalars, &held, dim)?;
    drop(held);
    let path = in_stage_coeffs_path(&env.run.root, env.iter);
    if env.writes() {
        atomic_write(&path, |w| {
            deltarl_coeffs::shell::write(w, &settings, &full, &summary, env.meta())
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // 2. Under a sketch: the coefficients it gives, against full width's.
    let sketch = match persist {
        Stored::Projected { dim: k } => {
            let sketched = HeldVectors::of(&stored, precision)?;
            let (_, c, _) = estimate_held(env, coeffs, &rollouts, scalars, &sketched, k)?;
            Some(agreement(k, &full, &c)?)
        }
        Stored::Full | Stored::None => None,
    };
    // 3. The file: each pass's rows encoded as a piece where they are; among several
    //    processes the pieces go to rank 0 in pass order, which copies them in.
    let pieces = split(stored, &piece_rows).map(|p| Ok(encode_piece(&p)?));
    let Some(stats) = super::file::write_pieces(env, pass, hidden, persist, passes.len(), pieces)?
    else {
        return Ok(None);
    };
    let mut ran = Ran::new(stats.rows, stats.summary(sketch));
    ran.outputs.push(path);
    Ok(Some(ran))
}

/// The coefficients from held vectors: this process's (of `dim` dimensions), with
/// `scalars` holding every response's per-token scalars; among several processes each
/// pass's results are exchanged with the other ranks'.
fn estimate_held(
    env: &Env,
    coeffs: &deltarl_coeffs::Settings,
    rollouts: &[RolloutRow],
    scalars: &[FeatureRow],
    held: &HeldVectors,
    dim: usize,
) -> Result<(
    deltarl_coeffs::Settings,
    Vec<CoeffRow>,
    deltarl_schemas::CoeffsSummary,
)> {
    match env.ranks {
        None => crate::stage::coeffs::estimate_rows(
            env,
            coeffs,
            rollouts,
            scalars,
            Source::Held(held),
            dim,
        ),
        Some(g) => {
            let mut share = |local: &[u8]| {
                g.all_gather_bytes(local)
                    .map_err(|e| deltarl_coeffs::Error::Exchange(format!("{e:#}")))
            };
            let source = Source::Shared(held, &mut share);
            crate::stage::coeffs::estimate_rows(env, coeffs, rollouts, scalars, source, dim)
        }
    }
}

/// Every rank's rows without their vectors (the per-token scalars), on every rank.
fn gather_scalars(g: &deltarl_dist::Group, rows: &[FeatureRow]) -> Result<Vec<FeatureRow>> {
    let stripped: Vec<FeatureRow> = rows.iter().map(FeatureRow::without_vectors).collect();
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
/// `dim` values at `precision` of every response token this process computes
/// (`rollouts`), and its sketch's in f32, against what the kernel says is available now,
/// with a quarter left for the model and the estimate.
fn check_memory(
    rollouts: &[&RolloutRow],
    dim: usize,
    precision: Precision,
    persist: Stored,
) -> Result<()> {
    let tokens: u64 = rollouts
        .iter()
        .map(|r| r.response_token_ids.len() as u64)
        .sum();
    let per_token = (precision.width() * dim + 4 * persist.dim(dim)) as u64;
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
