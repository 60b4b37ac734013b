//! Accuracy broken down per iteration by benchmark and `data_source`: training responses
//! (scores.parquet, benchmark `train`) and held-out answers (eval.parquet, one benchmark per
//! file of `[eval] benchmarks` plus the built-in task's split).

use std::path::Path;

use deltarl_schemas::{layout, Stage};
use polars::prelude::*;

use crate::table::{lazy_scan, polars_err, readable};
use crate::Result;

/// The columns of the breakdown, in order.
pub const BREAKDOWN_COLUMNS: [&str; 6] = [
    "run",
    "iter",
    "benchmark",
    "data_source",
    "responses",
    "accuracy",
];

/// One stage file as (benchmark, data_source, correct) rows tagged with run and iteration.
/// Files written before `data_source` existed give null sources.
fn scan(path: &Path, stage: Stage, run_idx: u32, run: &str, iter: u32) -> Result<LazyFrame> {
    let (lf, schema) = lazy_scan(path)?;
    let source = if schema.contains("data_source") {
        col("data_source")
    } else {
        lit(NULL).cast(DataType::String).alias("data_source")
    };
    let benchmark = match stage {
        Stage::Eval => col("benchmark"),
        _ => lit("train").alias("benchmark"),
    };
    Ok(lf.select([
        lit(run_idx).alias("run_idx"),
        lit(run).alias("run"),
        lit(iter).alias("iter"),
        benchmark,
        source,
        col("correct").cast(DataType::Float64),
    ]))
}

/// The breakdown of the given runs: one row per (run, iteration, benchmark, data_source),
/// runs in the order given, iterations ascending.
pub fn breakdown_table(runs_dir: &Path, runs: &[String]) -> Result<DataFrame> {
    let mut frames = Vec::new();
    for (i, name) in runs.iter().enumerate() {
        let run = runs_dir.join(name);
        for it in layout::iterations(&run) {
            for stage in [Stage::Score, Stage::Eval] {
                if readable(&run, it, stage) {
                    let path = layout::output_path(&run, it, stage);
                    frames.push(scan(&path, stage, i as u32, name, it)?);
                }
            }
        }
    }
    if frames.is_empty() {
        let empty: Vec<Column> = BREAKDOWN_COLUMNS
            .iter()
            .map(|c| Column::new_empty((*c).into(), &DataType::String))
            .collect();
        return DataFrame::new_infer_height(empty).map_err(polars_err(runs_dir));
    }
    concat(frames, UnionArgs::default())
        .map_err(polars_err(runs_dir))?
        .group_by([
            col("run_idx"),
            col("run"),
            col("iter"),
            col("benchmark"),
            col("data_source"),
        ])
        .agg([
            col("correct")
                .count()
                .cast(DataType::UInt32)
                .alias("responses"),
            col("correct").mean().alias("accuracy"),
        ])
        .sort(
            ["run_idx", "iter", "benchmark", "data_source"],
            SortMultipleOptions::default().with_nulls_last(true),
        )
        .select(
            BREAKDOWN_COLUMNS
                .iter()
                .map(|c| col(*c))
                .collect::<Vec<_>>(),
        )
        .collect()
        .map_err(polars_err(runs_dir))
}

/// Whether the breakdown says more than the main table: some iteration has answers from
/// more than one (benchmark, data_source) on the same side (training or held-out).
pub fn informative(df: &DataFrame) -> bool {
    let Ok(grouped) = df
        .clone()
        .lazy()
        .with_column(col("benchmark").eq(lit("train")).alias("train"))
        .group_by([col("run"), col("iter"), col("train")])
        .agg([len().alias("groups")])
        .filter(col("groups").gt(lit(1)))
        .collect()
    else {
        return false;
    };
    grouped.height() > 0
}

/// The breakdown as fixed-width text.
pub fn to_text(df: &DataFrame) -> String {
    let text = |c: &str, r: usize| -> String {
        let Ok(col) = df.column(c) else {
            return String::new();
        };
        match col.get(r) {
            Ok(AnyValue::Null) | Err(_) => "-".into(),
            Ok(AnyValue::String(s)) => s.to_string(),
            Ok(AnyValue::StringOwned(s)) => s.to_string(),
            Ok(v) => match v.extract::<f64>() {
                Some(x) if c == "accuracy" => format!("{x:.4}"),
                Some(x) => format!("{x:.0}"),
                None => v.to_string(),
            },
        }
    };
    let mut out = format!(
        "{:>10} {:>5}  {:<20} {:<20} {:>9} {:>8}\n",
        "run", "iter", "benchmark", "data_source", "responses", "accuracy"
    );
    for r in 0..df.height() {
        out += &format!(
            "{:>10} {:>5}  {:<20} {:<20} {:>9} {:>8}\n",
            text("run", r),
            text("iter", r),
            text("benchmark", r),
            text("data_source", r),
            text("responses", r),
            text("accuracy", r)
        );
    }
    out
}
