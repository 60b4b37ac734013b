//! The features stage: per-token gradient proxies (`docs/method.md` §3).
//!
//! For response token `y_t`, `h_t` is the final normed hidden state that predicts it and
//! `p_t = pi(y_t | prefix)` at the rollout temperature. The derivative of `log p_t` with
//! respect to the LM-head row of `y_t` is `(1 - p_t) h_t` (the logit of `y_t` is
//! `w_y . h_t / T`, so the row gradient is `(1 - p_t) h_t / T`; the constant `1/T` is
//! dropped as in the authors' code, `docs/method.md` §3), hence the default proxy `v_t = (1 - p_t) h_t`.

mod settings;
mod sketch;
pub use settings::{Job, Proxy, Settings};
pub use sketch::{sketch, Stored};

use std::io::Write;

use deltarl_model::Qwen3;
use deltarl_schemas::seed::Rng;
use deltarl_schemas::{FeatureRow, FileMeta, PieceWriter, RolloutRow, PERSIST_KEY};
use deltarl_teacher::{budget_chunks, head_chunk_tokens, token_stats};
use tch::{Device, Kind, Tensor};

/// Errors of the features stage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
    #[error("{key}: {message}", key = deltarl_schemas::ResponseKey { prompt_id, sample_idx: *sample_idx })]
    Row {
        prompt_id: String,
        sample_idx: u32,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The seeded Gaussian projection `[hidden, k]` with entries N(0, 1/k) (Johnson-
/// Lindenstrauss: squared distances are preserved in expectation), or None when
/// `hidden <= k`, for iteration `iter`.
pub fn projection(hidden: usize, s: &Settings, iter: u32) -> Option<Tensor> {
    let k = s.project_dim?;
    if hidden <= k {
        return None;
    }
    let mut rng = Rng::new(s.projection_seed(iter));
    let scale = 1.0 / (k as f64).sqrt();
    let data: Vec<f32> = (0..hidden * k)
        .map(|_| (rng.normal() * scale) as f32)
        .collect();
    Some(Tensor::from_slice(&data).view([hidden as i64, k as i64]))
}

fn to_vec(t: &Tensor) -> Result<Vec<f32>> {
    Ok(Vec::<f32>::try_from(
        t.to_kind(Kind::Float)
            .to_device(Device::Cpu)
            .contiguous()
            .view([-1]),
    )?)
}

/// The forward passes of one process, in order: consecutive rollouts, at most
/// `chunk_rows` of them and `chunk_tokens` padded tokens a pass. Under a [`Job`]'s shard, pass `c`
/// is rank `c % world`'s.
pub fn passes<'a>(s: &Settings, rollouts: &'a [RolloutRow]) -> Vec<Vec<&'a RolloutRow>> {
    let refs: Vec<&RolloutRow> = rollouts.iter().collect();
    let row_tokens = |r: &&RolloutRow| r.prompt_token_ids.len() + r.response_token_ids.len();
    budget_chunks(&refs, s.chunk_rows, s.chunk_tokens, row_tokens)
        .into_iter()
        .map(<[&RolloutRow]>::to_vec)
        .collect()
}

/// Pure core, collected: one feature row per rollout row, in the same order (with a
/// [`Job`]'s shard, the rows of its chunks only, in the same order). `progress` is told how many
/// responses each forward pass finished.
pub fn run(
    s: &Settings,
    job: Job,
    model: &Qwen3,
    rollouts: &[RolloutRow],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<FeatureRow>> {
    let mut out = Vec::with_capacity(rollouts.len());
    run_each(
        s,
        job,
        model,
        rollouts,
        &mut |rows| {
            out.extend(rows);
            Ok(())
        },
        progress,
    )?;
    Ok(out)
}

/// Pure core, pass by pass: `emit` gets each forward pass's rows as soon as they are
/// computed (in the order [`run`] returns them), so a caller can write them and hold no
/// more than one pass.
pub fn run_each(
    s: &Settings,
    job: Job,
    model: &Qwen3,
    rollouts: &[RolloutRow],
    emit: &mut dyn FnMut(Vec<FeatureRow>) -> Result<()>,
    progress: &mut dyn FnMut(usize),
) -> Result<()> {
    let device = model.lm_head_weight().device();
    let hidden = model.config.hidden_size;
    let proj = projection(hidden, s, job.iter).map(|p| p.to_device(device));
    let dim = proj.as_ref().map_or(hidden, |p| p.size()[1] as usize);
    for r in rollouts {
        if r.prompt_token_ids.is_empty() {
            return Err(Error::Row {
                prompt_id: r.prompt_id.clone(),
                sample_idx: r.sample_idx,
                message: "empty prompt_token_ids".into(),
            });
        }
        if let Some(&bad) = r
            .prompt_token_ids
            .iter()
            .chain(&r.response_token_ids)
            .find(|&&t| t as usize >= model.config.vocab_size)
        {
            return Err(Error::Row {
                prompt_id: r.prompt_id.clone(),
                sample_idx: r.sample_idx,
                message: format!("token id {bad} >= vocab_size {}", model.config.vocab_size),
            });
        }
    }
    let head_chunk = head_chunk_tokens(s.head_chunk_bytes, model.config.vocab_size);
    for (c, chunk) in passes(s, rollouts).into_iter().enumerate() {
        if !job.shard.owns(c) {
            continue;
        }
        let chunk_out = tch::no_grad(|| -> Result<Vec<FeatureRow>> {
            let pairs: Vec<(&[u32], &[u32])> = chunk
                .iter()
                .map(|r| {
                    (
                        r.prompt_token_ids.as_slice(),
                        r.response_token_ids.as_slice(),
                    )
                })
                .collect();
            let st = token_stats(model, &pairs, s.layout, s.temperature, head_chunk, device);
            let p = st.logprob.exp();
            // 3. The proxy: [N, H].
            let v = match s.proxy {
                Proxy::LmHeadRow => (-&p + 1.0).unsqueeze(1) * st.hidden.to_kind(Kind::Float),
                Proxy::Hidden => st.hidden.to_kind(Kind::Float),
            };
            // 4. Optional projection: [N, H] x [H, k] -> [N, k].
            let v = match &proj {
                Some(m) => v.matmul(m),
                None => v,
            };
            // 5. At the model's bf16 precision when asked (the hidden state is bf16 there
            //    already; this rounds the product with 1 - p once more).
            let v = if s.bf16_vectors() {
                v.to_kind(Kind::BFloat16).to_kind(Kind::Float)
            } else {
                v
            };
            let (feats, probs) = (to_vec(&v)?, to_vec(&p)?);
            let (logp, ent) = (to_vec(&st.logprob)?, to_vec(&st.entropy)?);
            let mut rows = Vec::with_capacity(chunk.len());
            let mut off = 0;
            for (r, &n) in chunk.iter().zip(&st.lengths) {
                // A non-finite feature or log-prob is never a result.
                let bad = |x: &[f32]| x.iter().any(|v| !v.is_finite());
                if bad(&feats[off * dim..(off + n) * dim])
                    || bad(&logp[off..off + n])
                    || bad(&ent[off..off + n])
                {
                    return Err(Error::Row {
                        prompt_id: r.prompt_id.clone(),
                        sample_idx: r.sample_idx,
                        message: "non-finite features or log-probs".into(),
                    });
                }
                rows.push(FeatureRow {
                    prompt_id: r.prompt_id.clone(),
                    sample_idx: r.sample_idx,
                    dim: dim as u32,
                    precision: s.precision(),
                    features: feats[off * dim..(off + n) * dim].to_vec(),
                    token_prob: probs[off..off + n].to_vec(),
                    logprob: logp[off..off + n].to_vec(),
                    entropy: ent[off..off + n].to_vec(),
                });
                off += n;
            }
            Ok(rows)
        })?;
        emit(chunk_out)?;
        progress(chunk.len());
    }
    Ok(())
}

/// The vector dimension of the rows for a model of hidden size `hidden`: `k` when the
/// features are projected, else `hidden`.
pub fn output_dim(hidden: usize, s: &Settings) -> usize {
    match s.project_dim {
        Some(k) if hidden > k => k,
        _ => hidden,
    }
}

/// The stage's Parquet shell: a writer of features.parquet for a model of hidden size
/// `hidden` that takes each forward pass's rows as one piece, encoded where they were
/// computed ([`deltarl_schemas::encode_piece`]; the file's row groups are the passes', so
/// it is the same whichever process computed which pass);
/// records the settings, k and whether the vectors are projected (the vectors' column
/// states its own dimension and precision), and, when it keeps not every vector
/// (`stored`), what it keeps and the sketch's seed.
pub fn writer<W: Write + Send>(
    s: &Settings,
    iter: u32,
    hidden: usize,
    stored: Stored,
    out: W,
    meta: FileMeta,
) -> PieceWriter<FeatureRow, W> {
    let k = stored.dim(output_dim(hidden, s));
    let mut meta = meta
        .with(
            "settings",
            serde_json::to_string(&s.recorded(iter)).unwrap_or_default(),
        )
        .with("k", k.to_string())
        .with("projected", (k != hidden).to_string());
    match stored {
        Stored::Full => {}
        Stored::Projected { .. } => {
            meta = meta
                .with(PERSIST_KEY, stored.persist().name())
                .with("sketch_seed", s.sketch_seed(iter).to_string());
        }
        Stored::None => meta = meta.with(PERSIST_KEY, stored.persist().name()),
    }
    PieceWriter::new(out, &meta)
}
