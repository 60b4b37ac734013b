//! Prompt datasets: the built-in tasks and JSONL / Parquet files in the layouts users bring
//! (ours, verl's RL data, TRL's prompt datasets). Which of them an iteration draws is
//! `epochs`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_data::Source;
use deltarl_schemas::PromptRow;

use crate::rewards::Routing;

/// Loads the training prompts named by `data.source`: a built-in task or a file, each
/// record's reward decided by `routing`.
pub fn load_prompts(
    source: &Source,
    train_size: usize,
    routing: &Routing,
) -> Result<Vec<PromptRow>> {
    match source {
        Source::Builtin(builtin) => Ok(builtin.train_prompts(train_size)),
        Source::File(path) => read_prompt_file(path, routing),
    }
}

/// A benchmark file's prompts. A benchmark is routed by its records alone (their own
/// `reward_kind`, verl's `ability`, a code layout), not by `data.rewards`, which names
/// training sources.
pub fn read_benchmark(path: &Path) -> Result<Vec<PromptRow>> {
    read_prompt_file(path, &Routing::default())
}

/// The benchmark a file holds: its name without the extension (`aime24.jsonl` -> `aime24`).
pub fn benchmark_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads JSONL (one object per line) or Parquet prompts in any of the layouts
/// [`crate::record::prompt_row`] knows; errors name the file, the line (or row) and the missing field.
pub fn read_prompt_file(path: &Path, routing: &Routing) -> Result<Vec<PromptRow>> {
    let (mut out, mut places) = (Vec::new(), Vec::new());
    each_prompt(path, routing, |row, place| {
        out.push(row);
        places.push(place.to_string());
        Ok(())
    })?;
    check_prompts(&path.display().to_string(), &out, &places)?;
    Ok(out)
}

/// Calls `f` on each record of a JSONL or Parquet prompt file, read as a prompt row, with
/// where it is (`line 3`, `row 12`), one Parquet batch in memory at a time. Errors name the
/// file and the place (`file:3` for a JSONL line, `file: row 12` for a Parquet row).
pub(crate) fn each_prompt(
    path: &Path,
    routing: &Routing,
    mut f: impl FnMut(PromptRow, &str) -> Result<()>,
) -> Result<()> {
    let name = path.display().to_string();
    let mut one = |v: &serde_json::Value, place: &str| -> Result<()> {
        let at = place
            .strip_prefix("line ")
            .map_or_else(|| format!("{name}: {place}"), |l| format!("{name}:{l}"));
        let row =
            crate::record::prompt_row(v, routing).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        f(row, place).with_context(|| at.clone())
    };
    if path.extension().is_some_and(|e| e == "parquet") {
        let mut n = 0;
        each_parquet_batch(path, |records| {
            for v in &records {
                n += 1;
                one(v, &format!("row {n}"))?;
            }
            Ok(())
        })
    } else {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read prompts {name}"))?;
        for (i, line) in without_bom(&text).lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).with_context(|| {
                format!(
                    "{name}:{}: not JSON (a data file is JSONL, one JSON object a line, \
                         or Parquet)",
                    i + 1
                )
            })?;
            one(&v, &format!("line {}", i + 1))?;
        }
        Ok(())
    }
}

/// Why `path`, which is not a file, cannot be read: a folder, or nothing at all.
pub(crate) fn not_a_file(path: &Path) -> &'static str {
    if path.is_dir() {
        "a folder, not a file"
    } else {
        "no such file"
    }
}

/// Why `out` cannot take a command's output file, checked before any work: it is a
/// folder, or one of the `inputs` (which the output, written whole under its name, would
/// replace). A folder that does not exist yet is made when the file is written.
pub(crate) fn unfit_output(out: &Path, inputs: &[&Path]) -> Option<String> {
    if out.is_dir() {
        return Some("a folder; name a file in it".into());
    }
    let out = out.canonicalize().ok()?;
    let same = |input: &&Path| input.canonicalize().is_ok_and(|i| i == out);
    inputs.iter().copied().find(same).map(|input| {
        format!(
            "that is the input {}, which the output would replace; name another file",
            input.display()
        )
    })
}

/// Text without the byte-order mark some Windows tools write at the start of a UTF-8 file:
/// JSON has no place for it, and it carries no information in UTF-8, so a JSONL file that
/// starts with one is read as the same file without it.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// The rows of a Parquet file as JSON objects, one record batch at a time (arrow's JSON
/// writer: nested lists and structs become arrays and objects, nulls are left out).
fn each_parquet_batch(
    path: &Path,
    mut f: impl FnMut(Vec<serde_json::Value>) -> Result<()>,
) -> Result<()> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let name = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open prompts {name}"))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{name}: not a readable Parquet file"))?
        .build()
        .with_context(|| format!("{name}: not a readable Parquet file"))?;
    for batch in reader {
        let batch = batch.with_context(|| format!("{name}: cannot decode"))?;
        let mut w = arrow::json::ArrayWriter::new(Vec::new());
        w.write(&batch)
            .and_then(|()| w.finish())
            .with_context(|| format!("{name}: cannot convert rows to JSON"))?;
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&w.into_inner())
            .with_context(|| format!("{name}: cannot convert rows to JSON"))?;
        f(rows)?;
    }
    Ok(())
}

/// A dataset must have prompts, and ids that tell them apart (every later table is keyed
/// by the id). `places[i]` says where prompt `i` is in the file.
fn check_prompts(name: &str, rows: &[PromptRow], places: &[String]) -> Result<()> {
    if rows.is_empty() {
        bail!("{name}: no prompts");
    }
    let mut seen = std::collections::HashMap::new();
    for (i, p) in rows.iter().enumerate() {
        if let Some(first) = seen.insert(p.id.as_str(), i) {
            bail!(
                "{name}: id {:?} appears twice ({} and {}); ids must be unique",
                p.id,
                places[first],
                places[i]
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
