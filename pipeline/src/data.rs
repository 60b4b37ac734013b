//! Prompt datasets: the built-in tiny-arith generator, JSONL / Parquet in the simple layout
//! (`id`, `problem`, `answer`, optional `data_source`), and the seeded per-iteration draw.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_data::{problems, prompt_rows, Split};
use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::PromptRow;

/// Fixed seed of the generated tiny-arith dataset, so every run sees the same problems.
const TINY_DATA_SEED: u64 = 20_260_101;
/// Fixed seed of the held-out problems.
const TINY_TEST_SEED: u64 = 7;

/// Loads the training prompts named by `data.source`.
pub fn load_prompts(source: &str, train_size: usize) -> Result<Vec<PromptRow>> {
    if source == "tiny-arith" {
        return Ok(prompt_rows(&problems(
            Split::Train,
            train_size,
            TINY_DATA_SEED,
        )));
    }
    read_prompt_file(Path::new(source))
}

/// Held-out tiny-arith problems.
pub fn tiny_test_prompts(n: usize) -> Vec<PromptRow> {
    prompt_rows(&problems(Split::Test, n, TINY_TEST_SEED))
}

fn json_str(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads JSONL (one object per line) or Parquet prompts; errors name the file, the line
/// and the missing field.
pub fn read_prompt_file(path: &Path) -> Result<Vec<PromptRow>> {
    let name = path.display().to_string();
    if path.extension().is_some_and(|e| e == "parquet") {
        let rows = read_prompt_parquet(path)?;
        let places: Vec<String> = (1..=rows.len()).map(|i| format!("row {i}")).collect();
        check_prompts(&name, &rows, &places)?;
        return Ok(rows);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read prompts {name}"))?;
    let (mut out, mut places) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        places.push(format!("line {}", i + 1));
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{name}:{}: not JSON", i + 1))?;
        let field = |k: &str| -> Result<String> {
            v.get(k)
                .and_then(json_str)
                .with_context(|| format!("{name}:{}: missing field `{k}`", i + 1))
        };
        out.push(PromptRow {
            id: field("id")?,
            problem: field("problem")?,
            answer: field("answer")?,
            data_source: v.get("data_source").and_then(json_str),
            system: v.get("system").and_then(json_str),
        });
    }
    check_prompts(&name, &out, &places)?;
    Ok(out)
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

/// The prompts of iteration `iter` (1-based): consecutive slices of seeded per-epoch
/// permutations, so the draw depends only on (seed, iteration), never on sharding.
pub fn draw(prompts: &[PromptRow], per_iter: usize, seed: u64, iter: u32) -> Vec<PromptRow> {
    let n = prompts.len();
    if n == 0 {
        return Vec::new();
    }
    let start = (iter.saturating_sub(1) as usize) * per_iter;
    let mut perm_epoch = usize::MAX;
    let mut perm: Vec<usize> = Vec::new();
    let mut out = Vec::with_capacity(per_iter);
    for k in start..start + per_iter.min(n) {
        let epoch = k / n;
        if epoch != perm_epoch {
            perm = (0..n).collect();
            let mut rng = Rng::new(seed_for(seed, epoch as u32, "prompts", "", 0));
            for i in (1..n).rev() {
                perm.swap(i, rng.below(i as u64 + 1) as usize);
            }
            perm_epoch = epoch;
        }
        out.push(prompts[perm[k % n]].clone());
    }
    out
}

/// Parquet prompts: the simple layout (`id`, `problem`, `answer`) or verl's RL layout
/// (`prompt` as a list of `{role, content}`, `reward_model.ground_truth`, `data_source`,
/// `extra_info.index`), detected from the columns.
pub fn read_prompt_parquet(path: &Path) -> Result<Vec<PromptRow>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let name = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open prompts {name}"))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{name}: not a readable Parquet file"))?;
    let schema = builder.schema().clone();
    let has = |c: &str| schema.field_with_name(c).is_ok();
    if has("problem") || has("id") {
        return deltarl_schemas::read_foreign_path::<PromptRow>(path).map_err(Into::into);
    }
    if !(has("prompt") && has("reward_model")) {
        bail!(
            "{name}: neither the simple layout (id, problem, answer) nor verl's (prompt, \
             reward_model.ground_truth): missing field `{}`",
            if has("prompt") {
                "reward_model"
            } else {
                "prompt"
            }
        );
    }
    let mut out = Vec::new();
    for batch in builder.build()? {
        let batch = batch.with_context(|| format!("{name}: cannot decode"))?;
        verl_rows(&name, &batch, &mut out)?;
    }
    Ok(out)
}

fn strings(name: &str, field: &str, a: &arrow::array::ArrayRef) -> Result<Vec<Option<String>>> {
    use arrow::array::{Array, StringArray};
    use arrow::datatypes::DataType;
    let c = arrow::compute::cast(a, &DataType::Utf8)
        .with_context(|| format!("{name}: field `{field}` ({}) is not text", a.data_type()))?;
    let s = c
        .as_any()
        .downcast_ref::<StringArray>()
        .with_context(|| format!("{name}: field `{field}` is not text"))?;
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

fn struct_field(
    name: &str,
    col: &arrow::array::ArrayRef,
    parent: &str,
    field: &str,
) -> Result<arrow::array::ArrayRef> {
    use arrow::array::StructArray;
    let st = col
        .as_any()
        .downcast_ref::<StructArray>()
        .with_context(|| {
            format!(
                "{name}: field `{parent}` is {}, expected a struct",
                col.data_type()
            )
        })?;
    st.column_by_name(field)
        .cloned()
        .with_context(|| format!("{name}: missing field `{parent}.{field}`"))
}

fn verl_rows(
    name: &str,
    batch: &arrow::record_batch::RecordBatch,
    out: &mut Vec<PromptRow>,
) -> Result<()> {
    use arrow::array::{Array, LargeListArray, ListArray};
    let n = batch.num_rows();
    let col = |c: &str| batch.column_by_name(c).cloned();
    let prompt = col("prompt").with_context(|| format!("{name}: missing field `prompt`"))?;
    // Offsets and flattened messages of the `prompt` list, whatever its offset width.
    let (offsets, messages): (Vec<usize>, arrow::array::ArrayRef) =
        if let Some(l) = prompt.as_any().downcast_ref::<ListArray>() {
            (
                l.value_offsets().iter().map(|&o| o as usize).collect(),
                l.values().clone(),
            )
        } else if let Some(l) = prompt.as_any().downcast_ref::<LargeListArray>() {
            (
                l.value_offsets().iter().map(|&o| o as usize).collect(),
                l.values().clone(),
            )
        } else {
            bail!(
                "{name}: field `prompt` is {}, expected a list of {{role, content}}",
                prompt.data_type()
            );
        };
    let roles = strings(
        name,
        "prompt.role",
        &struct_field(name, &messages, "prompt", "role")?,
    )?;
    let contents = strings(
        name,
        "prompt.content",
        &struct_field(name, &messages, "prompt", "content")?,
    )?;
    let rm =
        col("reward_model").with_context(|| format!("{name}: missing field `reward_model`"))?;
    let gold = strings(
        name,
        "reward_model.ground_truth",
        &struct_field(name, &rm, "reward_model", "ground_truth")?,
    )?;
    let source = match col("data_source") {
        Some(c) => strings(name, "data_source", &c)?,
        None => vec![None; n],
    };
    let index = match col("extra_info") {
        Some(c) => match struct_field(name, &c, "extra_info", "index") {
            Ok(i) => strings(name, "extra_info.index", &i)?,
            Err(_) => vec![None; n],
        },
        None => vec![None; n],
    };
    for i in 0..n {
        let (lo, hi) = (offsets[i], offsets[i + 1]);
        // The question is the last user message (verl prompts may carry a system turn).
        let question = (lo..hi)
            .rev()
            .find(|&m| roles[m].as_deref() == Some("user"))
            .or((lo < hi).then(|| hi - 1))
            .and_then(|m| contents[m].clone())
            .with_context(|| format!("{name}: row {}: `prompt` has no message", out.len()))?;
        let answer = gold[i].clone().with_context(|| {
            format!(
                "{name}: row {}: null `reward_model.ground_truth`",
                out.len()
            )
        })?;
        let id = match (&source[i], &index[i]) {
            (Some(s), Some(k)) => format!("{s}-{k}"),
            (None, Some(k)) => k.clone(),
            _ => format!("row-{}", out.len()),
        };
        // System turns go to the chat template (when one is applied) before the question.
        let system: Vec<String> = (lo..hi)
            .filter(|&m| roles[m].as_deref() == Some("system"))
            .filter_map(|m| contents[m].clone())
            .collect();
        out.push(PromptRow {
            id,
            problem: question,
            answer,
            data_source: source[i].clone(),
            system: (!system.is_empty()).then(|| system.join("\n\n")),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_cover_an_epoch_without_repeats() {
        let prompts = load_prompts("tiny-arith", 100).unwrap();
        let mut seen = std::collections::HashSet::new();
        for it in 1..=5 {
            for p in draw(&prompts, 20, 3, it) {
                assert!(seen.insert(p.id));
            }
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 3, 2));
        assert_ne!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 4, 2));
    }

    #[test]
    fn reads_simple_and_verl_parquet_written_by_polars() {
        let dir = tempfile::tempdir().unwrap();
        let (simple, verl, bad) = (
            dir.path().join("s.parquet"),
            dir.path().join("v.parquet"),
            dir.path().join("b.parquet"),
        );
        let script = r#"
import sys, polars as pl
s, v, b = sys.argv[1:4]
pl.DataFrame({"id": ["a", "b"], "problem": ["1+1", "2+2"], "answer": ["2", "4"]}).write_parquet(s)
pl.DataFrame({
    "data_source": ["gsm8k", "gsm8k"],
    "prompt": [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}],
               [{"role": "user", "content": "2+3?"}]],
    "reward_model": [{"style": "rule", "ground_truth": "2"}, {"style": "rule", "ground_truth": "5"}],
    "extra_info": [{"index": 0, "split": "test"}, {"index": 1, "split": "test"}],
}).write_parquet(v)
pl.DataFrame({"prompt": [[{"role": "user", "content": "x"}]]}).write_parquet(b)
pl.DataFrame(schema={"id": pl.String, "problem": pl.String, "answer": pl.String}).write_parquet(b + ".empty.parquet")
pl.DataFrame({"id": ["a", "b", "a"], "problem": ["x", "y", "z"], "answer": ["1", "2", "3"]}).write_parquet(b + ".dup.parquet")
"#;
        let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = std::process::Command::new(py)
            .arg("-c")
            .arg(script)
            .arg(&simple)
            .arg(&verl)
            .arg(&bad)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = read_prompt_file(&simple).unwrap();
        assert_eq!((s[1].id.as_str(), s[1].answer.as_str()), ("b", "4"));
        let v = read_prompt_file(&verl).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(
            (
                v[0].id.as_str(),
                v[0].problem.as_str(),
                v[0].answer.as_str()
            ),
            ("gsm8k-0", "1+1?", "2")
        );
        // The system turn is kept for the chat template; a prompt without one has none.
        assert_eq!(v[0].system.as_deref(), Some("be brief"));
        assert_eq!(v[1].system, None);
        assert_eq!(s[0].system, None);
        assert_eq!(v[1].answer, "5");
        let err = format!("{:#}", read_prompt_file(&bad).unwrap_err());
        assert!(
            err.contains("b.parquet") && err.contains("reward_model"),
            "{err}"
        );
        // An empty dataset is refused as an empty JSONL is; so are repeated ids.
        let empty = dir.path().join("b.parquet.empty.parquet");
        let err = format!("{:#}", read_prompt_file(&empty).unwrap_err());
        assert!(err.contains("no prompts"), "{err}");
        let dup = dir.path().join("b.parquet.dup.parquet");
        let err = format!("{:#}", read_prompt_file(&dup).unwrap_err());
        assert!(
            err.contains("\"a\" appears twice (row 1 and row 3)"),
            "{err}"
        );
    }

    #[test]
    fn jsonl_errors_name_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        std::fs::write(
            &p,
            "{\"id\": 1, \"problem\": \"a\", \"answer\": \"2\"}\n{\"id\": 2, \"problem\": \"b\"}\n",
        )
        .unwrap();
        let err = format!("{:#}", read_prompt_file(&p).unwrap_err());
        assert!(err.contains("x.jsonl:2: missing field `answer`"), "{err}");
        std::fs::write(
            &p,
            "{\"id\": 7, \"problem\": \"a\", \"answer\": \"2\"}\n\n{\"id\": \"7\", \"problem\": \"b\", \"answer\": \"3\"}\n",
        )
        .unwrap();
        let err = format!("{:#}", read_prompt_file(&p).unwrap_err());
        assert!(
            err.contains("\"7\" appears twice (line 1 and line 3)"),
            "{err}"
        );
        std::fs::write(&p, "\n").unwrap();
        let err = format!("{:#}", read_prompt_file(&p).unwrap_err());
        assert!(err.contains("no prompts"), "{err}");
    }
}
