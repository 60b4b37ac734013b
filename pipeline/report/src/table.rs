//! The per-iteration table: one polars lazy scan per completed stage file, aggregated per
//! (run, iteration) and left-joined onto the list of iterations, so an iteration whose later
//! stages have not run yet still gets a row (with nulls).

use std::path::{Path, PathBuf};

use deltarl_schemas::{layout, CoeffsSummary, Manifest, Stage, StageSummary, UpdateSummary};
use polars::prelude::*;

use crate::metric::{Metric, COLUMNS};
use crate::{ReportError, Result};

/// What the report reads from one stage's table and how it aggregates it per iteration.
struct Spec {
    stage: Stage,
    /// Columns the scan projects (and requires).
    columns: &'static [&'static str],
    /// A list column flattened to one row per token before aggregating, if any.
    explode: Option<&'static str>,
    aggs: fn() -> Vec<Expr>,
}

fn f64_of(name: &str) -> Expr {
    col(name).cast(DataType::Float64)
}

/// p90 - p10 (linear interpolation, numpy's default) of the token coefficients on one side.
fn spread(side: Expr) -> Expr {
    let q = |p: f64| {
        f64_of("coeff")
            .filter(side.clone())
            .quantile(lit(p), QuantileMethod::Linear)
    };
    q(0.9) - q(0.1)
}

const SPECS: [Spec; 6] = [
    Spec {
        stage: Stage::Rollout,
        columns: &["finish_reason"],
        explode: None,
        aggs: || {
            vec![col("finish_reason")
                .eq(lit("length"))
                .cast(DataType::Float64)
                .mean()
                .alias(Metric::Truncated.name())]
        },
    },
    Spec {
        stage: Stage::Score,
        columns: &["reward", "correct", "response_len", "kept"],
        explode: None,
        aggs: || {
            vec![
                f64_of("reward").mean().alias(Metric::RewardMean.name()),
                f64_of("correct").mean().alias(Metric::Accuracy.name()),
                f64_of("response_len")
                    .mean()
                    .alias(Metric::ResponseLen.name()),
                f64_of("kept").mean().alias(Metric::Kept.name()),
            ]
        },
    },
    Spec {
        stage: Stage::Features,
        columns: &["entropy"],
        explode: Some("entropy"),
        // Token mean: every generated token counts once, as in the loss's token-mean.
        aggs: || vec![f64_of("entropy").mean().alias(Metric::Entropy.name())],
    },
    Spec {
        stage: Stage::Coeffs,
        columns: &["coeff", "advantage"],
        explode: Some("coeff"),
        aggs: || {
            vec![
                f64_of("coeff").mean().alias(Metric::CoeffMean.name()),
                spread(col("advantage").gt(lit(0.0))).alias(Metric::CoeffSpreadPos.name()),
                spread(col("advantage").lt(lit(0.0))).alias(Metric::CoeffSpreadNeg.name()),
            ]
        },
    },
    Spec {
        stage: Stage::Update,
        columns: &["clip_frac", "kl", "grad_norm"],
        explode: None,
        // Mean over the optimizer steps of the iteration.
        aggs: || {
            vec![
                f64_of("clip_frac").mean().alias(Metric::ClipFrac.name()),
                f64_of("kl").mean().alias(Metric::Kl.name()),
                f64_of("grad_norm").mean().alias(Metric::GradNorm.name()),
            ]
        },
    },
    Spec {
        stage: Stage::Eval,
        columns: &["correct"],
        explode: None,
        aggs: || vec![f64_of("correct").mean().alias(Metric::EvalAccuracy.name())],
    },
];

/// A stage counts once its manifest is written (the last step of a stage) and no upstream
/// rerun has marked it stale.
pub(crate) fn complete(run: &Path, iter: u32, stage: Stage) -> bool {
    layout::manifest_path(run, iter, stage).is_file()
        && !layout::stale_path(run, iter, stage).exists()
}

/// A complete stage whose output is still on disk: `deltarl prune` removes old iterations'
/// features (and checkpoints) but keeps their manifests, so a pruned iteration's columns
/// read as missing instead of failing the report.
pub(crate) fn readable(run: &Path, iter: u32, stage: Stage) -> bool {
    complete(run, iter, stage) && layout::output_path(run, iter, stage).is_file()
}

pub(crate) fn polars_err(file: &Path) -> impl Fn(PolarsError) -> ReportError + '_ {
    move |e| ReportError::Polars {
        file: file.display().to_string(),
        message: e.to_string(),
    }
}

/// A lazy scan of one stage file, checked (schema version, writing stage, columns) before
/// any data is read, tagged with its run and iteration.
fn scan(path: &Path, spec: &Spec, run_idx: u32, run: &str, iter: u32) -> Result<LazyFrame> {
    let meta = deltarl_schemas::read_meta(path)?;
    if meta.stage != spec.stage.name() {
        return Err(ReportError::Content {
            file: path.display().to_string(),
            message: format!(
                "written by stage {:?}, expected {:?}",
                meta.stage, spec.stage
            ),
        });
    }
    let (lf, schema) = lazy_scan(path)?;
    if let Some(missing) = spec.columns.iter().find(|c| !schema.contains(c)) {
        return Err(ReportError::Content {
            file: path.display().to_string(),
            message: format!("missing column {missing:?}"),
        });
    }
    let mut lf = lf.select(spec.columns.iter().map(|c| col(*c)).collect::<Vec<_>>());
    if let Some(list) = spec.explode {
        lf = lf.explode(
            cols([list]),
            ExplodeOptions {
                empty_as_null: false,
                keep_nulls: false,
            },
        );
    }
    Ok(lf.with_columns([
        lit(run_idx).alias("run_idx"),
        lit(run).alias("run"),
        lit(iter).alias("iter"),
    ]))
}

/// A lazy scan of a Parquet file and its schema (read from the footer, no data).
pub(crate) fn lazy_scan(path: &Path) -> Result<(LazyFrame, SchemaRef)> {
    let name = path.to_str().ok_or_else(|| ReportError::Content {
        file: path.display().to_string(),
        message: "path is not valid UTF-8".into(),
    })?;
    let mut lf = LazyFrame::scan_parquet(PlRefPath::from(name), ScanArgsParquet::default())
        .map_err(polars_err(path))?;
    let schema = lf.collect_schema().map_err(polars_err(path))?;
    Ok((lf, schema))
}

/// The summary of a complete stage's manifest, as its type (`None` before it is complete).
fn summary_of<S: StageSummary>(run: &Path, iter: u32) -> Result<Option<S>> {
    if !complete(run, iter, S::STAGE) {
        return Ok(None);
    }
    let path = layout::manifest_path(run, iter, S::STAGE);
    let Some(m) = Manifest::read(&path)? else {
        return Ok(None);
    };
    m.summary_of().map(Some).map_err(|e| ReportError::Content {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}

/// The summaries of one iteration the batch statistics read, each manifest read once
/// (`None` for a stage not complete).
struct Summaries {
    coeffs: Option<CoeffsSummary>,
    update: Option<UpdateSummary>,
}

impl Summaries {
    fn read(run: &Path, iter: u32) -> Result<Self> {
        Ok(Summaries {
            coeffs: summary_of(run, iter)?,
            update: summary_of(run, iter)?,
        })
    }
}

/// One batch statistic: a report column and how it is read from the typed summaries.
struct BatchStat {
    column: Metric,
    read: fn(&Summaries) -> Option<f64>,
}

/// Batch properties that are not aggregates of rows come from manifest summaries, read
/// through their types (a renamed field breaks the build here): the centroid cosines and
/// the gradient-weighted mean coefficient per side, Σ c (1 − p) |A| / Σ (1 − p) |A|
/// (coeffs), and the sampler/trainer log-prob mismatch (update).
const BATCH_STATS: [BatchStat; 6] = [
    BatchStat {
        column: Metric::CosBefore,
        read: |s| s.coeffs.as_ref().map(|c| c.cos_before),
    },
    BatchStat {
        column: Metric::CosAfter,
        read: |s| s.coeffs.as_ref().map(|c| c.cos_after),
    },
    BatchStat {
        column: Metric::CoeffGradPos,
        read: |s| s.coeffs.as_ref().map(|c| c.grad_coeff_pos),
    },
    BatchStat {
        column: Metric::CoeffGradNeg,
        read: |s| s.coeffs.as_ref().map(|c| c.grad_coeff_neg),
    },
    BatchStat {
        column: Metric::MismatchMaxAbs,
        read: |s| s.update.as_ref().map(|u| u.mismatch.max_abs),
    },
    BatchStat {
        column: Metric::MismatchK3,
        read: |s| s.update.as_ref().map(|u| u.mismatch.k3),
    },
];

/// The per-iteration table of the given runs, in the order given, iterations ascending.
pub fn iteration_table(runs_dir: &Path, runs: &[String]) -> Result<DataFrame> {
    if runs.is_empty() {
        return Err(ReportError::NoRuns);
    }
    // (run_idx, run, iter, batch statistics) for every iteration directory.
    let (mut idx, mut names, mut iters) = (Vec::new(), Vec::new(), Vec::new());
    let mut stats: Vec<Vec<Option<f64>>> = BATCH_STATS.iter().map(|_| Vec::new()).collect();
    let mut scans: Vec<Vec<LazyFrame>> = SPECS.iter().map(|_| Vec::new()).collect();
    for (i, name) in runs.iter().enumerate() {
        layout::check_run_name(name).map_err(ReportError::RunName)?;
        if runs[..i].contains(name) {
            return Err(ReportError::RepeatedRun(name.clone()));
        }
        let run: PathBuf = runs_dir.join(name);
        if !run.is_dir() {
            return Err(ReportError::MissingRun(run.display().to_string()));
        }
        let its = layout::iterations(&run);
        if its.is_empty() {
            return Err(ReportError::NoIterations(run.display().to_string()));
        }
        for it in its {
            idx.push(i as u32);
            names.push(name.clone());
            iters.push(it);
            let summaries = Summaries::read(&run, it)?;
            for (stat, column) in BATCH_STATS.iter().zip(&mut stats) {
                column.push((stat.read)(&summaries));
            }
            for (spec, acc) in SPECS.iter().zip(&mut scans) {
                if readable(&run, it, spec.stage) {
                    let path = layout::output_path(&run, it, spec.stage);
                    acc.push(scan(&path, spec, i as u32, name, it)?);
                }
            }
        }
    }
    let mut columns = vec![
        Column::new("run_idx".into(), idx),
        Column::new("run".into(), names),
        Column::new("iter".into(), iters),
    ];
    for (stat, values) in BATCH_STATS.iter().zip(stats) {
        columns.push(Column::new(stat.column.name().into(), values));
    }
    let skeleton = DataFrame::new_infer_height(columns).map_err(|e| ReportError::Polars {
        file: runs_dir.display().to_string(),
        message: e.to_string(),
    })?;
    let keys = || [col("run_idx"), col("run"), col("iter")];
    let mut table = skeleton.lazy();
    for (spec, frames) in SPECS.iter().zip(scans) {
        if frames.is_empty() {
            continue;
        }
        let per_iter = concat(frames, UnionArgs::default())
            .map_err(polars_err(runs_dir))?
            .group_by(keys())
            .agg((spec.aggs)());
        table = table.join(per_iter, keys(), keys(), JoinArgs::new(JoinType::Left));
    }
    let schema = table.collect_schema().map_err(polars_err(runs_dir))?;
    let select: Vec<Expr> = COLUMNS
        .iter()
        .map(|c| {
            // A stage no iteration has reached yet contributes nulls.
            if schema.contains(c) {
                col(*c)
            } else {
                lit(NULL).cast(DataType::Float64).alias(*c)
            }
        })
        .collect();
    table
        .sort(["run_idx", "iter"], SortMultipleOptions::default())
        .select(select)
        .collect()
        .map_err(polars_err(runs_dir))
}

/// The value of a metric column at a row, `None` for nulls.
pub fn value(df: &DataFrame, column: &str, row: usize) -> Option<f64> {
    df.column(column)
        .ok()
        .and_then(|c| c.get(row).ok())
        .and_then(|v| v.extract::<f64>())
        .filter(|v| v.is_finite())
}
