//! The coeffs stage's Parquet shell: join rollouts, scores and features on
//! (`prompt_id`, `sample_idx`), estimate, write coeffs.parquet.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use deltarl_schemas::{
    read_path, vector_layout, write_table, Batcher, CoeffRow, CoeffsSummary, FeatureProbs,
    FeatureRow, FeatureScalars, FileMeta, Index, Keyed, Precision, RolloutRow, ScoreRow,
    VectorFile,
};

use crate::{
    estimate_sorted, fixed_order, Error, Estimator, Response, Result, Settings, Vectors, Visit,
};

/// Decoded vectors a batch of a pass holds at most (one response when a single one is
/// larger): enough responses to keep every core busy at small lengths, a bounded buffer at
/// the paper's (a 20k-token response is 335 MB of f32 at 4,096 dims).
pub const VECTOR_BATCH_BYTES: usize = 16 << 20;

/// The vectors of features.parquet, read from the file once a pass (`VectorFile`); the
/// rows are placed by key at their position in the estimator's order (rows of other keys
/// skipped).
pub struct FileVectors {
    file: VectorFile,
    position: Vec<Option<usize>>,
    /// How many responses the estimator has (rows of the file may be more).
    responses: usize,
}

impl FileVectors {
    /// The vectors in `path` of the responses `sorted`, in the estimator's order
    /// ([`fixed_order`]).
    pub fn new(path: &Path, sorted: &[Response<'_>]) -> Result<Self> {
        let file = VectorFile::open(path)?;
        let position = positions(file.keys().iter().map(|(p, s)| (p.as_str(), *s)), sorted);
        Ok(FileVectors {
            file,
            position,
            responses: sorted.len(),
        })
    }

    /// Whether the file stores each response's vector sum (DelTA then needs one pass less).
    pub fn sums_stored(&self) -> bool {
        self.file.sums().is_some()
    }

    /// Whether passes copy the bytes straight from the file (its writer's layout).
    pub fn is_direct(&self) -> bool {
        self.file.is_direct()
    }
}

impl Vectors for FileVectors {
    fn pass(&mut self, visit: &mut Visit<'_>) -> Result<()> {
        let position = &self.position;
        self.file.pass(VECTOR_BATCH_BYTES, &mut |batch| {
            let items: Vec<(usize, &[f32])> = batch
                .iter()
                .filter_map(|&(row, v)| position[row].map(|k| (k, v)))
                .collect();
            visit(&items)
        })
    }

    fn sums(&self) -> Option<Vec<&[f64]>> {
        let stored = self.file.sums()?;
        let mut out: Vec<Option<&[f64]>> = vec![None; self.responses];
        for (row, sum) in stored.iter().enumerate() {
            if let Some(k) = self.position[row] {
                out[k] = Some(sum.as_slice());
            }
        }
        out.into_iter().collect()
    }
}

/// Where each of `keys` (rows of a file or in memory, in their order) sits in the
/// estimator's order `sorted`: `None` for a key the estimator has no response of.
fn positions<'k>(
    keys: impl Iterator<Item = (&'k str, u32)>,
    sorted: &[Response<'_>],
) -> Vec<Option<usize>> {
    let at: HashMap<(&str, u32), usize> = sorted
        .iter()
        .enumerate()
        .map(|(k, r)| ((r.prompt_id, r.sample_idx), k))
        .collect();
    keys.map(|key| at.get(&key).copied()).collect()
}

/// How processes that each hold some responses' vectors exchange a pass's results: this
/// process's bytes in, every process's out (an all-gather).
pub type Share<'s> = dyn FnMut(&[u8]) -> Result<Vec<Vec<u8>>> + 's;

/// Responses' vectors held in memory (the features stage's own, before anything is
/// written) at the precision the pass computed them at: a bf16 model's take 2 bytes a
/// value, losing nothing (each is a bf16 value), half what f32 would hold. A pass widens
/// them batch by batch, as a file's are.
pub struct HeldVectors {
    precision: Precision,
    keys: Vec<(String, u32)>,
    packed: Vec<Vec<u8>>,
}

impl HeldVectors {
    pub fn new(precision: Precision) -> Self {
        HeldVectors {
            precision,
            keys: Vec::new(),
            packed: Vec::new(),
        }
    }

    /// The vectors of `rows`.
    pub fn of(rows: &[FeatureRow], precision: Precision) -> Result<Self> {
        let mut held = HeldVectors::new(precision);
        for r in rows {
            held.push(r)?;
        }
        Ok(held)
    }

    /// Holds `row`'s vectors, which must be at this precision (a value it cannot keep
    /// exactly is refused, naming the row).
    pub fn push(&mut self, row: &FeatureRow) -> Result<()> {
        let mut bytes = Vec::new();
        self.precision
            .encode(&row.features, &mut bytes)
            .map_err(|problem| Error::Vectors {
                prompt_id: row.prompt_id.clone(),
                sample_idx: row.sample_idx,
                precision: self.precision,
                problem,
            })?;
        self.keys.push((row.prompt_id.clone(), row.sample_idx));
        self.packed.push(bytes);
        Ok(())
    }

    /// The bytes the vectors take.
    pub fn bytes(&self) -> usize {
        self.packed.iter().map(Vec::len).sum()
    }
}

/// The vectors of [`HeldVectors`], placed by key at their position in the estimator's
/// order as [`FileVectors`] places a file's, widened in batches of at most
/// [`VECTOR_BATCH_BYTES`] of f32, no stored sums (DelTA then takes them in a pass, in the
/// order a file's are taken, so the coefficients are those from the file bit for bit).
/// With a [`Share`], the vectors are this process's share and every pass's results are
/// exchanged with the other processes'.
pub struct RowVectors<'r, 's> {
    held: &'r HeldVectors,
    position: Vec<Option<usize>>,
    floats: Vec<f32>,
    share: Option<&'r mut Share<'s>>,
}

impl<'r, 's> RowVectors<'r, 's> {
    /// The vectors `held` of the responses `sorted`, in the estimator's order.
    pub fn new(held: &'r HeldVectors, sorted: &[Response<'_>]) -> Self {
        let position = positions(held.keys.iter().map(|(p, s)| (p.as_str(), *s)), sorted);
        RowVectors {
            held,
            position,
            floats: Vec::new(),
            share: None,
        }
    }

    /// The vectors as this process's share of the responses, results exchanged by `share`.
    pub fn shared(mut self, share: &'r mut Share<'s>) -> Self {
        self.share = Some(share);
        self
    }
}

impl Vectors for RowVectors<'_, '_> {
    fn pass(&mut self, visit: &mut Visit<'_>) -> Result<()> {
        let held = self.held;
        let mut batch = Batcher::new(VECTOR_BATCH_BYTES, &mut self.floats, visit);
        for (bytes, k) in held.packed.iter().zip(&self.position) {
            if let Some(k) = *k {
                batch.push(k, bytes, held.precision)?;
            }
        }
        batch.finish()
    }

    fn shared(&self) -> bool {
        self.share.is_some()
    }

    fn share(&mut self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self.share.as_mut() {
            Some(share) => share(local),
            None => Ok(vec![local.to_vec()]),
        }
    }
}

/// Where the token vectors of an estimate come from.
pub enum Source<'a, 's> {
    /// features.parquet, read once a pass.
    File(&'a Path),
    /// The vectors held in memory.
    Held(&'a HeldVectors),
    /// This process's share of the vectors, each pass's results exchanged with the other
    /// processes' by the [`Share`] (every process estimates every coefficient).
    Shared(&'a HeldVectors, &'a mut Share<'s>),
}

/// The stage's work: coefficient rows in rollout order plus the summary, the vectors read
/// from the features file pass by pass (`features_scalars` are its entropies,
/// `features_probs` its token probabilities, `dim` its vector dimension); the estimation
/// itself is [`estimate_sorted`]. `decode` turns token ids into text for the extreme-token
/// table and, for the oracles, for the task's token labels.
#[allow(clippy::too_many_arguments)]
pub fn run(
    settings: &Settings,
    rollouts: &[RolloutRow],
    scores: &[ScoreRow],
    features_scalars: &[FeatureScalars],
    features_probs: &[FeatureProbs],
    dim: usize,
    source: Source<'_, '_>,
    decode: &dyn Fn(&[u32]) -> Result<String>,
) -> Result<(Vec<CoeffRow>, CoeffsSummary)> {
    let score_of = Index::new(scores);
    let feats = Index::new(features_scalars);
    let probs = Index::new(features_probs);
    // The oracles' token labels: each token decoded alone, the task's grammar applied.
    let pieces = |r: &RolloutRow| -> Result<Vec<String>> {
        r.response_token_ids.iter().map(|&t| decode(&[t])).collect()
    };
    // Every response labelled by one of the task's grammars (a task without it: none).
    let each = |grammar: &dyn Fn(&[&str]) -> Option<Vec<bool>>| -> Result<Vec<Vec<bool>>> {
        rollouts
            .iter()
            .map(|r| {
                let pieces = pieces(r)?;
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                Ok(grammar(&pieces).unwrap_or_default())
            })
            .collect()
    };
    let labels: Vec<Vec<bool>> = match settings.estimator {
        Estimator::OracleTokens { task, .. } => each(&|p| task.connective_tokens(p))?,
        Estimator::OracleFiller { task, .. } => each(&|p| task.filler_tokens(p))?,
        Estimator::OraclePrefix { task, .. } => rollouts
            .iter()
            .map(|r| {
                let pieces = pieces(r)?;
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                task.correct_prefix_tokens(&r.prompt_id, &pieces)
                    .ok_or_else(|| {
                        Error::Input(format!(
                            "{}: prompt id {:?} is not a problem of {} (oracle-prefix finds a \
                             solution's first error only on the built-in arithmetic tasks)",
                            r.response(),
                            r.prompt_id,
                            task.source()
                        ))
                    })
            })
            .collect::<Result<_>>()?,
        Estimator::Uniform
        | Estimator::TopEntropy { .. }
        | Estimator::Delta(_)
        | Estimator::Ktae(_) => {
            vec![Vec::new(); rollouts.len()]
        }
    };
    let mut responses = Vec::with_capacity(rollouts.len());
    for (r, shared) in rollouts.iter().zip(&labels) {
        let at = || r.response().to_string();
        let s = score_of.get(r, "scores").map_err(Error::Input)?;
        let f = feats.get(r, "features").map_err(Error::Input)?;
        let p = probs.get(r, "features").map_err(Error::Input)?;
        if f.entropy.len() != r.response_token_ids.len()
            || p.token_prob.len() != r.response_token_ids.len()
        {
            return Err(Error::Input(format!(
                "{}: {} feature vectors for {} response tokens",
                at(),
                f.entropy.len(),
                r.response_token_ids.len()
            )));
        }
        responses.push(Response {
            prompt_id: &r.prompt_id,
            sample_idx: r.sample_idx,
            advantage: s.advantage,
            reward: s.reward,
            kept: s.kept,
            token_ids: &r.response_token_ids,
            features: &[],
            entropy: &f.entropy,
            token_prob: &p.token_prob,
            shared,
        });
    }
    let order = fixed_order(&responses)?;
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| responses[i]).collect();
    let out = match source {
        Source::File(path) => estimate_sorted(
            settings,
            dim,
            &sorted,
            &mut FileVectors::new(path, &sorted)?,
        ),
        Source::Held(held) => {
            estimate_sorted(settings, dim, &sorted, &mut RowVectors::new(held, &sorted))
        }
        Source::Shared(held, share) => {
            let mut src = RowVectors::new(held, &sorted).shared(share);
            estimate_sorted(settings, dim, &sorted, &mut src)
        }
    }?
    .unsort(&order);
    // Never a result: a non-finite coefficient or shift (from non-finite features or
    // advantages).
    let shifts = out.shift.as_deref().unwrap_or(&[]);
    for (i, (r, c)) in rollouts.iter().zip(&out.coeffs).enumerate() {
        let shift = shifts.get(i).map_or(&[][..], Vec::as_slice);
        if c.iter().chain(shift).any(|x| !x.is_finite()) {
            return Err(Error::Input(format!(
                "{}: non-finite coefficients",
                r.response()
            )));
        }
    }
    let mut summary = out.summary;
    let index: std::collections::HashMap<(&str, u32), &RolloutRow> =
        rollouts.iter().map(|r| (r.key(), r)).collect();
    for t in summary.top.iter_mut().chain(summary.bottom.iter_mut()) {
        if let Some(r) = index.get(&(t.prompt_id.as_str(), t.sample_idx)) {
            let ids = &r.response_token_ids;
            t.text = decode(&ids[t.position..=t.position])?;
            t.context = decode(&ids[t.position.saturating_sub(8)..=t.position])?;
        }
    }
    let mut shifts = out.shift.map(Vec::into_iter);
    let rows = rollouts
        .iter()
        .zip(out.coeffs)
        .zip(&responses)
        .map(|((r, coeff), resp)| CoeffRow {
            prompt_id: r.prompt_id.clone(),
            sample_idx: r.sample_idx,
            coeff,
            advantage: resp.advantage,
            shift: shifts.as_mut().and_then(Iterator::next),
        })
        .collect();
    Ok((rows, summary))
}

/// Thin Parquet shell around [`run`]: rollouts and scores read whole, of features.parquet
/// the entropies read whole and the vectors streamed, a bounded batch at a time, once a
/// pass (never the whole file in memory). The summary and settings go into the file
/// metadata. Returns the number of rows written and the summary.
pub fn run_io<W: Write + Send>(
    settings: &Settings,
    rollouts: &Path,
    scores: &Path,
    features: &Path,
    out: W,
    meta: FileMeta,
    decode: &dyn Fn(&[u32]) -> Result<String>,
) -> Result<(usize, CoeffsSummary)> {
    let rollouts: Vec<RolloutRow> = read_path(rollouts)?.0;
    let scores: Vec<ScoreRow> = read_path(scores)?.0;
    let scalars: Vec<FeatureScalars> = read_path(features)?.0;
    let probs: Vec<FeatureProbs> = read_path(features)?.0;
    let dim = vector_layout(features, "features")?.map_or(0, |l| l.dim);
    let (rows, summary) = run(
        settings,
        &rollouts,
        &scores,
        &scalars,
        &probs,
        dim,
        Source::File(features),
        decode,
    )?;
    write(out, settings, &rows, &summary, meta)?;
    Ok((rows.len(), summary))
}

/// Writes a coefficient table: the rows, with the settings and the summary in the file
/// metadata (what [`read_back`] reads).
pub fn write<W: Write + Send>(
    out: W,
    settings: &Settings,
    rows: &[CoeffRow],
    summary: &CoeffsSummary,
    meta: FileMeta,
) -> Result<()> {
    let meta = meta
        .with(
            "settings",
            serde_json::to_string(settings).unwrap_or_default(),
        )
        .with(
            "summary",
            serde_json::to_string(summary).unwrap_or_default(),
        );
    write_table(out, rows, &meta)?;
    Ok(())
}

/// A coefficient table [`write`] wrote, read back (its rows and summary) when it was
/// estimated under `settings`; else `Err` of the settings it records, as JSON, for the
/// caller to name.
pub fn read_back(
    path: &Path,
    settings: &Settings,
) -> Result<std::result::Result<(Vec<CoeffRow>, CoeffsSummary), String>> {
    let (rows, meta) = read_path::<CoeffRow>(path)?;
    let recorded = meta.extra.get("settings").cloned().unwrap_or_default();
    if recorded != serde_json::to_string(settings).unwrap_or_default() {
        return Ok(Err(recorded));
    }
    let summary = meta
        .extra
        .get("summary")
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| {
            Error::Input(format!(
                "{}: no readable coefficient summary in its metadata",
                path.display()
            ))
        })?;
    Ok(Ok((rows, summary)))
}
