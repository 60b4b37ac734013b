//! features.parquet as it is written: each pass's rows encoded as a piece, the pieces
//! copied into the file in pass order (among several processes, streamed to rank 0).

use anyhow::Result;

use deltarl_features::Stored;
use deltarl_schemas::{read_table, FeatureScalars, FeaturesSummary, SketchAgreement, Stage};

use crate::stage::env::Env;

/// Writes features.parquet from its `passes` pieces (each pass's rows as stored, encoded),
/// in pass order: in one process `pieces` are every pass's; among several, this rank's
/// (its passes' in order), streamed to rank 0, which writes the file. The summary's sums,
/// where this process wrote the file.
pub(super) fn write_pieces(
    env: &Env,
    s: &deltarl_features::Settings,
    hidden: usize,
    stored: Stored,
    passes: usize,
    pieces: impl Iterator<Item = Result<Vec<u8>>>,
) -> Result<Option<Stats>> {
    match env.ranks {
        None => write_file(env, s, hidden, stored, |sink| {
            for (c, p) in pieces.enumerate() {
                sink(p?, &format!("pass {c}"))?;
            }
            Ok(())
        })
        .map(Some),
        Some(g) if env.writes() => write_file(env, s, hidden, stored, |sink| {
            crate::ranks::stream_to_rank0(g, passes, pieces, &mut |b, what| Ok(sink(b, what)?))
        })
        .map(Some),
        Some(g) => {
            crate::ranks::stream_to_rank0(g, passes, pieces, &mut |_, _| Ok(()))?;
            Ok(None)
        }
    }
}

/// Writes features.parquet: `fill` hands each encoded piece, in pass order, to the sink,
/// which copies its bytes into the file and takes the summary's sums from its scalars.
pub(super) fn write_file(
    env: &Env,
    s: &deltarl_features::Settings,
    hidden: usize,
    stored: Stored,
    fill: impl FnOnce(&mut dyn FnMut(Vec<u8>, &str) -> deltarl_schemas::Result<()>) -> Result<()>,
) -> Result<Stats> {
    let dim = stored.dim(deltarl_features::output_dim(hidden, s));
    let mut stats = Stats::default();
    env.write_output(Stage::Features, |w| -> Result<()> {
        let mut out = deltarl_features::writer(s, env.iter, hidden, stored, w, env.meta());
        fill(&mut |bytes, what| {
            stats.add(&bytes, what, dim)?;
            out.append(bytes, what)
        })?;
        out.finish()?;
        Ok(())
    })?;
    Ok(stats)
}

/// The manifest summary's sums, taken as rows pass by.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) rows: usize,
    tokens: usize,
    dim: u32,
    entropy: f64,
}

impl Stats {
    pub(super) fn summary(&self, sketch: Option<SketchAgreement>) -> FeaturesSummary {
        FeaturesSummary {
            tokens: self.tokens,
            dim: self.dim,
            entropy_mean: self.entropy / self.tokens.max(1) as f64,
            sketch,
        }
    }

    /// A piece's rows, from its bytes: only the entropies are decoded (the vectors of
    /// `dim` values are copied into the file, never read), summed token by token in file
    /// order.
    fn add(&mut self, bytes: &[u8], what: &str, dim: usize) -> deltarl_schemas::Result<()> {
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
}
